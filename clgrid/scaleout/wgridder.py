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
``wgridder.experimental`` keyword calls, which are clgrid's own) and
:func:`vis2dirty_bda` / :func:`dirty2vis_bda`, ducc0's calls for
baseline-dependent averaging (each row its own list of channel frequencies,
the visibilities one flat array).  Every call also takes clgrid's keywords
(``queue=``, ``context=``, ``devices=``, ``deterministic=``).  ducc0's
``vis2dirty_tuning`` / ``dirty2vis_tuning`` (its faceting autotuner of ducc0
0.3x, gone from ducc0 0.42) have no counterpart.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from ..core.plan import SPEED_OF_LIGHT, ImageGeometry, check_uvw
from .entry import dirty2vis, vis2dirty


def _required(name: str, value):
    if value is None:
        raise TypeError(f"missing required argument {name!r}")
    return value


def ms2dirty(uvw, freq, ms, wgt=None, npix_x=None, npix_y=None, pixsize_x=None,
             pixsize_y=None, nu=0, nv=0, epsilon=None, do_wstacking=False, nthreads=1,
             verbosity=0, mask=None, double_precision_accumulation=False, *, context=None,
             queue=None, devices=None, deterministic: bool = True):
    """Dirty image of ``ms`` (nrow, nchan): ``ducc0.wgridder.ms2dirty``'s call.

    Arguments in ducc0's order; ``nu`` and ``nv`` are ignored (obsolete in
    ducc0 too); ``context``, ``queue``, ``devices``, ``deterministic``:
    clgrid's keywords, as for :func:`clgrid.vis2dirty`.  Returns (npix_x,
    npix_y) of ``ms``'s precision.
    """
    return vis2dirty(
        uvw=uvw, freq=freq, vis=ms, wgt=wgt, mask=mask,
        npix_x=_required("npix_x", npix_x), npix_y=_required("npix_y", npix_y),
        pixsize_x=_required("pixsize_x", pixsize_x),
        pixsize_y=_required("pixsize_y", pixsize_y), epsilon=_required("epsilon", epsilon),
        do_wgridding=bool(do_wstacking), nthreads=nthreads, verbosity=verbosity,
        double_precision_accumulation=double_precision_accumulation, context=context,
        queue=queue, devices=devices, deterministic=deterministic)


def dirty2ms(uvw, freq, dirty, wgt=None, pixsize_x=None, pixsize_y=None, nu=0, nv=0,
             epsilon=None, do_wstacking=False, nthreads=1, verbosity=0, mask=None, *,
             context=None, queue=None, devices=None, deterministic: bool = True):
    """Visibilities (nrow, nchan) of ``dirty``: ``ducc0.wgridder.dirty2ms``'s call.

    Arguments in ducc0's order; ``nu`` and ``nv`` are ignored; clgrid's
    keywords as for :func:`ms2dirty`.  Returns complex of ``dirty``'s precision.
    """
    return dirty2vis(
        uvw=uvw, freq=freq, dirty=dirty, wgt=wgt, mask=mask,
        pixsize_x=_required("pixsize_x", pixsize_x),
        pixsize_y=_required("pixsize_y", pixsize_y), epsilon=_required("epsilon", epsilon),
        do_wgridding=bool(do_wstacking), nthreads=nthreads, verbosity=verbosity,
        context=context, queue=queue, devices=devices, deterministic=deterministic)


def _index_array(values, name: str, ndim: int = 1) -> np.ndarray:
    """A 1-D array of non-negative integers (ducc0's uint64 arguments) as int64."""
    array = np.asarray(values)
    if array.ndim != ndim:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers (ducc0: uint64), got {array.dtype}")
    array = array.astype(np.int64)
    if array.size and array.min() < 0:
        raise ValueError(f"{name} must be non-negative")
    return array


def bda_rows(uvw, freqlist_id, freqlist_nfreqs, freqlist_freqs) -> np.ndarray:
    """Each visibility of a BDA data set as a row of its own, in wavelengths.

    ducc0's BDA layout: row ``r`` has the ``freqlist_nfreqs[freqlist_id[r]]``
    frequencies of its list (the lists concatenated in ``freqlist_freqs`` in
    order of id) and its visibilities follow those of row ``r - 1`` in the
    flat ``vis``.  Returns (nvis, 3) float64: ``uvw[r] * (f / c)`` per
    visibility, the product ducc0 forms (``Baselines::effectiveCoord``), to
    be imaged with the one frequency ``c`` (whose ``f / c`` is exactly 1).
    ducc0's checks, as one-line errors: ids start at 0 within the lists,
    enough frequencies, each list's first frequency positive and the list
    ascending.
    """
    uvw = check_uvw(uvw, allow_empty=True)
    ids = _index_array(freqlist_id, "freqlist_id")
    nfreqs = _index_array(freqlist_nfreqs, "freqlist_nfreqs")
    freqs = np.asarray(freqlist_freqs, np.float64)
    if freqs.ndim != 1:
        raise ValueError(f"freqlist_freqs must be 1-D, got shape {freqs.shape}")
    if ids.size != uvw.shape[0]:
        raise ValueError(f"freqlist_id has {ids.size} entries for {uvw.shape[0]} uvw rows")
    max_id = int(ids.max()) if ids.size else 0
    if max_id + 1 > nfreqs.size:
        raise ValueError(f"freqlist_nfreqs has {nfreqs.size} entries; freqlist_id needs "
                         f"{max_id + 1}")
    starts = np.concatenate([[0], np.cumsum(nfreqs[:max_id + 1])])
    if freqs.size < starts[-1]:
        raise ValueError(f"freqlist_freqs has {freqs.size} frequencies; the lists need "
                         f"{int(starts[-1])}")
    if not np.all(np.isfinite(freqs[:starts[-1]])):
        raise ValueError("freqlist_freqs contains NaN or Inf")
    for first, end in zip(starts[:-1], starts[1:]):
        if end > first and not freqs[first] > 0:
            raise ValueError("freqlist_freqs: a list starts with a frequency <= 0")
        if np.any(np.diff(freqs[first:end]) < 0):
            raise ValueError("freqlist_freqs: each list must be in ascending order")
    counts = nfreqs[ids]
    rows = np.repeat(np.arange(ids.size), counts)
    channel = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
    f_over_c = freqs[starts[ids][rows] + channel] / SPEED_OF_LIGHT
    return uvw[rows] * f_over_c[:, None]


def _flat(values, name: str, nvis: int):
    """A BDA argument of (nvis,) as (nvis, 1), None kept."""
    if values is None:
        return None
    values = np.asarray(values)
    if values.shape != (nvis,):
        raise ValueError(f"{name} must have shape ({nvis},) (the visibilities of all rows), "
                         f"got {values.shape}")
    return values.reshape(nvis, 1)


#: The one frequency of :func:`bda_rows`'s rows: f / c == 1 exactly.
_UNIT_FREQ = np.array([SPEED_OF_LIGHT])


def vis2dirty_bda(*, uvw, freqlist_id, freqlist_nfreqs, freqlist_freqs, vis, wgt=None,
                  npix_x: int = 0, npix_y: int = 0, pixsize_x: float, pixsize_y: float,
                  epsilon: float, do_wgridding: bool = False, nthreads: int = 1,
                  verbosity: int = 0, mask=None, flip_u: bool = False, flip_v: bool = False,
                  flip_w: bool = False, divide_by_n: bool = True, dirty=None,
                  sigma_min: float = ImageGeometry.sigma_min,
                  sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
                  center_y: float = 0.0, allow_nshift: bool = True,
                  double_precision_accumulation: bool = False, context=None, queue=None,
                  devices=None, deterministic: bool = True) -> np.ndarray:
    """Dirty image of baseline-dependent-averaged visibilities:
    ``ducc0.wgridder.experimental.vis2dirty_bda``'s call.

    Parameters
    ----------
    uvw : (nrow, 3) float64
        Baselines in metres.
    freqlist_id : (nrow,) integers
        The frequency list of each row (ids from 0, no gaps).
    freqlist_nfreqs : (nid,) integers
        Frequencies in each list.
    freqlist_freqs : (sum(freqlist_nfreqs),) float64
        The lists' frequencies in Hz, concatenated in order of id, each list
        ascending.
    vis : (nvis,) complex64 or complex128
        All rows' visibilities, row after row (nvis = sum of the rows' list
        lengths); the precision follows it.
    wgt, mask : (nvis,), optional
        Weights (real of ``vis``'s precision) and flags (uint8, 0 drops).
    npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding
        As :func:`clgrid.vis2dirty` (ducc0's ``vis2dirty``).
    flip_u, flip_v, flip_w, divide_by_n, dirty, sigma_min, sigma_max
        As :func:`clgrid.vis2dirty`.
    center_x, center_y, double_precision_accumulation
        As :func:`clgrid.vis2dirty`.
    nthreads, verbosity, allow_nshift
        Accepted and ignored, as by :func:`clgrid.vis2dirty`.
    context, queue, devices, deterministic
        clgrid's keywords, as for :func:`clgrid.vis2dirty`.

    Returns
    -------
    numpy.ndarray
        (npix_x, npix_y) of ``vis``'s real precision (``dirty`` when given).

    Each visibility is gridded at its own ``uvw * f / c``
    (:func:`bda_rows`), as ducc0 does, in one :func:`clgrid.vis2dirty` call.
    """
    rows = bda_rows(uvw, freqlist_id, freqlist_nfreqs, freqlist_freqs)
    nvis = rows.shape[0]
    return vis2dirty(uvw=rows, freq=_UNIT_FREQ, vis=_flat(vis, "vis", nvis),
                     wgt=_flat(wgt, "wgt", nvis), mask=_flat(mask, "mask", nvis),
                     npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
                     epsilon=epsilon, do_wgridding=do_wgridding, nthreads=nthreads,
                     verbosity=verbosity, flip_u=flip_u, flip_v=flip_v, flip_w=flip_w,
                     divide_by_n=divide_by_n, dirty=dirty, sigma_min=sigma_min,
                     sigma_max=sigma_max, center_x=center_x, center_y=center_y,
                     allow_nshift=allow_nshift,
                     double_precision_accumulation=double_precision_accumulation,
                     context=context, queue=queue, devices=devices,
                     deterministic=deterministic)


def dirty2vis_bda(*, uvw, freqlist_id, freqlist_nfreqs, freqlist_freqs, dirty, wgt=None,
                  pixsize_x: float, pixsize_y: float, epsilon: float,
                  do_wgridding: bool = False, nthreads: int = 1, verbosity: int = 0,
                  mask=None, flip_u: bool = False, flip_v: bool = False, flip_w: bool = False,
                  divide_by_n: bool = True, vis=None,
                  sigma_min: float = ImageGeometry.sigma_min,
                  sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
                  center_y: float = 0.0, allow_nshift: bool = True, context=None,
                  queue=None, devices=None, deterministic: bool = True) -> np.ndarray:
    """Baseline-dependent-averaged visibilities of a dirty image:
    ``ducc0.wgridder.experimental.dirty2vis_bda``'s call, the adjoint of
    :func:`vis2dirty_bda`.

    Parameters
    ----------
    uvw, freqlist_id, freqlist_nfreqs, freqlist_freqs
        As :func:`vis2dirty_bda`.
    dirty : (npix_x, npix_y) float32 or float64
        The image; the precision follows it.
    wgt, mask : (nvis,), optional
        Weights and flags of the output visibilities.
    vis : (nvis,) complex, optional
        Filled and returned.
    pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u, flip_v, flip_w
        As :func:`clgrid.dirty2vis` (ducc0's ``dirty2vis``).
    divide_by_n, sigma_min, sigma_max, center_x, center_y
        As :func:`clgrid.dirty2vis`.
    nthreads, verbosity, allow_nshift
        Accepted and ignored.
    context, queue, devices, deterministic
        clgrid's keywords, as for :func:`clgrid.vis2dirty`.

    Returns
    -------
    numpy.ndarray
        (nvis,) complex of ``dirty``'s precision, row after row.
    """
    rows = bda_rows(uvw, freqlist_id, freqlist_nfreqs, freqlist_freqs)
    nvis = rows.shape[0]
    out = _flat(vis, "vis", nvis)
    result = dirty2vis(uvw=rows, freq=_UNIT_FREQ, dirty=dirty, wgt=_flat(wgt, "wgt", nvis),
                       mask=_flat(mask, "mask", nvis), pixsize_x=pixsize_x,
                       pixsize_y=pixsize_y, epsilon=epsilon, do_wgridding=do_wgridding,
                       nthreads=nthreads, verbosity=verbosity, flip_u=flip_u, flip_v=flip_v,
                       flip_w=flip_w, divide_by_n=divide_by_n, vis=out, sigma_min=sigma_min,
                       sigma_max=sigma_max, center_x=center_x, center_y=center_y,
                       allow_nshift=allow_nshift, context=context, queue=queue,
                       devices=devices, deterministic=deterministic)
    if vis is None:
        return result.reshape(nvis)
    if not np.shares_memory(result, vis):
        vis[...] = result.reshape(nvis)
    return vis


#: ``clgrid.wgridder.experimental``: ducc0's keyword calls (clgrid's own) and
#: its BDA calls.
experimental = types.ModuleType(__name__ + ".experimental", "ducc0.wgridder.experimental's "
                                "vis2dirty, dirty2vis, vis2dirty_bda and dirty2vis_bda on "
                                "clgrid.")
experimental.vis2dirty = vis2dirty
experimental.dirty2vis = dirty2vis
experimental.vis2dirty_bda = vis2dirty_bda
experimental.dirty2vis_bda = dirty2vis_bda
experimental.__all__ = ["dirty2vis", "dirty2vis_bda", "vis2dirty", "vis2dirty_bda"]
sys.modules[experimental.__name__] = experimental

__all__ = ["bda_rows", "dirty2ms", "dirty2vis_bda", "experimental", "ms2dirty",
           "vis2dirty_bda"]
