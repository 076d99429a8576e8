"""Single-dish gridding on the sphere (cygrid's API, HyGrid's algorithm), on OpenCL.

============  ==================================================================
module        holds
============  ==================================================================
``healpix``   HEALPix pixel arithmetic (numpy twin of ``templates/healpix.cl.mako``)
``preorder``  samples checked, binned into RING pixels and sorted on the device;
              pinned staging of the caller's arrays
``gather``    :class:`HealpixGather`, the one-writer-per-cell gather kernel
``gridding``  :class:`WcsGrid`, :class:`SlGrid` (cygrid's API) over both
``reference`` :func:`gather_reference`, the float64 brute force tests compare with
``compat``    cygrid 2.0.4's HEALPix arithmetic bit for bit: ``Healpix`` (cygrid's
              API, also as ``healpix.Healpix``) and the selection of
              ``compat="cygrid"``
============  ==================================================================
"""

from .gather import HealpixGather, ShapeError
from .gridding import SlGrid, WcsGrid
from .reference import gather_reference

__all__ = ["HealpixGather", "ShapeError", "SlGrid", "WcsGrid", "gather_reference"]
