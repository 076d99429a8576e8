"""``ducc0.wgridder``'s module layout on clgrid: swap the import, keep the calls.

::

    import clgrid.wgridder as wgridder          # was: import ducc0.wgridder as wgridder
    dirty = wgridder.ms2dirty(uvw, freq, ms, wgt, npix_x, npix_y, pixsize_x,
                              pixsize_y, 0, 0, epsilon, do_wstacking)
    from clgrid.wgridder.experimental import vis2dirty, dirty2vis

:func:`ms2dirty` and :func:`dirty2ms` are ducc0's legacy calls, positional
arguments in ducc0's order (``nu``, ``nv`` obsolete and ignored there and
here; the precision follows ``ms`` / ``dirty`` as in ducc0); they run
:func:`clgrid.vis2dirty` / :func:`clgrid.dirty2vis`, so the results are the
same bits.  ``experimental`` holds ``vis2dirty`` and ``dirty2vis`` (ducc0's
``wgridder.experimental`` keyword calls, which are clgrid's own).  Every call
also takes clgrid's keywords (``queue=``, ``context=``, ``devices=``,
``deterministic=``).  ducc0's ``vis2dirty_tuning`` / ``dirty2vis_tuning``
(its faceting autotuner) have no counterpart yet.
"""

from __future__ import annotations

import sys
import types

from .entry import dirty2vis, vis2dirty


def _required(name: str, value):
    if value is None:
        raise TypeError(f"missing required argument {name!r}")
    return value


def ms2dirty(uvw, freq, ms, wgt=None, npix_x=None, npix_y=None, pixsize_x=None,
             pixsize_y=None, nu=0, nv=0, epsilon=None, do_wstacking=False, nthreads=1,
             verbosity=0, mask=None, double_precision_accumulation=False, **options):
    """Dirty image of ``ms`` (nrow, nchan): ``ducc0.wgridder.ms2dirty``'s call.

    Arguments in ducc0's order; ``nu`` and ``nv`` are ignored (obsolete in
    ducc0 too); ``options``: clgrid's keywords (``queue``, ``context``,
    ``devices``, ``deterministic``).  Returns (npix_x, npix_y) of ``ms``'s
    precision.
    """
    return vis2dirty(
        uvw=uvw, freq=freq, vis=ms, wgt=wgt, mask=mask,
        npix_x=_required("npix_x", npix_x), npix_y=_required("npix_y", npix_y),
        pixsize_x=_required("pixsize_x", pixsize_x),
        pixsize_y=_required("pixsize_y", pixsize_y), epsilon=_required("epsilon", epsilon),
        do_wgridding=bool(do_wstacking), nthreads=nthreads, verbosity=verbosity,
        double_precision_accumulation=double_precision_accumulation, **options)


def dirty2ms(uvw, freq, dirty, wgt=None, pixsize_x=None, pixsize_y=None, nu=0, nv=0,
             epsilon=None, do_wstacking=False, nthreads=1, verbosity=0, mask=None,
             **options):
    """Visibilities (nrow, nchan) of ``dirty``: ``ducc0.wgridder.dirty2ms``'s call.

    Arguments in ducc0's order; ``nu`` and ``nv`` are ignored; ``options`` as
    for :func:`ms2dirty`.  Returns complex of ``dirty``'s precision.
    """
    return dirty2vis(
        uvw=uvw, freq=freq, dirty=dirty, wgt=wgt, mask=mask,
        pixsize_x=_required("pixsize_x", pixsize_x),
        pixsize_y=_required("pixsize_y", pixsize_y), epsilon=_required("epsilon", epsilon),
        do_wgridding=bool(do_wstacking), nthreads=nthreads, verbosity=verbosity, **options)


#: ``clgrid.wgridder.experimental``: ducc0's keyword calls (clgrid's own).
experimental = types.ModuleType(__name__ + ".experimental", "ducc0.wgridder.experimental's "
                                "vis2dirty and dirty2vis: clgrid.vis2dirty and clgrid.dirty2vis.")
experimental.vis2dirty = vis2dirty
experimental.dirty2vis = dirty2vis
experimental.__all__ = ["dirty2vis", "vis2dirty"]
sys.modules[experimental.__name__] = experimental

__all__ = ["dirty2ms", "experimental", "ms2dirty"]
