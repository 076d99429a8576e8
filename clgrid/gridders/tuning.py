"""Autotuning of the register spread's work distribution, with a per-device cache.

:func:`tune` times candidate :class:`~clgrid.core.register.RegisterParams`
(Merry's coarsening 1, 2, 4, 8 per axis within the register budget,
work-group sizes, records per group) on a small synthetic observation with
realistic tracks, checks that each variant gives the same grid, and stores
the fastest under the user cache directory, keyed by device (platform,
name, driver) and by parameter set (npol, precision, table kind, support
bucket), with the faster GCF read path (buffer or image, timed with the
winning geometry where the device holds the table as an image).
``Gridder(register_params='auto')`` reads the cache (geometry, and the
read path where ``gcf_read`` is not given) and falls back to
:func:`clgrid.core.register.default_register_params`: it never tunes on
its own.  (``clgrid tune-core`` tunes the ES imaging path's tiles.)
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pyopencl.array as cla
from tqdm.auto import tqdm

from ..core.register import MAX_REGISTER_SUMS, REGISTER_BLOCKS, RegisterParams
from .checks import SPEED_OF_LIGHT_M_S
from .gridder import Gridder
from ..core.table import gcf_image_fits
from .tunecache import TUNED_GCF_READS, cache_path, store_register_params

#: Largest disagreement between variants accepted (float32 sums in another order).
AGREEMENT = 1e-4


def candidates(profile, npol: int, quick: bool = False) -> list[RegisterParams]:
    """Search space: coarsening shapes no more than 2:1 (Merry's finding)
    within :data:`~clgrid.core.register.MAX_REGISTER_SUMS`, all or some of
    the polarisations a work-item (``pol_block``), work-group sizes within
    the device limit, records per group."""
    npol = max(int(npol), 1)
    pol_blocks = [0] + [p for p in ((2,) if quick else (1, 2)) if p < npol and npol % p == 0]
    shapes = [(u, v, p) for u, v, p in itertools.product(REGISTER_BLOCKS, REGISTER_BLOCKS,
                                                         pol_blocks)
              if u * v * (p or npol) <= MAX_REGISTER_SUMS and max(u, v) <= 2 * min(u, v)]
    groups = [g for g in (32, 64, 128, 256) if g <= profile.max_work_group_size]
    per_group = (2048,) if quick else (1024, 2048, 4096)
    if quick:
        shapes = [s for s in shapes if s[0] * s[1] in (1, 4, 16)]
        groups = groups[-2:]
    return [RegisterParams(u, v, g, 64, n, p)
            for (u, v, p), g, n in itertools.product(shapes, groups, per_group)]


def synthetic_tracks(n_baselines: int, nx: int, support: int, seed: int = 0):
    """A small observation with realistic tracks filling the grid's inner part."""
    from ..io.simulate import simulate_observation
    uvw = simulate_observation(duration_h=4.0, integration_s=10.0, n_baselines=n_baselines,
                               seed=seed)
    freq_hz = np.linspace(1.0e9, 1.1e9, 4)
    cell_uv_lambda = 10.0
    reach = (nx / 2 - support) * cell_uv_lambda * SPEED_OF_LIGHT_M_S / freq_hz.max()
    uvw = uvw * (0.9 * reach / np.abs(uvw[:, :2]).max())
    return uvw, freq_hz, 1.0 / (nx * cell_uv_lambda)


def _best_seconds(gridder: Gridder, plan, vis, grid, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        gridder.grid_plan(plan, vis, out=grid, return_device=True)
        gridder.queue.finish()
        best = min(best, time.perf_counter() - start)
    return best


def tune(context, gcf, npol: int = 4, precision=np.float32, *, nx: int = 512,
         n_baselines: int = 64, repeats: int = 2, quick: bool = False,
         progress: bool = True, save: bool = True) -> dict:
    """Time every candidate on synthetic tracks; store and return the best.

    Returns a dict with ``params`` (the best), ``seconds``, ``default_seconds``
    and ``results`` (one row per candidate).
    """
    uvw, freq_hz, cell = synthetic_tracks(n_baselines, nx, gcf.support)
    default = Gridder(context, gcf, nx, nx, cell, npol=npol, precision=precision,
                      method="register")
    profile = default.profile
    rng = np.random.default_rng(0)
    shape = (uvw.shape[0], freq_hz.size, npol)
    vis = cla.to_device(default.queue, (rng.standard_normal(shape)
                                        + 1j * rng.standard_normal(shape)).astype(
        default.complex_dtype))
    # one plan and one upload for every candidate: the set points do not
    # depend on the register geometry, and only the spread is timed
    plan = default.plan(uvw, freq_hz)
    reference = default.grid_plan(plan, vis)
    results = []
    default_params = default.engine.register.params
    space = candidates(profile, npol, quick)
    if default_params not in space:
        space.insert(0, default_params)
    for params in tqdm(space, desc="clgrid tune", disable=not progress):
        try:
            gridder = Gridder(default.queue, gcf, nx, nx, cell, npol=npol, precision=precision,
                              method="register", register_params=params)
        except Exception as error:  # a variant the compiler rejects is skipped, not fatal
            results.append({"params": params.__dict__, "error": str(error)[:200]})
            continue
        grid = gridder.grid_plan(plan, vis, return_device=True)      # warm-up and check
        error = (np.max(np.abs(grid.get() - reference))
                 / max(np.max(np.abs(reference)), 1e-30))
        seconds = _best_seconds(gridder, plan, vis, grid, repeats)
        results.append({"params": params.__dict__, "seconds": seconds, "max_rel_diff": error})
    timed = [r for r in results if "seconds" in r]
    if any(r["max_rel_diff"] > AGREEMENT for r in timed):
        raise RuntimeError("tuning variants disagree: " + str(
            [r for r in timed if r["max_rel_diff"] > AGREEMENT][:3]))
    winner = min(timed, key=lambda r: r["seconds"])
    default_row = next(r for r in timed if r["params"] == default_params.__dict__)
    # the winner's geometry read from a buffer and from an image, where the
    # device holds the table as one (the same weights: the grids must agree)
    read_seconds = {}
    fits, _ = gcf_image_fits(profile, gcf.support, gcf.oversample, gcf.w_planes,
                             gcf.separable, precision)
    for read in (TUNED_GCF_READS if fits else ()):
        gridder = Gridder(default.queue, gcf, nx, nx, cell, npol=npol, precision=precision,
                          method="register", register_params=RegisterParams(**winner["params"]),
                          gcf_read=read)
        grid = gridder.grid_plan(plan, vis, return_device=True)
        error = (np.max(np.abs(grid.get() - reference))
                 / max(np.max(np.abs(reference)), 1e-30))
        if error > AGREEMENT:
            raise RuntimeError(f"gcf_read={read!r} disagrees with the buffer: {error:.2e}")
        read_seconds[read] = _best_seconds(gridder, plan, vis, grid, repeats)
    best_read = min(read_seconds, key=read_seconds.get) if read_seconds else None
    summary = {"params": winner["params"], "seconds": winner["seconds"],
               "default_seconds": default_row["seconds"], "results": results,
               "gcf_read": best_read, "gcf_read_seconds": read_seconds}
    if save:
        store_register_params(profile, gcf.support, npol, precision, gcf.separable,
                              RegisterParams(**winner["params"]), winner["seconds"],
                              best_read, read_seconds)
    return summary


def _cmd_tune(args) -> int:
    """``clgrid tune``: tune the register spread for one device and parameter set."""
    from ..device.profiles import create_context
    from .gcf import separable_gcf, w_projection_gcf
    try:
        context = create_context(args.device)
    except (LookupError, RuntimeError) as error:
        print(f"clgrid: {error}")
        return 2
    precision = np.float64 if args.precision == "float64" else np.float32
    for support in args.support:
        gcf = (separable_gcf(support, args.oversample) if args.table == "separable" else
               w_projection_gcf(support, args.oversample, 4, 100.0, 0.01))
        summary = tune(context, gcf, args.npol, precision, nx=args.nx,
                       n_baselines=args.baselines, quick=args.quick)
        reads = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in summary["gcf_read_seconds"].items())
        print(f"support {support}: best {summary['params']} {summary['seconds'] * 1e3:.1f} ms "
              f"(defaults {summary['default_seconds'] * 1e3:.1f} ms)"
              + (f", GCF {summary['gcf_read']} ({reads})" if reads else "")
              + f", saved to {cache_path()}")
    return 0


def add_parser(commands) -> None:
    """Register the ``tune`` subcommand on the clgrid CLI."""
    parser = commands.add_parser("tune", help="autotune the table gridder's register spread "
                                 "for a device")
    parser.add_argument("--device", default=None)
    parser.add_argument("--support", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--npol", type=int, default=4, choices=(1, 2, 4))
    parser.add_argument("--precision", default="float32", choices=("float32", "float64"))
    parser.add_argument("--table", default="separable", choices=("separable", "full"))
    parser.add_argument("--oversample", type=int, default=8)
    parser.add_argument("--nx", type=int, default=512)
    parser.add_argument("--baselines", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="fewer candidates")
    parser.set_defaults(func=_cmd_tune)


__all__ = ["add_parser", "candidates", "synthetic_tracks", "tune"]
