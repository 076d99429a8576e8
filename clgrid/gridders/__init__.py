"""W-projection table gridding (Romein/Merry): the ``Gridder`` family, on the core.

User-supplied convolution functions (tables, w-projection kernels) rather
than the ES kernel, gridded by the gridding core's one engine
(:func:`clgrid.core.strategies.table_engine` picks its stages from
:mod:`clgrid.core.table` and :mod:`clgrid.core.register`): no engine of its
own; what is here is the host side (checks, uploads, statistics) and the
choice of spread.

==================  ==========================================================
module              holds
==================  ==========================================================
``gcf``             convolution-function tables (separable, w-projection, user)
``checks``          input checks and the coordinate conventions
``dispatch``        which spread of the core for which device (:func:`choose`)
``gridder``         :class:`Gridder`
``degridder``       :class:`Degridder` (the adjoint)
``streaming``       :class:`StreamingGridder` (blocks of rows)
==================  ==========================================================

Dependencies run down this table's reverse: ``gridder`` uses ``dispatch``,
which does not import ``gridder``.  Its tuning cache (the
register spread's geometry, ``register_params='auto'``) is read from
:mod:`clgrid.core.tuning.register`; ``clgrid tune table`` (:mod:`clgrid.tuning`)
fills it.
"""
