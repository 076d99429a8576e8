"""``clgrid tune table``: time the register spread's geometries on a device,
cache the fastest.

:func:`tune` times every candidate of
:func:`clgrid.core.tuning.register.candidates` on a small synthetic
observation with realistic tracks, checks that each variant gives the same
grid, and stores the fastest (:func:`~clgrid.core.tuning.register.store_register_params`)
with the faster GCF read path (buffer or image, timed with the winning
geometry where the device holds the table as an image).
``Gridder(register_params='auto')`` reads it.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from tqdm.auto import tqdm

from ..core.register import RegisterParams
from ..core.table import gcf_image_fits
from ..core.tuning.register import TUNED_GCF_READS, candidates, store_register_params
from ..core.tuning.timing import median_seconds
from ..gridders.checks import SPEED_OF_LIGHT_M_S
from ..gridders.gcf import GCF
from ..gridders.gridder import Gridder

#: Largest disagreement between variants accepted (float32 sums in another order).
AGREEMENT = 1e-4


def synthetic_tracks(n_baselines: int, nx: int, support: int, seed: int = 0
                     ) -> tuple[np.ndarray, np.ndarray, float]:
    """A small observation with realistic tracks filling the grid's inner part:
    uvw (metres), freq (Hz), cell (radians)."""
    # imported here: io.simulate reads its array layouts from package data
    from ..io.simulate import simulate_observation
    uvw = simulate_observation(duration_h=4.0, integration_s=10.0, n_baselines=n_baselines,
                               seed=seed)
    freq_hz = np.linspace(1.0e9, 1.1e9, 4)
    cell_uv_lambda = 10.0
    reach = (nx / 2 - support) * cell_uv_lambda * SPEED_OF_LIGHT_M_S / freq_hz.max()
    uvw = uvw * (0.9 * reach / np.abs(uvw[:, :2]).max())
    return uvw, freq_hz, 1.0 / (nx * cell_uv_lambda)


class _Bench:
    """One synthetic problem gridded by register-spread variants: one plan
    and one upload for all (the set points do not depend on the register
    geometry; only the spread is timed), and the defaults' grid to agree with."""

    def __init__(self, context: cl.Context | cl.CommandQueue, gcf: GCF, npol: int,
                 precision: type, nx: int, n_baselines: int, repeats: int) -> None:
        uvw, freq_hz, self.cell = synthetic_tracks(n_baselines, nx, gcf.support)
        self.gcf, self.npol, self.precision, self.nx = gcf, npol, precision, nx
        self.repeats = repeats
        self.default = Gridder(context, gcf, nx, nx, self.cell, npol=npol, precision=precision,
                               method="register")
        rng = np.random.default_rng(0)
        shape = (uvw.shape[0], freq_hz.size, npol)
        self.vis = cla.to_device(self.default.queue, (
            rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(
            self.default.complex_dtype))
        self.plan = self.default.plan(uvw, freq_hz)
        self.reference = self.default.grid_plan(self.plan, self.vis)

    def gridder(self, params: RegisterParams, gcf_read: str | None = None) -> Gridder:
        """A register gridder of this problem with ``params`` (and ``gcf_read``)."""
        return Gridder(self.default.queue, self.gcf, self.nx, self.nx, self.cell,
                       npol=self.npol, precision=self.precision, method="register",
                       register_params=params, gcf_read=gcf_read)

    def time(self, gridder: Gridder) -> tuple[float, float]:
        """(median seconds of one spread, largest difference from the
        defaults' grid relative to its peak)."""
        grid = gridder.grid_plan(self.plan, self.vis, return_device=True)
        error = (np.max(np.abs(grid.get() - self.reference))
                 / max(np.max(np.abs(self.reference)), 1e-30))
        seconds = median_seconds(
            lambda: gridder.grid_plan(self.plan, self.vis, out=grid, return_device=True),
            gridder.queue, self.repeats)
        return seconds, float(error)


def _time_candidates(bench: _Bench, space: list[RegisterParams], progress: bool) -> list[dict]:
    """One row per candidate: its seconds and difference, or the compiler's error."""
    results = []
    for params in tqdm(space, desc="clgrid tune table", disable=not progress):
        try:
            gridder = bench.gridder(params)
        except Exception as error:  # a variant the compiler rejects is skipped, not fatal
            results.append({"params": params.__dict__, "error": str(error)[:200]})
            continue
        seconds, error = bench.time(gridder)
        results.append({"params": params.__dict__, "seconds": seconds, "max_rel_diff": error})
    timed = [r for r in results if "seconds" in r]
    wrong = [r for r in timed if r["max_rel_diff"] > AGREEMENT]
    if wrong:
        raise RuntimeError(f"tuning variants disagree: {wrong[:3]}")
    return results


def _time_gcf_reads(bench: _Bench, params: RegisterParams) -> dict[str, float]:
    """Seconds of ``params`` reading the table from a buffer and from an
    image, where the device holds the table as one (else empty)."""
    gcf = bench.gcf
    fits, _ = gcf_image_fits(bench.default.profile, gcf.support, gcf.oversample, gcf.w_planes,
                             gcf.separable, bench.precision)
    read_seconds = {}
    for read in (TUNED_GCF_READS if fits else ()):
        seconds, error = bench.time(bench.gridder(params, read))
        if error > AGREEMENT:   # the same weights: the grids must agree
            raise RuntimeError(f"gcf_read={read!r} disagrees with the buffer: {error:.2e}")
        read_seconds[read] = seconds
    return read_seconds


def tune(context: cl.Context | cl.CommandQueue, gcf: GCF, npol: int = 4,
         precision: type = np.float32, *, nx: int = 512, n_baselines: int = 64,
         repeats: int = 2, quick: bool = False, progress: bool = True,
         save: bool = True) -> dict:
    """Time every candidate on synthetic tracks; store and return the best.

    Returns a dict with ``params`` (the best), ``seconds``, ``default_seconds``,
    ``results`` (one row per candidate), ``gcf_read`` (the faster read path,
    or None) and ``gcf_read_seconds``.
    """
    bench = _Bench(context, gcf, npol, precision, nx, n_baselines, repeats)
    default_params = bench.default.engine.spreader.params
    space = candidates(bench.default.profile, npol, quick)
    if default_params not in space:
        space.insert(0, default_params)
    results = _time_candidates(bench, space, progress)
    timed = [r for r in results if "seconds" in r]
    winner = min(timed, key=lambda r: r["seconds"])
    best = RegisterParams(**winner["params"])
    read_seconds = _time_gcf_reads(bench, best)
    best_read = min(read_seconds, key=read_seconds.get) if read_seconds else None
    if save:
        store_register_params(bench.default.profile, gcf.support, npol, precision,
                              gcf.separable, best, winner["seconds"], best_read, read_seconds)
    default_row = next(r for r in timed if r["params"] == default_params.__dict__)
    return {"params": winner["params"], "seconds": winner["seconds"],
            "default_seconds": default_row["seconds"], "results": results,
            "gcf_read": best_read, "gcf_read_seconds": read_seconds}


__all__ = ["AGREEMENT", "synthetic_tracks", "tune"]
