"""W-projection table gridding (Romein/Merry): the ``Gridder`` family, on the core.

User-supplied convolution functions (tables, w-projection kernels) rather
than the ES kernel, gridded by the gridding core (:mod:`clgrid.core.table`,
:mod:`clgrid.core.register`): no engine of its own.

==================  ==========================================================
module              holds
==================  ==========================================================
``gcf``             convolution-function tables (separable, w-projection, user)
``checks``          input checks and the coordinate conventions
``dispatch``        which spread of the core for which device (:func:`choose`)
``core_strategy``   the gridders' set points, spread and interpolation on the core
``tunecache``       the per-device autotune cache (read and store)
``gridder``         :class:`Gridder`
``degridder``       :class:`Degridder` (the adjoint)
``streaming``       :class:`StreamingGridder` (blocks of rows)
``tuning``          ``clgrid tune``: times register geometries, fills the cache
==================  ==========================================================

Dependencies run down this table's reverse: ``gridder`` uses ``dispatch``,
``core_strategy`` and ``tunecache``; none of them imports ``gridder``.
"""
