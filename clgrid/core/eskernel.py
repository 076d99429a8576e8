"""Exponential-of-semicircle (ES) gridding kernel and its parameter choice.

The ES kernel of Barnett, Magland & af Klinteberg (2019), used by ducc0's
wgridder (Arras et al. 2021), on a support of ``W`` grid cells::

    phi(s) = exp(beta * (sqrt(1 - (2 s / W)**2) - 1)),   |s| < W / 2

Its Fourier transform ``phi_hat`` has no closed form; it is computed here
by Gauss-Legendre quadrature in float64 and used for the grid correction.

Accuracy model
--------------
Gridding a visibility at fractional position ``x`` with ``phi`` and
transforming a grid oversampled by ``sigma`` gives, at the normalised image
coordinate ``xi`` (``|xi| <= 1 / (2 sigma)``), by Poisson summation::

    sum_m phi_hat(xi + m) exp(2 pi i x (xi + m))

The wanted term is ``m = 0``; the others alias into the image.  Their rms over
``x``, relative to ``phi_hat(xi)``, maximised over the image, is the 1-D error
:func:`aliasing_error` returns.  :data:`KERNEL_TABLE` lists, for each
oversampling factor and support, the ``beta`` that minimises it (a scan in
float64, :func:`optimal_beta`) and the error reached.  The table is produced by
:func:`build_table`; ``tests/imaging/test_imaging.py`` re-derives entries.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

#: Oversampling factors (grid size / image size) the table covers.
SIGMAS = (1.25, 1.5, 1.75, 2.0, 2.5)
#: Default range of the grid oversampling a kernel may take (ducc0's
#: ``sigma_min``/``sigma_max``); every API's default reads these.
SIGMA_MIN, SIGMA_MAX = 1.1, 2.6
#: Supports (grid cells) the table covers.
SUPPORTS = tuple(range(2, 17))
#: Float32 rounding floor: no kernel can do better than this in single precision.
FLOAT32_FLOOR = 1e-6
#: The per-dimension aliasing budget is epsilon / (ERROR_HEADROOM * sqrt(ndim)).
#: The table's errors are worst cases over the image; the rms errors measured
#: against the direct transform stay at 0.04-0.6 epsilon with 1.25 (epsilon
#: 1e-2 to 1e-12, fields of 15-20 degrees, with and without w).
ERROR_HEADROOM = 1.25
#: Largest grid-correction gain (all dimensions together) a kernel may have:
#: the correction amplifies the grid's rounding by it at the image edge, and
#: so the mismatch of vis2dirty and dirty2vis as each other's adjoint (W 14,
#: sigma 1.25 with w has 3e8: adjoint only to 1e-11 in float64).
MAX_CORRECTION_GAIN = 1e4
_QUADRATURE_NODES = 200
_ALIAS_TERMS = 6


def es_kernel(s: np.ndarray, support: int, beta: float) -> np.ndarray:
    """ES kernel at offsets ``s`` (grid cells from the visibility), zero outside."""
    z = 2.0 * np.asarray(s, dtype=np.float64) / support
    inside = np.abs(z) < 1.0
    values = np.zeros_like(z)
    values[inside] = np.exp(beta * (np.sqrt(1.0 - z[inside] ** 2) - 1.0))
    return values


@functools.lru_cache(maxsize=8)
def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of n-point Gauss-Legendre quadrature on [-1, 1] (cached:
    numpy recomputes them by an eigen-solve, a visible share of planning)."""
    nodes, weights = np.polynomial.legendre.leggauss(n)
    nodes.flags.writeable = weights.flags.writeable = False
    return nodes, weights


def es_fourier(xi: np.ndarray, support: int, beta: float) -> np.ndarray:
    """Fourier transform of the ES kernel, ``int phi(s) exp(2 pi i s xi) ds``.

    ``xi`` is in cycles per grid cell; the kernel is even, so the result is
    real.  Gauss-Legendre quadrature over the support, accurate to float64
    rounding for the supports used here.
    """
    nodes, weights = gauss_legendre(_QUADRATURE_NODES)
    s = nodes * (support / 2.0)
    phi = es_kernel(s, support, beta) * weights * (support / 2.0)
    xi = np.asarray(xi, dtype=np.float64)
    return np.cos(2.0 * np.pi * np.multiply.outer(xi, s)) @ phi


def aliasing_error(support: int, beta: float, sigma: float, n_xi: int = 64) -> float:
    """Worst relative rms aliasing error of one dimension (see module notes)."""
    xi = np.linspace(0.0, 0.5 / sigma, n_xi)
    main = es_fourier(xi, support, beta)
    alias = np.zeros_like(xi)
    for m in range(1, _ALIAS_TERMS + 1):
        alias += es_fourier(xi + m, support, beta) ** 2 + es_fourier(xi - m, support, beta) ** 2
    return float(np.max(np.sqrt(alias) / np.abs(main)))


def optimal_beta(support: int, sigma: float) -> tuple[float, float]:
    """``(beta, error)`` minimising :func:`aliasing_error` for one support and sigma.

    A golden-section search in ``beta / support`` on [1.0, 3.0] (the optimum
    is near ``pi * (1 - 1 / (2 sigma))`` according to Barnett et al.).
    """
    lo, hi = 1.0, 3.0
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
    fa = aliasing_error(support, a * support, sigma)
    fb = aliasing_error(support, b * support, sigma)
    for _ in range(30):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - golden * (hi - lo)
            fa = aliasing_error(support, a * support, sigma)
        else:
            lo, a, fa = a, b, fb
            b = lo + golden * (hi - lo)
            fb = aliasing_error(support, b * support, sigma)
    best = a if fa < fb else b
    return best * support, min(fa, fb)


def build_table() -> dict[tuple[float, int], tuple[float, float]]:
    """Recompute :data:`KERNEL_TABLE` (minutes: 75 searches of 60 error evaluations)."""
    return {(sigma, support): optimal_beta(support, sigma)
            for sigma in SIGMAS for support in SUPPORTS}


# (sigma, support) -> (beta, 1-D aliasing error), from build_table() in float64.
KERNEL_TABLE: dict[tuple[float, int], tuple[float, float]] = {
    (1.25, 2): (2.000001, 2.098e-01),
    (1.25, 3): (4.385758, 4.190e-02),
    (1.25, 4): (6.673162, 1.237e-02),
    (1.25, 5): (8.757315, 3.792e-03),
    (1.25, 6): (10.763402, 1.131e-03),
    (1.25, 7): (12.733763, 3.334e-04),
    (1.25, 8): (13.531977, 1.393e-04),
    (1.25, 9): (16.613870, 2.759e-05),
    (1.25, 10): (17.652706, 8.771e-06),
    (1.25, 11): (19.654202, 2.169e-06),
    (1.25, 12): (21.641953, 5.733e-07),
    (1.25, 13): (23.608302, 1.476e-07),
    (1.25, 14): (25.555361, 3.631e-08),
    (1.25, 15): (27.496034, 9.052e-09),
    (1.25, 16): (29.438067, 2.460e-09),
    (1.5, 2): (2.256460, 8.863e-02),
    (1.5, 3): (5.196644, 1.667e-02),
    (1.5, 4): (7.634817, 3.504e-03),
    (1.5, 5): (9.894377, 7.191e-04),
    (1.5, 6): (12.093023, 1.436e-04),
    (1.5, 7): (13.102037, 3.674e-05),
    (1.5, 8): (16.407660, 5.450e-06),
    (1.5, 9): (18.540411, 1.010e-06),
    (1.5, 10): (20.669125, 1.945e-07),
    (1.5, 11): (22.100487, 3.194e-08),
    (1.5, 12): (24.274836, 5.373e-09),
    (1.5, 13): (26.442616, 9.541e-10),
    (1.5, 14): (28.597785, 1.674e-10),
    (1.5, 15): (31.111750, 3.369e-11),
    (1.5, 16): (32.866455, 4.451e-12),
    (1.75, 2): (2.976669, 6.423e-02),
    (1.75, 3): (5.776519, 9.522e-03),
    (1.75, 4): (5.908162, 5.142e-03),
    (1.75, 5): (9.071118, 4.793e-04),
    (1.75, 6): (11.757230, 5.781e-05),
    (1.75, 7): (14.285405, 7.455e-06),
    (1.75, 8): (16.732049, 1.004e-06),
    (1.75, 9): (19.126260, 1.359e-07),
    (1.75, 10): (21.485978, 1.861e-08),
    (1.75, 11): (23.820757, 2.501e-09),
    (1.75, 12): (26.143847, 3.496e-10),
    (1.75, 13): (28.445383, 4.580e-11),
    (1.75, 14): (29.920057, 8.780e-12),
    (1.75, 15): (33.039589, 8.939e-13),
    (1.75, 16): (35.274650, 1.216e-13),
    (2.0, 2): (3.407029, 5.440e-02),
    (2.0, 3): (6.201830, 6.804e-03),
    (2.0, 4): (8.799826, 9.477e-04),
    (2.0, 5): (11.286075, 1.283e-04),
    (2.0, 6): (13.729352, 1.717e-05),
    (2.0, 7): (15.171461, 2.510e-06),
    (2.0, 8): (17.708958, 2.883e-07),
    (2.0, 9): (20.201288, 3.330e-08),
    (2.0, 10): (22.663853, 3.873e-09),
    (2.0, 11): (25.107922, 4.554e-10),
    (2.0, 12): (27.533483, 5.266e-11),
    (2.0, 13): (29.103409, 8.388e-12),
    (2.0, 14): (31.573661, 9.033e-13),
    (2.0, 15): (34.752774, 8.257e-14),
    (2.0, 16): (36.524398, 2.008e-14),
    (2.5, 2): (3.851086, 4.170e-02),
    (2.5, 3): (6.738250, 4.236e-03),
    (2.5, 4): (9.468582, 4.666e-04),
    (2.5, 5): (12.106232, 5.099e-05),
    (2.5, 6): (13.610266, 6.841e-06),
    (2.5, 7): (16.366387, 6.224e-07),
    (2.5, 8): (19.050094, 5.783e-08),
    (2.5, 9): (21.691615, 5.514e-09),
    (2.5, 10): (24.303363, 5.221e-10),
    (2.5, 11): (26.894634, 4.958e-11),
    (2.5, 12): (29.473970, 4.724e-12),
    (2.5, 13): (32.038897, 4.379e-13),
    (2.5, 14): (34.597710, 4.193e-14),
    (2.5, 15): (37.082652, 5.882e-15),
    (2.5, 16): (37.554848, 5.668e-15),
}


@dataclasses.dataclass(frozen=True)
class KernelChoice:
    """Parameters chosen for one accuracy: support, beta, oversampling."""

    support: int
    beta: float
    sigma: float
    error_1d: float

    def kernel(self, s: np.ndarray) -> np.ndarray:
        return es_kernel(s, self.support, self.beta)

    def fourier(self, xi: np.ndarray) -> np.ndarray:
        return es_fourier(xi, self.support, self.beta)


#: Kernel evaluation methods of the CPU spreader (``TileShape.kernel_eval``).
KERNEL_EVALS = ("exp", "horner")


def horner_degree(support: int) -> int:
    """Degree of the per-tap polynomials of :func:`horner_coefficients`
    (measured: the largest float64 difference to the formula is below 3e-8
    of phi(0), and below a hundredth of the kernel's aliasing error, for every
    kernel of the table but the float64-rounding-limited ones of W >= 15;
    float32 Horner adds its rounding, about 1e-7)."""
    return max(12, int(support) + 6)


def horner_variables(t: np.ndarray, support: int) -> np.ndarray:
    """(len(t), W) Horner variable of every tap at offsets ``t``.

    The interior taps are smooth in ``t``: ``x = 2 t - 1``.  The first and
    last taps hold the kernel's edge, where ``sqrt(1 - z^2)`` has a
    square-root branch point: they are smooth in ``q = sqrt(t)`` (first) and
    ``q = sqrt(1 - t)`` (last) instead, ``x = 2 q - 1``.
    """
    t = np.asarray(t)
    x = np.repeat((2.0 * t - 1.0)[:, None], int(support), axis=1)
    x[:, 0] = 2.0 * np.sqrt(t) - 1.0
    x[:, -1] = 2.0 * np.sqrt(1.0 - t) - 1.0
    return x


def horner_coefficients(support: int, beta: float, degree: int | None = None) -> np.ndarray:
    """Piecewise-polynomial form of the ES kernel (as ducc0's wgridder evaluates it).

    A point at fractional offset ``t`` in [0, 1) (its first footprint cell is
    ``W / 2 - t`` cells before it) sees tap ``a`` (``a = 0 .. W - 1``) at
    ``phi(t + a - W / 2)``.  Each tap is one polynomial of degree ``degree``
    in its variable ``x`` in [-1, 1] (:func:`horner_variables`), fitted in
    float64 by least squares on Chebyshev nodes.  Returns ``(degree + 1, W)``
    coefficients, highest power first, so that Horner's rule evaluates all W
    taps at once as one vector of their variables::

        taps = c[0]; for d in 1..degree: taps = taps * x + c[d]

    Fitted once per (W, beta, degree) in a process (4 ms a kernel, three
    times a new plan: a third of a new observation's small call on a CPU);
    each caller gets its own copy.
    """
    support = int(support)
    degree = horner_degree(support) if degree is None else int(degree)
    return _fitted_coefficients(support, float(beta), degree).copy()


@functools.lru_cache(maxsize=64)
def _fitted_coefficients(support: int, beta: float, degree: int) -> np.ndarray:
    """:func:`horner_coefficients`' fit (kept: the same inputs, the same bits)."""
    n_nodes = 4 * (degree + 1)
    x = np.cos(np.pi * (np.arange(n_nodes) + 0.5) / n_nodes)
    smooth = 0.5 * (x + 1.0)
    coefficients = np.zeros((degree + 1, support))
    for tap in range(support):
        t = (smooth ** 2 if tap == 0 else 1.0 - smooth ** 2 if tap == support - 1
             else smooth)
        values = es_kernel(t + tap - support / 2.0, support, beta)
        power = np.polynomial.chebyshev.cheb2poly(
            np.polynomial.chebyshev.chebfit(x, values, degree))
        coefficients[degree + 1 - power.size:, tap] = power[::-1]
    coefficients.flags.writeable = False
    return coefficients


def horner_error(support: int, beta: float, degree: int | None = None,
                 n_offsets: int = 2001) -> float:
    """Largest absolute difference (float64) between :func:`horner_coefficients`'
    polynomials and the ES kernel over all taps and offsets."""
    # offsets inside (0, 1): at t = 0 exactly the formula's first tap is cut
    # to 0 (|z| = 1), the polynomial gives the edge value exp(-beta)
    t = (np.arange(n_offsets) + 0.5) / n_offsets
    exact = es_kernel(t[:, None] + np.arange(support) - support / 2.0, support, beta)
    taps = horner_taps(horner_coefficients(support, beta, degree), t)
    return float(np.max(np.abs(taps - exact)))


#: Horner evaluation is used only where its fit error is at most this share
#: of the kernel's aliasing error (and below float32 rounding, see
#: :func:`horner_suits`).
HORNER_ERROR_SHARE = 0.01


@functools.lru_cache(maxsize=64)
@functools.lru_cache(maxsize=256)
def horner_suits(support: int, beta: float) -> bool:
    """Whether the polynomial form is accurate enough for this kernel (see
    :data:`HORNER_ERROR_SHARE`); kernels outside the table keep exp.  Kept
    per (W, beta): every new plan asks."""
    errors = [error for (_, w), (b, error) in KERNEL_TABLE.items()
              if w == support and b == beta]
    return bool(errors) and horner_error(support, beta) <= HORNER_ERROR_SHARE * errors[0]


def horner_taps(coefficients: np.ndarray, t: np.ndarray, dtype=np.float64) -> np.ndarray:
    """(len(t), W) kernel taps at offsets ``t`` by Horner's rule in ``dtype``
    (what the device kernel computes; for tests)."""
    coefficients = np.asarray(coefficients, dtype)
    x = horner_variables(np.asarray(t, dtype), coefficients.shape[1]).astype(dtype)
    taps = np.broadcast_to(coefficients[0], (x.shape[0], coefficients.shape[1])).copy()
    for row in coefficients[1:]:
        taps = taps * x + row
    return taps


def _table() -> dict[tuple[float, int], tuple[float, float]]:
    return KERNEL_TABLE


def correction_gain(support: int, beta: float, sigma: float) -> float:
    """How much the grid correction amplifies rounding at the image edge:
    ``phi_hat(0) / phi_hat(1 / (2 sigma))`` for one dimension."""
    return float(es_fourier(0.0, support, beta) / es_fourier(0.5 / sigma, support, beta))


def candidate_kernels(epsilon: float, ndim: int, sigma_min: float = SIGMA_MIN,
                      sigma_max: float = SIGMA_MAX, unit_roundoff: float = 0.0,
                      ) -> list[KernelChoice]:
    """Smallest support per oversampling factor in range that meets ``epsilon``.

    The per-dimension errors add up in quadrature over ``ndim`` dimensions
    (2 without, 3 with the w kernel), with :data:`ERROR_HEADROOM` for the
    grid's own rounding and the model's approximations.  Kernels whose grid
    correction gain exceeds :data:`MAX_CORRECTION_GAIN`, or amplifies the
    grid's ``unit_roundoff`` (2**-24 for float32 grids) beyond half of
    ``epsilon`` at the image edge, are ruled out (measured: sigma 1.25 in
    single precision with w planes missed 1e-5).
    """
    if not (epsilon > 0.0):
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    budget = epsilon / (ERROR_HEADROOM * math.sqrt(ndim))
    choices = []
    for sigma in SIGMAS:
        if not sigma_min <= sigma <= sigma_max:
            continue
        for support in SUPPORTS:
            beta, error = _table()[(sigma, support)]
            if error <= budget:
                gain = correction_gain(support, beta, sigma) ** ndim
                if gain > MAX_CORRECTION_GAIN or gain * unit_roundoff > 0.5 * epsilon:
                    break  # larger supports only amplify more
                choices.append(KernelChoice(support, beta, sigma, error))
                break
    if not choices:
        raise ValueError(
            f"no ES kernel reaches epsilon={epsilon:g} with sigma in [{sigma_min}, {sigma_max}] "
            f"(largest support {SUPPORTS[-1]}); raise epsilon or widen the sigma range")
    return choices


__all__ = ["ERROR_HEADROOM", "KERNEL_EVALS", "KERNEL_TABLE", "MAX_CORRECTION_GAIN",
           "SIGMA_MAX", "SIGMA_MIN",
           "KernelChoice", "aliasing_error", "build_table",
           "candidate_kernels", "correction_gain", "es_fourier", "es_kernel",
           "horner_coefficients", "horner_degree", "horner_error", "horner_suits",
           "horner_taps", "horner_variables", "optimal_beta"]
