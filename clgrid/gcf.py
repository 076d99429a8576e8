"""``clgrid.gcf`` as before the package was layered: :mod:`clgrid.gridders.gcf` itself.

Kept so that ``from clgrid.gcf import separable_gcf`` keeps working; new code
imports :mod:`clgrid.gridders.gcf`.
"""

import sys

from .gridders import gcf as _gcf

sys.modules[__name__] = _gcf
