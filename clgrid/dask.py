"""``clgrid.dask`` as before the package was layered: :mod:`clgrid.scaleout.dask` itself.

Kept so that ``import clgrid.dask`` keeps working (it imports dask, so
``import clgrid`` does not load it); new code imports :mod:`clgrid.scaleout.dask`.
"""

import sys

from .scaleout import dask as _dask

sys.modules[__name__] = _dask
