"""W-projection table gridding (Romein/Merry): the ``Gridder`` family.

A second engine beside :mod:`clgrid.core`, for user-supplied convolution
functions (tables, w-projection kernels) rather than the ES kernel.

==============  ==============================================================
module          holds
==============  ==============================================================
``gcf``         convolution-function tables (separable, w-projection, user)
``uvprep``      per-record plan: table indices, grid positions, validity
``params``      :class:`GridderParams`, :class:`ImageParams`, defaults
``tunecache``   the per-device autotune cache (read and store)
``tiled``       the tiled strategy (local-memory tiles, no float atomics)
``image_gcf``   the GCF as an OpenCL image (the ``image`` strategy)
``dispatch``    which strategy for which device and problem (:func:`choose`)
``gridder``     :class:`Gridder`
``degridder``   :class:`Degridder` (the adjoint)
``streaming``   :class:`StreamingGridder` (records in chunks)
``tuning``      ``clgrid tune``: times candidates, fills the cache
==============  ==============================================================

Dependencies run down this table's reverse: ``gridder`` uses ``dispatch``,
``tiled``, ``image_gcf`` and ``tunecache``; none of them imports ``gridder``.
"""
