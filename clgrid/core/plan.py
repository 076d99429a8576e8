"""Gridding core, stage "plan": geometry, kernel, grid, w planes, tiles, memory.

Everything here is decided once per observation geometry, on the host, from
sizes and the w range only (never from the visibilities):

* :class:`ImageGeometry`: the validated image and convention arguments
  (ducc0's ``npix``, ``pixsize``, ``center``, flips, ``epsilon``...).
* :func:`choose_kernel`: the cheapest ES kernel (support, oversampling)
  meeting ``epsilon``, by a cost model of FFT work against kernel taps, as
  ducc0's wgridder does.
* :class:`GridLayout`: kernel, padded grid size and w planes; shared by every
  device or Dask worker that grids a piece of the observation.
* :class:`TileShape`: the spreading tile for one device (from its profile).
* :func:`planes_per_pass`: how many w planes fit on the device at once, or a
  one-line refusal naming the bytes needed and available.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from ..device.profiles import DeviceProfile
from .eskernel import (KERNEL_EVALS, KERNEL_TABLE, SIGMA_MAX, SIGMA_MIN, KernelChoice,
                       candidate_kernels, horner_suits)

SPEED_OF_LIGHT = 299792458.0
#: Smallest epsilon per precision (ducc0 refuses smaller ones too).
MIN_EPSILON = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 2e-13}
#: Grid sizes are multiples of this, so that every device's tiles divide them.
GRID_MULTIPLE = 32
# Relative costs of one grid cell of FFT work and one kernel tap, used only to
# rank kernel choices.
FFT_COST_PER_CELL = 1.0
GRID_COST_PER_TAP = 2.0
# Share of the device's global memory the w planes may take.
_PLANE_MEMORY_SHARE = 0.6
#: Most bytes of w planes a pass holds on a CPU device (at least two planes):
#: its "device memory" is the host memory the caller's arrays live in, and a
#: pass of fewer planes costs a CPU little (each pass spreads only the points
#: of its planes).  ducc0's test_adjointness_wsclean at fov 120 degrees
#: (epsilon 2e-10, 128 x 250 pixels, hundreds of planes) held 3.05 GB in one
#: pass and took 4.5 s; with this cap 0.84 GB and 3.9 s (Intel runtime).
CPU_PLANE_BYTES = 512 * 2 ** 20


# ---------------------------------------------------------------- validation
def check_uvw(uvw, allow_empty: bool = False) -> np.ndarray:
    """(nrow, 3) float64 baseline coordinates in metres."""
    uvw = np.asarray(uvw)
    if uvw.ndim != 2 or uvw.shape[1] != 3 or (uvw.shape[0] == 0 and not allow_empty):
        raise ValueError(f"uvw must be (nrow, 3) with nrow > 0, got {uvw.shape}")
    if uvw.dtype.kind not in "fi":
        raise TypeError(f"uvw must be real, got {uvw.dtype}")
    if uvw.shape[0] >= 2 ** 32:
        raise ValueError("more than 2**32 rows: split the observation")
    return np.ascontiguousarray(uvw, np.float64)


def check_freq(freq) -> np.ndarray:
    """(nchan,) positive float64 channel frequencies in Hz."""
    freq = np.ascontiguousarray(np.atleast_1d(np.asarray(freq, dtype=np.float64)))
    if freq.ndim != 1 or freq.size == 0:
        raise ValueError(f"freq must be (nchan,) with nchan > 0, got {freq.shape}")
    check_finite(freq, "freq")
    if np.any(freq <= 0):
        raise ValueError("freq must be positive (Hz)")
    return freq


def check_npix(npix_x, npix_y) -> tuple[int, int]:
    """Image sizes as ints: even, >= 2 (a NaN or 2.5 names the argument)."""
    npix = []
    for name, value in (("npix_x", npix_x), ("npix_y", npix_y)):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be an even integer >= 2, got {value!r}") from None
        if not (math.isfinite(number) and number == int(number)):
            raise ValueError(f"{name} must be an even integer >= 2, got {value!r}")
        npix.append(int(value))
    if any(n < 2 or n % 2 for n in npix):
        raise ValueError(f"npix_x and npix_y must be even and >= 2, got {tuple(npix)}")
    return npix[0], npix[1]


def check_positive(value, name: str) -> float:
    value = float(value)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return value


def check_real(value, name: str) -> float:
    """A finite float (NaN or Inf named here, not deep in the kernel maths)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a finite real number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {number}")
    return number


def host_memory_bytes() -> int | None:
    """Physical memory of this machine, or None where the OS does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def size_text(nbytes: int) -> str:
    """Bytes for messages: GiB or MiB, then the exact count."""
    if nbytes >= 2 ** 30:
        return f"{nbytes / 2 ** 30:.1f} GiB ({nbytes} bytes)"
    return f"{mib(nbytes)} ({nbytes} bytes)" if nbytes >= 2 ** 20 else f"{nbytes} bytes"


def check_host_bytes(nbytes: int, needs: str, advice: str) -> None:
    """MemoryError, before allocating, where one array of ``nbytes`` exceeds
    this machine's physical memory: ``needs`` starts the message, ``advice``
    ends it.  Such a request would only swap or be killed by the OS later."""
    total = host_memory_bytes()
    if total is not None and int(nbytes) > total:
        raise MemoryError(f"{needs} needs {size_text(int(nbytes))} on the host; this "
                          f"machine has {total / 2 ** 30:.1f} GiB: {advice}")


def check_epsilon(epsilon, real_dtype) -> float:
    epsilon = float(epsilon)
    floor = MIN_EPSILON[np.dtype(real_dtype)]
    if not (epsilon >= floor) or not math.isfinite(epsilon) or epsilon >= 1.0:
        raise ValueError(f"epsilon must be in [{floor:g}, 1) for {np.dtype(real_dtype)} "
                         f"data, got {epsilon}")
    return epsilon


def check_finite(array: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or Inf")


def precision_dtype(precision: str) -> np.dtype:
    if precision not in ("single", "double"):
        raise ValueError(f"precision must be 'single' or 'double', got {precision!r}")
    return np.dtype(np.float32 if precision == "single" else np.float64)


def precision_of(dtype, name: str) -> str:
    """``'single'`` or ``'double'`` from a visibility or image dtype."""
    dtype = np.dtype(dtype)
    if dtype in (np.complex64, np.float32):
        return "single"
    if dtype in (np.complex128, np.float64):
        return "double"
    raise TypeError(f"{name} must be complex64/complex128 (or float32/float64 images), "
                    f"got {dtype}")


# ---------------------------------------------------------------- geometry
@dataclasses.dataclass(frozen=True)
class ImageGeometry:
    """The image and the conventions of one imaging call (ducc0's arguments)."""

    npix_x: int
    npix_y: int
    pixsize_x: float
    pixsize_y: float
    epsilon: float
    do_w: bool = False
    precision: str = "single"
    flip_u: bool = False
    flip_v: bool = False
    flip_w: bool = False
    divide_by_n: bool = True
    sigma_min: float = SIGMA_MIN
    sigma_max: float = SIGMA_MAX
    center_x: float = 0.0
    center_y: float = 0.0
    double_precision_accumulation: bool = False

    @classmethod
    def from_arguments(cls, *, npix_x, npix_y, pixsize_x, pixsize_y, epsilon,
                       do_wgridding=False, precision="single", flip_u=False, flip_v=False,
                       flip_w=False, divide_by_n=True, sigma_min=SIGMA_MIN, sigma_max=SIGMA_MAX,
                       center_x=0.0, center_y=0.0,
                       double_precision_accumulation=False) -> "ImageGeometry":
        """Validated geometry from ducc0-style keyword arguments."""
        npix_x, npix_y = check_npix(npix_x, npix_y)
        geometry = cls(npix_x, npix_y, check_positive(pixsize_x, "pixsize_x"),
                       check_positive(pixsize_y, "pixsize_y"),
                       check_epsilon(epsilon, precision_dtype(precision)),
                       bool(do_wgridding), precision, bool(flip_u), bool(flip_v), bool(flip_w),
                       bool(divide_by_n) and bool(do_wgridding),
                       check_real(sigma_min, "sigma_min"), check_real(sigma_max, "sigma_max"),
                       check_real(center_x, "center_x"), check_real(center_y, "center_y"),
                       bool(double_precision_accumulation))
        return geometry

    @classmethod
    def given(cls, geometry: "ImageGeometry | None", **arguments) -> "ImageGeometry":
        """``geometry`` as it is, or one :meth:`from_arguments` makes of the
        keywords; both at once is a ``ValueError`` (the constructors that
        take either: ``Imager``, ``MultiDeviceImager``)."""
        if geometry is None:
            return cls.from_arguments(**arguments)
        sizes = ("npix_x", "npix_y", "pixsize_x", "pixsize_y", "epsilon")
        if any(arguments.get(name) is not None for name in sizes):
            raise ValueError("give geometry= or npix_x, npix_y, pixsize_x, pixsize_y and "
                             "epsilon, not both")
        return geometry

    @property
    def vis_real(self) -> np.dtype:
        return precision_dtype(self.precision)

    @property
    def grid_real(self) -> np.dtype:
        return np.dtype(np.float64) if self.double_precision_accumulation else self.vis_real

    @property
    def signs(self) -> tuple[float, float, float]:
        return tuple(-1.0 if flip else 1.0 for flip in (self.flip_u, self.flip_v, self.flip_w))

    @property
    def shifted(self) -> bool:
        return bool(self.center_x or self.center_y)

    @property
    def centre_lm(self) -> tuple[float, float]:
        """Image centre in the (flipped) frame the grid uses: ducc0 negates the
        centre with its axis (wgridder.h: lshift = flip_u ? -center_x : center_x),
        so a flipped transform is the plain one of (-u, v, w) centred on
        (-center_x, center_y)."""
        s_u, s_v, _ = self.signs
        return s_u * self.center_x, s_v * self.center_y

    def pixel_lm(self) -> tuple[np.ndarray, np.ndarray]:
        l_rad = (np.arange(self.npix_x) - self.npix_x // 2) * self.pixsize_x + self.center_x
        m_rad = (np.arange(self.npix_y) - self.npix_y // 2) * self.pixsize_y + self.center_y
        return l_rad, m_rad

    def _edge_lm(self) -> tuple[np.ndarray, np.ndarray]:
        """l and m of the first and last pixel per axis: where l^2 and m^2
        peak (a parabola's maximum over a line sits at an end), computed as
        :meth:`pixel_lm` does, so the same bits without npix-long arrays."""
        def ends(n: int, pixsize: float, centre: float) -> np.ndarray:
            # Python ints: no int64 overflow for absurd npix (refused later)
            return np.array([-(n // 2) * pixsize + centre, (n - 1 - n // 2) * pixsize + centre])
        return (ends(self.npix_x, self.pixsize_x, self.center_x),
                ends(self.npix_y, self.pixsize_y, self.center_y))

    @property
    def max_eta(self) -> float:
        """Largest |n - 1| over the image.

        n - 1 falls as l^2 + m^2 grows, so its largest magnitude is at the
        largest l^2 + m^2.  Past the horizon (l^2 + m^2 > 1) ducc0 continues
        n to -sqrt(l^2 + m^2 - 1) (wgridder_impl.h: ``nm1 = -sqrt(-tmp) - 1``
        where ``tmp = 1 - l^2 - m^2 < 0``), so |n - 1| goes on growing there:
        :func:`n_minus_1`.
        """
        l_rad, m_rad = self._edge_lm()
        r2 = float(np.max(l_rad ** 2) + np.max(m_rad ** 2))
        return abs(n_minus_1(r2))


def n_minus_1(r2):
    """n - 1 at l^2 + m^2 = ``r2`` (scalar or array), ducc0's convention.

    Inside the horizon ``-r2 / (sqrt(1 - r2) + 1)`` (sqrt(1 - r2) - 1 without
    its cancellation near the centre); past it (``1 - r2 < 0``) ducc0's
    continuation ``-sqrt(r2 - 1) - 1``, i.e. n = -sqrt(l^2 + m^2 - 1)
    (wgridder_impl.h, ``Wgridder::phase``).  The kernels
    (``templates/core_correct.cl.mako``, ``n_minus_1``) do the same.
    """
    r2 = np.asarray(r2, np.float64)
    tmp = 1.0 - r2
    inside = np.sqrt(np.maximum(tmp, 0.0))
    result = np.where(tmp >= 0.0, -r2 / (inside + 1.0),
                      -np.sqrt(np.maximum(-tmp, 0.0)) - 1.0)
    return float(result) if result.ndim == 0 else result


def w_range_wavelengths(geometry: ImageGeometry, uvw_m: np.ndarray,
                        freq_hz: np.ndarray) -> tuple[float, float]:
    """Smallest and largest (sign-flipped) w in wavelengths; (0, 0) for no rows."""
    if uvw_m.shape[0] == 0:
        return 0.0, 0.0
    w_m = uvw_m[:, 2] * geometry.signs[2]
    w_lo, w_hi = float(np.min(w_m)), float(np.max(w_m))
    if not (math.isfinite(w_lo) and math.isfinite(w_hi)):
        w_m = w_m[np.isfinite(uvw_m).all(axis=1)]
        w_lo, w_hi = (float(w_m.min()), float(w_m.max())) if w_m.size else (0.0, 0.0)
    ends = np.outer([w_lo, w_hi], freq_hz[[0, -1]]) / SPEED_OF_LIGHT
    return float(ends.min()), float(ends.max())


def plane_spacing(geometry: ImageGeometry, choice: KernelChoice) -> float:
    # The w kernel's "image" is eta = n - 1: keep |eta| dw <= 1 / (2 sigma),
    # the same oversampling margin as in u and v.
    return 0.5 / (choice.sigma * max(geometry.max_eta, 1e-300))


#: The smallest w sits this far (in planes) above the last place where its
#: footprint would start one plane lower (a margin for rounding).
W_MARGIN = 1e-6


def n_planes_for(geometry: ImageGeometry, choice: KernelChoice,
                 w_range: tuple[float, float]) -> int:
    """w planes a w range needs: a point's footprint starts at plane
    ceil(w_pos - W/2), which over the range (placed by :class:`GridLayout`'s
    ``w0`` just above a start boundary) takes ceil(span) values; W planes each."""
    w_min, w_max = w_range
    span = (w_max - w_min) / plane_spacing(geometry, choice)
    return math.ceil(span + 2.0 * W_MARGIN) + choice.support - 1


def good_grid_size(n: int, multiple: int = GRID_MULTIPLE) -> int:
    """Smallest size >= max(n, 2 * multiple) that is a multiple of ``multiple``
    and has no prime factors but 2, 3 and 5 (fast FFTs)."""
    size = max(2 * multiple, -(-int(n) // multiple) * multiple)
    while True:
        rest = size
        for prime in (2, 3, 5):
            while rest % prime == 0:
                rest //= prime
        if rest == 1:
            return size
        size += multiple


def choose_kernel(geometry: ImageGeometry, n_vis: int,
                  w_range: tuple[float, float]) -> KernelChoice:
    """Cheapest (FFT + spreading) ES kernel meeting ``epsilon``; ducc0 does the same."""
    best, best_cost = None, math.inf
    roundoff = float(np.finfo(geometry.grid_real).eps) / 2.0
    ndim = 3 if geometry.do_w else 2
    for choice in candidate_kernels(geometry.epsilon, ndim, geometry.sigma_min,
                                    geometry.sigma_max, roundoff):
        nu = good_grid_size(math.ceil(choice.sigma * geometry.npix_x))
        nv = good_grid_size(math.ceil(choice.sigma * geometry.npix_y))
        planes = n_planes_for(geometry, choice, w_range) if geometry.do_w else 1
        cost = (planes * FFT_COST_PER_CELL * nu * nv * math.log2(nu * nv)
                + GRID_COST_PER_TAP * max(n_vis, 1) * choice.support ** ndim)
        if cost < best_cost:
            best, best_cost = choice, cost
    return best


#: Largest grid side, plane count or tile field the kernels index (int32).
MAX_INDEX = 2 ** 31 - 1


def check_grid_size(nu: int, nv: int, grid_real) -> None:
    """ValueError, before anything is allocated, for an ``nu x nv`` grid
    past the kernels' 32-bit cell indices (a side); memory is checked per
    device by :func:`planes_per_pass`, which such a grid never reaches."""
    if max(nu, nv) > MAX_INDEX:
        plane_bytes = int(nu) * int(nv) * 2 * np.dtype(grid_real).itemsize
        raise ValueError(f"a {nu}x{nv} grid plane of {size_text(plane_bytes)} is past the "
                         f"kernels' 32-bit cell indices ({MAX_INDEX} a side): image fewer "
                         "pixels")


@dataclasses.dataclass(frozen=True)
class GridLayout:
    """Kernel, padded grid and w planes of one observation.

    Built on the host from sizes and the w range only, so that every device
    or Dask worker gridding a piece of the observation can share it (their
    grids then add up to the single-device one).
    """

    choice: KernelChoice
    nu: int
    nv: int
    w_range: tuple[float, float]
    n_planes: int
    dw: float
    w0: float

    @classmethod
    def build(cls, geometry: ImageGeometry, w_range: tuple[float, float],
              n_vis: int) -> "GridLayout":
        choice = choose_kernel(geometry, n_vis, w_range)
        nu = good_grid_size(math.ceil(choice.sigma * geometry.npix_x))
        nv = good_grid_size(math.ceil(choice.sigma * geometry.npix_y))
        check_grid_size(nu, nv, geometry.grid_real)
        if not geometry.do_w:
            return cls(choice, nu, nv, w_range, 1, 1.0, 0.0)
        dw = plane_spacing(geometry, choice)
        # the smallest w at w_pos = W/2 - 1 + W_MARGIN: its footprint starts at
        # plane 0 and spans up to ceil(span) start planes, not ceil(span) + 1
        # (ducc0 needs W planes for a w range under one plane too)
        w0 = w_range[0] - (0.5 * choice.support - 1.0 + W_MARGIN) * dw
        n_planes = n_planes_for(geometry, choice, w_range)
        if n_planes > MAX_INDEX:
            raise ValueError(f"the w range needs {n_planes} w planes, more than the kernels' "
                             f"32-bit plane index: image fewer pixels or split the w range")
        return cls(choice, nu, nv, w_range, n_planes, dw, w0)

    @classmethod
    def of_rows(cls, geometry: ImageGeometry, uvw_m: np.ndarray,
                freq_hz: np.ndarray) -> "GridLayout":
        return cls.build(geometry, w_range_wavelengths(geometry, uvw_m, freq_hz),
                         uvw_m.shape[0] * freq_hz.size)

    @property
    def n_wbins(self) -> int:
        """Number of distinct first planes a point's w footprint can start at."""
        return max(self.n_planes - self.choice.support + 1, 1)

    def w_of_plane(self, plane: int) -> float:
        return self.w0 + plane * self.dw


# ---------------------------------------------------------------- per device
#: Widths of the CPU vector kernels' rows of taps (one OpenCL vector up to 16,
#: pieces of 16 above).
ROW_TAP_WIDTHS = (4, 8, 16, 32, 64)


def row_taps(support: int) -> int:
    """Taps of a CPU vector kernel's row for kernel support ``support``:
    the narrowest of :data:`ROW_TAP_WIDTHS` that holds it (zeros past the
    support); 0 above the widest (no vector kernel takes it)."""
    return next((width for width in ROW_TAP_WIDTHS if support <= width), 0)


#: Largest tile side, lane or group count, plane block a tile may name
#: (work-groups and private tiles stay far below; bounds a cache's ints).
MAX_TILE_SIDE = 1024


@dataclasses.dataclass(frozen=True)
class TileShape:
    """Spreading tile of one device: ``tile_u`` rows kept per lane, ``lanes``
    columns (one per work-item, rows in registers);
    ``chunk_points``: most points one work-group takes of a (tile, plane)
    before the rest goes to another (load balance where the uv plane is
    dense); vector tiles: of a (tile, plane block), where the default
    (``2 ** 31``) means :func:`clgrid.core.spread.vector_chunk_points` (from
    the point count and the device's compute units: a dense centre tile
    would otherwise keep one core busy while the others wait);
    ``vector``: CPUs: one work-item per tile with its ``lanes`` (16) columns
    as one OpenCL vector (``spread_vector``) instead of one lane per column;
    it grids ``plane_block`` w planes at once, so a
    point's u and v kernels are evaluated once per block, not per plane;
    the GPU kernel does the same with w-stacking: a work-group takes a
    block of ``plane_block`` planes, ``groups`` groups of ``lanes`` for each
    (:meth:`lane_groups`);
    ``groups``: GPU kernel: work-groups of ``groups x lanes`` work-items, each
    group of ``lanes`` taking every ``groups``-th point into its own copy of
    the tile (copies added in group order at the end), so a tile as narrow as
    the kernel keeps most lanes busy;
    ``batch`` (GPU kernel): points a work-group stages in local memory at a
    time (0: one a work-item, ``lanes x groups``; fewer where a wide table's
    staging would not fit the local memory, :func:`clgrid.core.table.fit_staging`);
    ``kernel_eval`` (vector tiles): how ``spread_vector`` evaluates the ES
    kernel's W taps of a point, ``'exp'`` (the formula, as a LANES vector) or
    ``'horner'`` (ducc0's piecewise polynomials, one Horner vector of
    degree W + 2; used only where :func:`clgrid.core.eskernel.horner_suits`
    the kernel, see :meth:`kernel_eval_for`)."""

    tile_u: int
    lanes: int
    chunk_points: int = 2 ** 31
    vector: bool = False
    plane_block: int = 1
    groups: int = 1
    kernel_eval: str = "exp"
    batch: int = 0

    @property
    def staged(self) -> int:
        """Points the GPU kernel stages at a time without w-stacking
        (:attr:`batch` or one a work-item)."""
        return self.staged_for(False)

    def lane_groups(self, do_w: bool) -> tuple[int, int]:
        """GPU kernel: (groups sharing the points of a plane, planes) of a
        work-group: ``plane_block`` planes with w-stacking, else one."""
        if do_w and self.plane_block > 1 and not self.vector:
            return self.groups, self.plane_block
        return self.groups, 1

    def staged_for(self, do_w: bool) -> int:
        """Points the GPU kernel stages at a time (:attr:`batch` or one a
        work-item), with or without w-stacking."""
        groups, planes = self.lane_groups(do_w)
        return self.batch or self.lanes * groups * planes

    def reach(self, support: int) -> int:
        """Lower neighbour tiles per axis whose bins hold points that can
        reach this tile: ``ceil((W - 1) / tile)``, at least 1."""
        return max(1, -(-(int(support) - 1) // min(self.tile_u, self.lanes)))

    def check(self, support: int, vector_taps: int = 16, wide: bool = False) -> None:
        """A tile reads its own and its lower neighbours' bins: the ES path
        and the vector tile (a halo of one neighbour) one neighbour, so a
        footprint must not reach past it: W <= tile + 1; the table kernels'
        lane tiles (``wide``) as many as :meth:`reach` says.  A vector tile
        holds ``vector_taps`` taps a row (16: one vector; the table kernels'
        full slices take up to 64, in pieces).  The imaging core's grids
        (not ``wide``) are multiples of :data:`GRID_MULTIPLE` and not padded:
        its tiles divide that, or the last rows or columns of every plane
        would belong to no tile (their points never spread); the table
        kernels pad their grids to whole tiles."""
        self._check_fields()
        if not wide and (GRID_MULTIPLE % self.tile_u or GRID_MULTIPLE % self.lanes):
            divisors = [d for d in range(1, GRID_MULTIPLE + 1) if GRID_MULTIPLE % d == 0]
            raise ValueError(f"tile {self.tile_u}x{self.lanes}: the imaging core's grids are "
                             f"multiples of {GRID_MULTIPLE}, so tile_u and lanes must divide "
                             f"it ({', '.join(map(str, divisors))})")
        if support > min(self.tile_u, self.lanes) + 1 and (self.vector or not wide):
            raise ValueError(f"tile {self.tile_u}x{self.lanes} is too small for kernel support "
                             f"{support} (needs support <= tile + 1)")
        # the table kernels pad their grids to whole tiles: 64 lanes there
        lanes = (2, 4, 8, 16, 32) + ((64,) if vector_taps > 32 else ())
        if self.vector and self.lanes not in lanes:
            raise ValueError(f"a vector tile needs {', '.join(map(str, lanes))} lanes (grids "
                             f"are multiples of {GRID_MULTIPLE}), got {self.lanes}")
        if self.plane_block < 1:
            raise ValueError(f"plane_block must be >= 1, got {self.plane_block}")
        if self.groups < 1 or (self.groups > 1 and self.vector):
            raise ValueError("groups > 1 is for the GPU kernel (not a vector tile), groups >= 1")
        if self.vector and support > min(self.lanes, vector_taps):
            raise ValueError(f"a vector tile of {self.lanes} lanes holds at most "
                             f"{min(self.lanes, vector_taps)} kernel taps, not support {support}")
        if not 0 <= self.batch <= self.lanes * self.groups or (self.batch and self.vector):
            raise ValueError(f"batch must be 0 or 1 .. lanes x groups "
                             f"({self.lanes * self.groups}) and is for the GPU kernel, "
                             f"got {self.batch}")
        if self.kernel_eval not in KERNEL_EVALS:
            raise ValueError(f"kernel_eval must be one of {KERNEL_EVALS}, "
                             f"got {self.kernel_eval!r}")
        if self.kernel_eval != "exp" and wide:
            raise ValueError("kernel_eval 'horner' is for the ES kernel, not tables")

    def _check_fields(self) -> None:
        """Types and ranges (a tile from a cache file or a dict may hold
        anything): ints within what the kernels index, a bool, a name."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "vector":
                ok = isinstance(value, (bool, np.bool_))
            elif field.name == "kernel_eval":
                ok = isinstance(value, str)
            else:
                ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            if not ok:
                raise TypeError(f"TileShape.{field.name} must be {field.type}, got {value!r}")
        # chunk_points' default, 2 ** 31, fits the kernels' uint32
        limits = {"chunk_points": 2 ** 31, "batch": MAX_TILE_SIDE ** 2}
        for name in ("tile_u", "lanes", "chunk_points", "plane_block", "groups", "batch"):
            low, high = (0 if name == "batch" else 1), limits.get(name, MAX_TILE_SIDE)
            if not low <= getattr(self, name) <= high:
                raise ValueError(f"TileShape.{name} must be in {low} .. {high}, "
                                 f"got {getattr(self, name)}")

    @classmethod
    def from_dict(cls, fields) -> "TileShape":
        """A tile from a dict of its fields (a cache entry), checked for
        types and ranges; TypeError or ValueError naming the field."""
        if not isinstance(fields, dict):
            raise TypeError(f"a tile must be a dict of TileShape fields, got "
                            f"{type(fields).__name__}")
        known = {field.name for field in dataclasses.fields(cls)}
        if set(fields) - known or not {"tile_u", "lanes"} <= set(fields):
            raise TypeError(f"a tile needs tile_u and lanes and takes only {sorted(known)}, "
                            f"got {sorted(map(str, fields))}")
        shape = cls(**fields)
        shape._check_fields()
        return shape

    def check_device(self, profile: DeviceProfile) -> None:
        """A vector tile only where the device's compiler builds vector
        kernels (:attr:`DeviceProfile.vector_kernels`) and the device has
        fp64 (the tile's totals are float64)."""
        if self.vector and not profile.vector_kernels:
            raise ValueError(f"{profile.platform_name.strip()} {profile.driver_version} cannot "
                             "build the vector (CPU) tiles: use a tile with vector=False, or "
                             "PoCL >= 3.1 / the Intel CPU runtime")
        if self.vector and not profile.fp64:
            raise ValueError(f"{profile.device_name!r} has no fp64, which the vector (CPU) "
                             "tiles total in: use a tile with vector=False")

    def kernel_eval_for(self, choice: KernelChoice) -> str:
        """The evaluation ``spread_vector`` uses for ``choice``: Horner only
        where its polynomials are accurate enough for that kernel."""
        if self.kernel_eval == "horner" and horner_suits(choice.support, choice.beta):
            return "horner"
        return "exp"

    @classmethod
    def for_device(cls, profile: DeviceProfile, support: int,
                   do_w: bool = False) -> "TileShape":
        """The default tile of a device for kernel width ``support``, with or
        without w-stacking."""
        if profile.device_type == "gpu":
            # H200, 116 M points, W 7 (benchmarks/RESULTS.md): spread 41 ms with
            # 8 x 32 tiles, 25 ms with 8 x 8 tiles in 4 groups of 8 lanes; H100,
            # the taps by Horner's rule: 25.1 -> 21.4 ms, with w 142.7 -> 117.0 ms;
            # with w, blocks of 8 planes: 134.2 -> 73-74 ms (one group of lanes
            # a plane once the taps were padded; RESULTS, "w planes in blocks"),
            # 62.5 ms with no test in the inner loop (swept again: still best);
            # no w, once a tile read only the neighbours' points that reach it
            # (split bins): 8 groups 11.6-12.0 ms against 4 groups 12.1-12.5
            if support > 9:
                return cls(16, 32, 2048)
            return (cls(8, 8, 4096, plane_block=8, kernel_eval="horner") if do_w
                    else cls(8, 8, 4096, groups=8, kernel_eval="horner"))
        if not (profile.vector_kernels and profile.fp64):
            return cls(8, 8) if support <= 9 else cls(16, 16)
        # Horner: measured faster than exp on the Intel CPU runtime
        # (benchmarks/RESULTS.md, "Gridding core, CPU spreading").  With w,
        # all of a narrow kernel's planes in one block, so each point is read
        # once: W 7, spread 70 -> 67 ms on the Intel runtime's 2 cores, and
        # about 15-25% (within noise) on PoCL 5's 16 ("plane blocks" there);
        # wider kernels keep 4 (their private tiles grow with the block).
        return cls(16, 16, vector=True, plane_block=support if support <= 8 else 4,
                   kernel_eval="horner")


def explain_imaging(profile: DeviceProfile, support: int = 7) -> dict:
    """One row for ``clgrid devices --explain``: the imaging core's spreading
    tile for a kernel of width ``support`` (7: epsilon 1e-5 in single
    precision) and how it computes positions and phases on this device."""
    row = {"id": f"{profile.platform_index}:{profile.device_index}",
           "device": f"{profile.platform_key}: {profile.device_name}"}
    if not profile.usable:
        return dict(row, tile="-", positions="-", precisions="-")
    tiles = TileShape.for_device(profile, support)
    with_w = TileShape.for_device(profile, support, do_w=True)
    shape = (f"{tiles.tile_u}x{tiles.lanes} " + ("vector" if tiles.vector else
                                                  f"lanes, {tiles.groups} group(s)")
             + (f", {tiles.plane_block} w planes a block" if tiles.vector else "")
             + (f" (with w: {with_w.groups} a plane, {with_w.plane_block} w planes a block)"
                if with_w.plane_block > 1 and not with_w.vector else "")
             + (", Horner taps" if tiles.kernel_eval == "horner" and any(
                 horner_suits(support, beta) for (_, width), (beta, _) in KERNEL_TABLE.items()
                 if width == support) else ""))
    if profile.fp64:
        return dict(row, tile=shape, positions="double", precisions="single, double")
    return dict(row, tile=shape, positions="float-float (no fp64), Kahan-summed tiles",
                precisions="single")


#: Visibilities per row block on GPUs: each block's upload overlaps the
#: spreading of the one before; 2**24 complex64 are 128 MiB.
VIS_PER_BLOCK = 2 ** 24


def row_blocks(profile: DeviceProfile, n_rows: int, n_chan: int,
               vis_per_block: int | None = None) -> list[tuple[int, int]]:
    """(first row, stop row) of each block of visibilities the core grids in
    turn.  GPUs take blocks of about ``vis_per_block`` (default
    :data:`VIS_PER_BLOCK`) so copies overlap spreading; CPUs, whose device
    memory is host memory, take all rows at once.  The first blocks are an
    eighth, a quarter and half of that: nothing overlaps the first block's
    upload, so the device starts sooner.  Block starts are multiples of the
    rows that keep every per-row array's sub-buffer aligned to the device's
    base address alignment."""
    if vis_per_block is None:
        vis_per_block = VIS_PER_BLOCK if profile.device_type == "gpu" else 0
    if n_rows == 0 or vis_per_block <= 0 or n_rows * n_chan <= vis_per_block:
        return [(0, n_rows)]
    align = max(1, profile.base_align_bytes)   # a one-byte-per-visibility mask needs it
    rows = max(1, vis_per_block // max(n_chan, 1))
    rows = -(-rows // align) * align
    size = max(align, -(-(rows // 8) // align) * align)
    blocks, first = [], 0
    while first < n_rows:
        blocks.append((first, min(first + size, n_rows)))
        first, size = first + size, min(2 * size, rows)
    return blocks


def cut_blocks(blocks: list[tuple[int, int]], cuts) -> list[tuple[int, int]]:
    """``blocks`` (first, stop) with each row of ``cuts`` inside one made a
    block boundary (a piece of several devices' job whose first or last
    plane takes only some of its rows: see :class:`clgrid.core.image.ImageStage`)."""
    out = []
    for first, stop in blocks:
        inside = sorted({int(c) for c in cuts if first < c < stop})
        edges = [first] + inside + [stop]
        out += list(zip(edges[:-1], edges[1:]))
    return out


def mib(nbytes: int) -> str:
    """Bytes as MiB for messages (one decimal below 10 MiB)."""
    value = nbytes / 2 ** 20
    return f"{value:.0f} MiB" if value >= 10 else f"{value:.1f} MiB"


def check_allocation(profile: DeviceProfile, nbytes: int, needs: str, advice: str) -> None:
    """MemoryError, before allocating, where ``nbytes`` in one buffer exceed
    the device's largest allocation: ``needs`` (the message's start, with
    ``{size}`` for the MiB needed), the device's limit, then ``advice``."""
    if nbytes > profile.max_alloc_bytes:
        raise MemoryError(f"{needs.format(size=mib(nbytes))}; "
                          f"{profile.device_name.strip()!r} allows "
                          f"{mib(profile.max_alloc_bytes)} per allocation: {advice}")


def point_bytes(grid_real) -> int:
    """Device bytes per visibility the core keeps from set points on: the
    sorted index and the sort's second copy, cells (int4), offsets (real4)
    and (GPUs) the gathered value, as ``Engine._block_bytes``."""
    itemsize = np.dtype(grid_real).itemsize
    return 2 * 4 + 16 + 4 * itemsize + 2 * itemsize


#: Most of a device's memory the arrays a plan keeps to save work per call
#: (facet phasors, w screens) may take.
KEPT_MEMORY_SHARE = 0.125


def fits_kept(profile: DeviceProfile, one_bytes: int, all_bytes: int | None = None) -> bool:
    """Whether a plan may keep an array of ``one_bytes`` (and all such arrays,
    ``all_bytes``) on the device: one allocation, within
    :data:`KEPT_MEMORY_SHARE` of its memory."""
    total = one_bytes if all_bytes is None else all_bytes
    return (int(one_bytes) <= profile.max_alloc_bytes
            and int(total) <= KEPT_MEMORY_SHARE * profile.global_mem_bytes)


#: What to do with more visibilities than a device holds.
ROWS_IN_PARTS = ("grid the rows in parts (an Imager per chunk of rows, adding the images), "
                 "use several devices (devices=) or Dask (clgrid.dask)")


def core_memory_budget(profile: DeviceProfile) -> int:
    """Device bytes the core's plans, visibilities and w planes share."""
    return int(_PLANE_MEMORY_SHARE * profile.global_mem_bytes)


def check_points_fit(profile: DeviceProfile, n_vis: int, block_vis: int, grid_real) -> None:
    """Refuse, before anything is allocated, visibilities whose set points
    the device cannot hold: the largest block's offsets in one buffer, and
    every point's records plus one complex value each in the core's share
    of the memory (which the grid planes share, :func:`planes_per_pass`).

    Raises
    ------
    MemoryError
        With the bytes needed and available, and what to do instead.
    """
    itemsize = np.dtype(grid_real).itemsize
    # a block's offsets: the largest per-point buffer
    check_allocation(profile, int(block_vis) * 4 * itemsize,
                     f"{block_vis} visibilities need {{size}} for their offsets in one buffer",
                     ROWS_IN_PARTS)
    needed = int(n_vis) * (point_bytes(grid_real) + 2 * itemsize)
    available = core_memory_budget(profile)
    if needed > available:
        raise MemoryError(
            f"{n_vis} visibilities need {mib(needed)} on the device (set-point records and "
            f"the visibilities); {profile.device_name.strip()!r} gives the core "
            f"{mib(available)} of its {mib(profile.global_mem_bytes)}, grid planes "
            f"included: {ROWS_IN_PARTS}")


def planes_per_pass(profile: DeviceProfile, layout: GridLayout, grid_complex: np.dtype,
                    other_bytes: int = 0, image_bytes: int = 0) -> int:
    """How many w planes the device holds at once (all of them if they fit).

    ``image_bytes``: one image-sized buffer (the correction and each dirty
    image take one); ``other_bytes``: everything else kept on the device.

    Raises
    ------
    MemoryError
        When not even one plane (or the image) fits, with the bytes needed and
        available.
    """
    check_allocation(profile, image_bytes, "the image needs {size} in one buffer",
                     "image fewer pixels or split the field into facets (center_x/center_y)")
    other_bytes = int(other_bytes) + 3 * int(image_bytes)
    plane_bytes = layout.nu * layout.nv * np.dtype(grid_complex).itemsize
    budget = core_memory_budget(profile) - int(other_bytes)
    if profile.device_type == "cpu":
        budget = min(budget, max(CPU_PLANE_BYTES, 2 * plane_bytes))
    by_memory = budget // plane_bytes
    by_allocation = profile.max_alloc_bytes // plane_bytes
    fit = int(min(by_memory, by_allocation, layout.n_planes))
    if fit < 1:
        raise MemoryError(
            f"one {layout.nu}x{layout.nv} grid plane needs {plane_bytes / 2**20:.0f} MiB; "
            f"{profile.device_name.strip()!r} allows {profile.max_alloc_bytes / 2**20:.0f} MiB "
            f"per allocation and has {profile.global_mem_bytes / 2**20:.0f} MiB "
            f"(visibilities and coordinates take {other_bytes / 2**20:.0f} MiB): "
            "image fewer pixels, raise epsilon, or use several devices")
    # the image comes back to host memory (after the device's limits, which
    # name the device where both refuse)
    check_host_bytes(image_bytes, "the image", "image fewer pixels or split the field into "
                     "facets (center_x/center_y)")
    # equal passes: the last one is not a sliver
    passes = -(-layout.n_planes // fit)
    return -(-layout.n_planes // passes)


def params_of(value, cls: type, name: str):
    """``value`` as a ``cls`` dataclass: itself, one made from a dict of its
    fields, or None; TypeError otherwise (``name``: the keyword, for the
    message)."""
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, dict):
        return cls(**value)
    raise TypeError(f"{name} must be a {cls.__module__}.{cls.__name__} or a dict, got "
                    f"{type(value).__name__}")


__all__ = ["CPU_PLANE_BYTES", "FFT_COST_PER_CELL", "GRID_COST_PER_TAP", "GRID_MULTIPLE", "KEPT_MEMORY_SHARE",
           "MAX_INDEX", "MAX_TILE_SIDE", "MIN_EPSILON", "ROWS_IN_PARTS", "ROW_TAP_WIDTHS",
           "SPEED_OF_LIGHT", "VIS_PER_BLOCK", "W_MARGIN", "GridLayout", "ImageGeometry",
           "TileShape", "check_allocation", "core_memory_budget", "check_epsilon", "check_finite",
           "check_freq", "check_grid_size", "check_host_bytes", "check_npix",
           "check_points_fit", "check_positive", "cut_blocks", "check_real", "check_uvw",
           "choose_kernel", "explain_imaging", "fits_kept", "good_grid_size",
           "host_memory_bytes", "mib", "n_minus_1", "n_planes_for", "params_of",
           "plane_spacing", "planes_per_pass", "point_bytes", "precision_dtype", "precision_of",
           "row_blocks", "row_taps", "size_text", "w_range_wavelengths"]
