"""Gain calibration against a point source at the phase centre.

For an observation of a compact calibrator, each parallel hand of a
baseline (i, j) is modelled as

    V_ij(t, f) = g_i(t) conj(g_j(t)) d_i(f) conj(d_j(f)) S,
    d_i(f) = exp(2 pi i tau_i (f - f_ref))

with a complex gain ``g`` per antenna, hand and solution interval, a delay
``tau`` per antenna and hand over the whole observation (the bandpass phase
slope), and ``S`` the model flux.  Both are solved with StEFCal (Salvini &
Wijnholds 2014, A&A 571, A97): the gains per interval on band-averaged,
delay-corrected data, the bandpass per channel on time-averaged,
gain-corrected data, from which each antenna's delay is fitted; the two
steps alternate until the delays settle.  Applying divides each sample by
``g_i conj(g_j) d_i conj(d_j)`` and multiplies its weight by
``|g_i g_j|^2``; samples of an antenna without a solution are flagged.

The amplitude scale is that of the model: with ``S = 1`` the image reads in
units of the calibrator's (unknown) flux density.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..io.ms import HandsBlock, MeasurementSet, MSError

#: Fewest usable baselines an antenna needs in a solution interval.
MIN_BASELINES = 3


def stefcal(vis: np.ndarray, weight: np.ndarray, model: np.ndarray, antenna1: np.ndarray,
            antenna2: np.ndarray, n_antennas: int, *, max_iter: int = 500,
            tol: float = 1e-12, min_baselines: int = MIN_BASELINES
            ) -> tuple[np.ndarray, np.ndarray]:
    """Per-antenna complex gains of many independent problems (StEFCal).

    Solves ``vis[k, b] ~ g[k, a1] model[k, b] conj(g[k, a2])`` in weighted
    least squares for each problem ``k`` (a solution interval or channel).

    Parameters
    ----------
    vis, weight, model
        (nproblem, nbaseline) data, weights (0 = unusable) and model.
    antenna1, antenna2
        (nbaseline,) antenna indices; cross-correlations only.
    n_antennas
        Number of antennas (indices run 0..n_antennas-1).
    max_iter, tol
        Iteration limit and relative change of the gains that ends it.
    min_baselines
        An antenna with fewer usable baselines in a problem gets no solution.

    Returns
    -------
    gains
        (nproblem, n_antennas) complex128, 0 where not solved; the phase
        reference is arbitrary (see :func:`reference_phase`).
    solved
        (nproblem, n_antennas) bool.
    """
    vis = np.atleast_2d(vis)
    n_problems = vis.shape[0]
    data = np.zeros((n_problems, n_antennas, n_antennas), np.complex128)
    weights = np.zeros(data.shape)
    models = np.zeros(data.shape, np.complex128)
    # Hermitian fill: row p holds every baseline of antenna p.
    for first, second, conj in ((antenna1, antenna2, False), (antenna2, antenna1, True)):
        data[:, first, second] = np.conj(vis) if conj else vis
        models[:, first, second] = np.conj(model) if conj else model
        weights[:, first, second] = weight
    solved = np.count_nonzero(weights > 0, axis=2) >= min_baselines
    weights *= solved[:, :, None] & solved[:, None, :]
    solved = np.count_nonzero(weights > 0, axis=2) >= min_baselines
    gains = solved.astype(np.complex128)
    for iteration in range(1, max_iter + 1):
        previous = gains
        z = models * np.conj(gains)[:, None, :]
        numerator = np.sum(weights * np.conj(z) * data, axis=2)
        denominator = np.sum(weights * np.abs(z) ** 2, axis=2)
        gains = np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1),
                         0)
        if iteration % 2 == 0:  # StEFCal's averaging step: stops the oscillation
            gains = 0.5 * (gains + previous)
            change = np.linalg.norm(gains - previous) / max(np.linalg.norm(gains), 1e-300)
            if change < tol:
                break
    return np.where(solved, gains, 0), solved


def reference_phase(gains: np.ndarray, solved: np.ndarray, reference: int) -> np.ndarray:
    """``gains`` rotated so that antenna ``reference`` has phase 0 (where solved)."""
    ref = gains[..., reference:reference + 1]
    rotation = np.where(np.abs(ref) > 0, np.conj(ref) / np.where(np.abs(ref) > 0,
                                                                 np.abs(ref), 1), 1)
    return np.where(solved, gains * rotation, 0)


def solution_intervals(time_s: np.ndarray, antenna1: np.ndarray, antenna2: np.ndarray
                       ) -> np.ndarray:
    """Index of the solution interval (correlator integration) of each row.

    Distinct TIME values closer than half the integration time belong to one
    integration (correlators and averaging split a dump into rows of
    slightly different TIME).  The integration time is the median step
    between successive rows of one baseline, not the INTERVAL column,
    which some sets fill wrongly.
    """
    if time_s.size == 0:
        return np.zeros(0, np.int64)
    baseline = antenna1 * (max(antenna1.max(), antenna2.max()) + 1) + antenna2
    order = np.lexsort((time_s, baseline))
    steps = np.diff(time_s[order])[np.diff(baseline[order]) == 0]
    steps = steps[steps > 0]
    integration = float(np.median(steps)) if steps.size else np.inf
    distinct = np.unique(time_s)
    starts = np.concatenate([[True], np.diff(distinct) > 0.5 * integration])
    label = np.cumsum(starts) - 1
    return label[np.searchsorted(distinct, time_s)]


def fit_delays(bandpass: np.ndarray, weight: np.ndarray, freq_hz: np.ndarray,
               f_ref: float) -> np.ndarray:
    """Delay (s) of each antenna's bandpass phase: the peak of the weighted
    delay spectrum, refined by a linear fit to the residual phase.

    ``bandpass`` and ``weight`` are (nchan, nant); returns (nant,).
    """
    offsets = freq_hz - f_ref
    delays = _delay_spectrum_peak(weight * bandpass, freq_hz)
    for _ in range(3):
        residual = bandpass * np.exp(-2j * np.pi * np.outer(offsets, delays))
        mean = np.sum(weight * residual, axis=0)
        phase = np.angle(residual * np.conj(mean))  # small after the search
        w = weight * np.abs(residual)
        x = offsets[:, None]
        x_mean = np.sum(w * x, axis=0) / np.maximum(np.sum(w, axis=0), 1e-300)
        slope = (np.sum(w * (x - x_mean) * phase, axis=0)
                 / np.maximum(np.sum(w * (x - x_mean) ** 2, axis=0), 1e-300))
        delays = delays + slope / (2 * np.pi)
    return np.where(np.sum(weight, axis=0) > 0, delays, 0.0)


def _delay_spectrum_peak(values: np.ndarray, freq_hz: np.ndarray, pad: int = 8) -> np.ndarray:
    """Delay maximising ``|sum_c values[c] exp(-2 pi i tau f_c)|`` per column,
    on a grid ``pad`` times finer than 1/bandwidth over the unambiguous range
    +-1/(2 channel step).  Regular channels: one zero-padded FFT; irregular
    ones: the same sum on that grid, evaluated in blocks."""
    nchan = freq_hz.size
    if nchan < 2:
        return np.zeros(values.shape[1])
    step = float(freq_hz[1] - freq_hz[0])
    n = pad * nchan
    if np.allclose(np.diff(freq_hz), step, rtol=1e-6, atol=0):
        spectrum = np.abs(np.fft.fft(values, n=n, axis=0))
        k = np.argmax(spectrum, axis=0)
        return np.where(k < n // 2, k, k - n) / (n * step)
    trials = np.arange(-(n // 2), n - n // 2) / (n * abs(np.median(np.diff(freq_hz))))
    best, best_delay = np.full(values.shape[1], -1.0), np.zeros(values.shape[1])
    offsets = freq_hz - freq_hz[0]
    for start in range(0, trials.size, 256):
        block = trials[start:start + 256]
        power = np.abs(np.exp(-2j * np.pi * np.outer(block, offsets)) @ values)
        better = power.max(axis=0) > best
        best = np.where(better, power.max(axis=0), best)
        best_delay = np.where(better, block[np.argmax(power, axis=0)], best_delay)
    return best_delay


@dataclasses.dataclass
class HandSolution:
    """Gains and delays of one hand of one spectral window."""

    gains: np.ndarray      # (n_intervals, n_antennas) complex
    solved: np.ndarray     # (n_intervals, n_antennas) bool
    delays_s: np.ndarray   # (n_antennas,)


@dataclasses.dataclass
class PointCalibration:
    """Gains and delays per spectral window, solved by :func:`solve_point`.

    Attributes
    ----------
    flux_jy
        Model flux density.
    interval_edges_s
        Per spectral window: (n_intervals,) first TIME of each interval.
    hands
        Per spectral window: (solution of hand 0, solution of hand 1).
    f_ref_hz
        Per spectral window: reference frequency of the delays.
    reference_antenna
        Antenna whose phase is 0.
    """

    flux_jy: float
    interval_edges_s: dict[int, np.ndarray]
    hands: dict[int, tuple[HandSolution, HandSolution]]
    f_ref_hz: dict[int, float]
    reference_antenna: int

    def apply(self, block: HandsBlock, spw: int) -> HandsBlock:
        """``block`` with the gains divided out, weights scaled, samples of
        antennas without a solution flagged."""
        if spw not in self.hands:  # nothing was usable there: nothing is now
            return dataclasses.replace(block, weight=np.zeros_like(block.weight),
                                       usable=np.zeros_like(block.usable))
        edges = self.interval_edges_s[spw]
        interval = np.clip(np.searchsorted(edges, block.time_s, side="right") - 1, 0,
                           edges.size - 1)
        offsets = block.freq_hz - self.f_ref_hz[spw]
        a1, a2 = block.antenna1, block.antenna2
        products = []
        for hand in self.hands[spw]:
            gains = np.where(hand.solved, hand.gains, 0)
            per_row = gains[interval, a1] * np.conj(gains[interval, a2])       # (nrow,)
            delay = hand.delays_s[a1] - hand.delays_s[a2]
            products.append(per_row[:, None] * np.exp(2j * np.pi * np.outer(delay, offsets)))
        product = np.stack(products, axis=2)                                  # (nrow, nchan, 2)
        usable = block.usable & (np.abs(product) > 0)
        safe = np.where(usable, product, 1)
        return dataclasses.replace(
            block, data=np.where(usable, block.data / safe, 0),
            weight=np.where(usable, block.weight * np.abs(safe) ** 2, 0), usable=usable)

    def history(self) -> list[str]:
        """Lines for FITS HISTORY cards."""
        lines = [f"clgrid calibrate point: StEFCal (Salvini & Wijnholds 2014) against a "
                 f"{self.flux_jy:g} Jy point source at the phase centre",
                 "per antenna and hand: complex gain per integration, delay (bandpass "
                 "phase slope) per observation",
                 f"reference antenna {self.reference_antenna}; flux scale is the model's"]
        for spw, (first, second) in sorted(self.hands.items()):
            solved = np.stack([first.solved, second.solved])   # (2, n_int, n_ant)
            antennas = solved.any(axis=(0, 1))
            share = solved[:, :, antennas].mean() if antennas.any() else 0.0
            delays = np.concatenate([first.delays_s, second.delays_s]) * 1e9
            lines.append(f"spw {spw}: {solved.shape[1]} solution intervals, "
                         f"{int(antennas.sum())} antennas, {100 * share:.0f}% of their "
                         f"gains solved, |delay| <= {np.max(np.abs(delays)):.1f} ns")
        return lines


def _baselines(block: HandsBlock):
    """Baseline index of each row, the antennas of each baseline and the
    number of antennas."""
    n_ant = int(max(block.antenna1.max(), block.antenna2.max())) + 1
    pairs, baseline = np.unique(block.antenna1 * n_ant + block.antenna2, return_inverse=True)
    return baseline, pairs // n_ant, pairs % n_ant, n_ant


def _accumulate(values, weights, interval, baseline, n_int, n_bl):
    """Weighted sums of rows onto (interval, baseline, ...) cells."""
    shape = (n_int, n_bl) + values.shape[1:]
    total = np.zeros(shape, np.complex128)
    weight = np.zeros(shape)
    np.add.at(total, (interval, baseline), weights * values)
    np.add.at(weight, (interval, baseline), weights)
    return np.where(weight > 0, total / np.where(weight > 0, weight, 1), 0), weight


def solve_hand(data: np.ndarray, weight: np.ndarray, interval: np.ndarray,
               baseline: np.ndarray, antenna1: np.ndarray, antenna2: np.ndarray,
               n_ant: int, freq_hz: np.ndarray, f_ref: float, flux_jy: float,
               n_rounds: int = 8) -> HandSolution:
    """Gains per interval and delays for one hand; ``data`` and ``weight``
    are (nrow, nchan) and rows map to cells by ``interval`` and ``baseline``."""
    n_int, n_bl = int(interval.max()) + 1, antenna1.size
    cells, cell_weight = _accumulate(data, weight, interval, baseline, n_int, n_bl)
    offsets = freq_hz - f_ref
    delays = np.zeros(n_ant)
    gains = np.ones((n_int, n_ant), np.complex128)
    solved = np.ones((n_int, n_ant), bool)
    for _ in range(n_rounds):
        # 1. gains per interval on delay-corrected, band-averaged data
        turn = np.exp(-2j * np.pi * offsets[None, :]
                      * (delays[antenna1] - delays[antenna2])[:, None])  # (n_bl, nchan)
        corrected = cells * turn[None]
        averaged = np.sum(cell_weight * corrected, axis=2)
        band_weight = np.sum(cell_weight, axis=2)
        averaged = np.where(band_weight > 0, averaged / np.where(band_weight > 0,
                                                                  band_weight, 1), 0)
        gains, solved = stefcal(averaged, band_weight, np.full(averaged.shape, flux_jy),
                                antenna1, antenna2, n_ant)
        # 2. bandpass per channel on gain-corrected, time-averaged data
        product = gains[:, antenna1] * np.conj(gains[:, antenna2])  # (n_int, n_bl)
        good = np.abs(product) > 0
        safe = np.where(good, product, 1)
        w = cell_weight * (np.abs(safe) ** 2 * good)[:, :, None]
        unwound = cells / safe[:, :, None]
        time_weight = np.sum(w, axis=0)                               # (n_bl, nchan)
        time_avg = np.sum(w * unwound, axis=0) / np.where(time_weight > 0, time_weight, 1)
        bandpass, bp_solved = stefcal(time_avg.T, time_weight.T,
                                      np.full(time_avg.T.shape, flux_jy), antenna1,
                                      antenna2, n_ant)
        bandpass = reference_phase(bandpass, bp_solved, _reference(bp_solved))
        # The bandpass holds the whole delay: the data it is solved on still have it.
        new_delays = fit_delays(bandpass, bp_solved.astype(float), freq_hz, f_ref)
        settled = np.max(np.abs(new_delays - delays) * np.ptp(freq_hz), initial=0) < 1e-9
        delays = new_delays
        if settled:
            break
    return HandSolution(gains, solved, delays)


def _reference(solved: np.ndarray) -> int:
    """The antenna solved most often."""
    return int(np.argmax(solved.reshape(-1, solved.shape[-1]).sum(axis=0)))


def _check_memory(ms: MeasurementSet, spw: int) -> None:
    """Refuse a window whose rows would not fit in memory for the solve."""
    nchan = ms.spectral_windows[spw].freq_hz.size
    # data (complex128 after the cast) + weights + usability, two hands, and
    # the per-cell copies the solver makes: about 4x the complex data.
    needed = ms.count_rows(spw) * nchan * 2 * 16 * 4
    available = available_host_bytes()
    if available and needed > available // 2:
        raise MSError(f"calibrating spectral window {spw} needs about {needed} bytes of "
                      f"memory, {available} are available: select fewer rows or channels")


def available_host_bytes() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 where unknown)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def solve_point(ms: MeasurementSet, spws=None, flux_jy: float = 1.0) -> PointCalibration:
    """Solve gains and delays of every selected spectral window of ``ms``
    against a point source of ``flux_jy`` at the phase centre.

    Reads all channels of each window's rows at once: meant for calibrator
    observations that fit in memory.
    """
    edges, hands, f_refs = {}, {}, {}
    references = []
    for spw in ms.select_spws(spws):
        _check_memory(ms, spw)
        block = ms.read_hands(spw)
        if not block.usable.any():
            continue
        interval = solution_intervals(block.time_s, block.antenna1, block.antenna2)
        baseline, antenna1, antenna2, n_ant = _baselines(block)
        f_refs[spw] = float(np.mean(block.freq_hz))
        edges[spw] = np.array([block.time_s[interval == k].min()
                               for k in range(int(interval.max()) + 1)])
        solutions = []
        for hand in range(2):
            solutions.append(solve_hand(block.data[..., hand], block.weight[..., hand],
                                        interval, baseline, antenna1, antenna2, n_ant,
                                        block.freq_hz, f_refs[spw], flux_jy))
        hands[spw] = tuple(solutions)
        references.append(_reference(np.concatenate([s.solved for s in solutions])))
    reference = references[0] if references else 0
    for spw, pair in hands.items():
        hands[spw] = tuple(dataclasses.replace(
            s, gains=reference_phase(s.gains, s.solved, reference)) for s in pair)
    return PointCalibration(flux_jy, edges, hands, f_refs, reference)


__all__ = ["HandSolution", "available_host_bytes", "PointCalibration", "fit_delays", "reference_phase",
           "solution_intervals", "solve_point", "stefcal"]
