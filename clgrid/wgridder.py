"""``clgrid.wgridder``: ducc0.wgridder's module layout (:mod:`clgrid.scaleout.wgridder`).

``import clgrid.wgridder as wgridder`` in place of ``import ducc0.wgridder as
wgridder``; ``from clgrid.wgridder.experimental import vis2dirty`` works too.
"""

import sys

from .scaleout import wgridder as _wgridder

sys.modules[__name__] = _wgridder
sys.modules[__name__ + ".experimental"] = _wgridder.experimental
