"""Single-dish gridding on the sphere (cygrid's API, HyGrid's algorithm), on OpenCL.

``healpix``: HEALPix pixel arithmetic (numpy twin of ``templates/healpix.cl.mako``).
``gridding``: :class:`WcsGrid`, :class:`SlGrid`, :class:`HealpixGather` and the
brute-force :func:`gather_reference`.
"""

from .gridding import HealpixGather, ShapeError, SlGrid, WcsGrid, gather_reference

__all__ = ["HealpixGather", "ShapeError", "SlGrid", "WcsGrid", "gather_reference"]
