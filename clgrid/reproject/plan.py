"""What ``clgrid.reproject_interp`` makes of its inputs: WCS parsing, the
checks and messages of reproject, axis order, plane broadcasting, spectral
axes, and whether the pixel map runs on the device or in astropy.

A device pixel map is used when both celestial WCSs are projections of
:data:`clgrid.reproject.wcs_params.DEVICE_PROJECTIONS` and the frame change is a
rotation; it is checked against astropy's ``pixel_to_pixel`` on a grid of
sample pixels (1e-6 pixel) before use, and any disagreement falls back to
astropy's map for every pixel (exact, slower).
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import numpy as np
import pyopencl.array as cla

from .wcs_params import CelestialPlane, from_astropy, map_pixels_numpy, pixel_map_params

#: Largest disagreement (pixels) between the device map and astropy accepted.
MAP_CHECK_TOLERANCE = 1e-6


def parse_input(input_data, hdu_in):
    """(array, wcs) of any reproject-style input."""
    if isinstance(input_data, tuple) and len(input_data) == 2:
        data, wcs = input_data
        return _host_or_device(data), as_wcs(wcs)
    if isinstance(input_data, (str, os.PathLike)):
        if _is_avm_image(input_data):
            return _read_avm_image(input_data)
        from astropy.io import fits
        with fits.open(input_data) as hdulist:
            hdu = hdulist[hdu_in]
            return _host_or_device(np.array(hdu.data)), as_wcs(hdu.header)
    if hasattr(input_data, "__getitem__") and hasattr(input_data, "index_of"):
        return parse_input(input_data[hdu_in], hdu_in)  # HDUList
    if hasattr(input_data, "data") and hasattr(input_data, "header"):
        return _host_or_device(input_data.data), as_wcs(input_data.header)
    if hasattr(input_data, "data") and getattr(input_data, "wcs", None) is not None:
        return _host_or_device(input_data.data), as_wcs(input_data.wcs)  # NDData
    raise TypeError("input_data should either be an HDU object or a tuple of (array, WCS) "
                    "or (array, Header)")


def _host_or_device(data):
    """A device array as it is; anything else (dask arrays, memmaps, lists)
    as a host numpy array, float16 widened to float32 (exactly: the device
    reads no half floats)."""
    if isinstance(data, cla.Array):
        return data
    data = np.asarray(data)
    if data.dtype.kind == "f" and data.dtype.itemsize == 2:
        data = data.astype(np.float32)
    return data


def _is_avm_image(path) -> bool:
    """Whether ``path`` is a PNG or JPEG file (reproject's test: magic bytes)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError:
        return False
    return head == b"\x89PNG\r\n\x1a\n" or head[:3] == b"\xff\xd8\xff"


def _read_avm_image(path):
    """(channels, ny, nx) array and WCS of a PNG/JPEG with AVM metadata, as
    reproject reads it (rows flipped: FITS counts them from the bottom)."""
    from PIL import Image
    from pyavm import AVM
    with Image.open(path) as image:
        data = np.array(image)
    if data.ndim == 2:
        data = data[None]
    else:
        data = data.transpose(2, 0, 1)
    return np.ascontiguousarray(data[:, ::-1]), AVM.from_image(path).to_wcs()


def parse_output(output_projection, shape_out, output_array):
    """(wcs, shape) of the output projection."""
    wcs = as_wcs(output_projection)
    if shape_out is None and output_array is not None:
        shape_out = output_array.shape
    if shape_out is None:
        header = output_projection
        if hasattr(header, "get") and not isinstance(header, str):
            try:
                shape_out = tuple(int(header[f"NAXIS{i}"])
                                  for i in range(int(header["NAXIS"]), 0, -1))
            except KeyError:  # reproject's message (its tests match it)
                raise ValueError("Need to specify shape since output header does not contain "
                                 "complete shape information") from None
        elif getattr(wcs, "array_shape", None) is not None:
            shape_out = wcs.array_shape
        else:
            raise ValueError("Need to specify shape_out when specifying output_projection as "
                             "WCS object")
    return wcs, tuple(int(n) for n in shape_out)


def as_wcs(wcs):
    """An astropy WCS (or CelestialPlane, or other APE-14 WCS) of a header/WCS."""
    if isinstance(wcs, CelestialPlane):
        return wcs
    from astropy.io import fits
    from astropy.wcs import WCS
    if isinstance(wcs, WCS):
        return wcs
    if isinstance(wcs, (fits.Header, dict, str)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FITSFixedWarning chatter
            return WCS(wcs)
    low = getattr(wcs, "low_level_wcs", wcs)
    if isinstance(low, WCS):
        return low
    inner = getattr(low, "_wcs", None)
    if isinstance(inner, WCS) and getattr(low, "pixel_n_dim", None) == inner.pixel_n_dim \
            and all(isinstance(s, slice) and (s.start or 0) == 0 and s.step in (None, 1)
                    for s in getattr(low, "_slices_array", [slice(None)])):
        return inner  # a wrapper of a FITS WCS slicing nothing off its start
    if hasattr(low, "pixel_n_dim"):
        from astropy.wcs.wcsapi import HighLevelWCSWrapper
        return HighLevelWCSWrapper(low)  # any other APE-14 WCS: astropy maps it
    raise TypeError(f"cannot use {type(wcs).__name__} as a WCS")


def _pixel_n_dim(wcs) -> int:
    return 2 if isinstance(wcs, CelestialPlane) else int(wcs.pixel_n_dim)


def _has_celestial(wcs) -> bool:
    """Whether a WCS has celestial axes: astropy's ``has_celestial``, else
    (any APE-14 WCS, gwcs included) a world axis whose object is a SkyCoord."""
    if isinstance(wcs, CelestialPlane):
        return True
    if hasattr(wcs, "has_celestial"):
        return bool(wcs.has_celestial)
    low = getattr(wcs, "low_level_wcs", wcs)
    try:
        from astropy.coordinates import SkyCoord
        classes = low.world_axis_object_classes.values()
        if any(isinstance(entry[0], type) and issubclass(entry[0], SkyCoord)
               for entry in classes):
            return True
    except Exception:  # noqa: BLE001  (a WCS without object classes: its axis types)
        pass
    return any(t and "pos." in t for t in low.world_axis_physical_types)


def validate(wcs_in, wcs_out, shape_in, shape_out) -> tuple[int, ...]:
    """reproject's checks (and messages); returns the full output shape
    (leading plane axes of the input added when missing)."""
    from astropy.wcs import WCS
    n_wcs = _pixel_n_dim(wcs_in)
    if n_wcs != _pixel_n_dim(wcs_out):
        raise ValueError("Number of dimensions in input and output WCS should match")
    if len(shape_out) < n_wcs:
        raise ValueError("Too few dimensions in shape_out")
    if len(shape_in) < n_wcs:
        raise ValueError("Too few dimensions in input data")
    if len(shape_out) == n_wcs and len(shape_in) > n_wcs:
        shape_out = tuple(shape_in[:-n_wcs]) + tuple(shape_out)
    if len(shape_in) != len(shape_out):
        raise ValueError("Number of dimensions in input and output data should match "
                         f"(input {tuple(shape_in)}, output {tuple(shape_out)})")
    if tuple(shape_in[:-n_wcs]) != tuple(shape_out[:-n_wcs]):
        raise ValueError("Dimensions to be looped over must match exactly")
    if _has_celestial(wcs_in) and not _has_celestial(wcs_out):
        raise ValueError("Input WCS has celestial components but output WCS does not")
    if _has_celestial(wcs_out) and not _has_celestial(wcs_in):
        raise ValueError("Output WCS has celestial components but input WCS does not")
    if not _has_celestial(wcs_in) and n_wcs != 2:
        raise ValueError("without celestial axes clgrid.reproject_interp maps 2-D WCSs only "
                         f"(these have {n_wcs} pixel axes)")
    if isinstance(wcs_in, WCS) and isinstance(wcs_out, WCS):
        spec_in, spec_out = wcs_in.wcs.spec, wcs_out.wcs.spec
        if spec_in >= 0 and spec_out >= 0:
            if wcs_in.wcs.ctype[spec_in][:4] != wcs_out.wcs.ctype[spec_out][:4]:
                raise ValueError(
                    f"The input ({wcs_in.wcs.ctype[spec_in]}) and output "
                    f"({wcs_out.wcs.ctype[spec_out]}) spectral coordinate types are not "
                    "equivalent.")
        elif spec_in >= 0:
            raise ValueError("Input WCS has a spectral component but output WCS does not")
        elif spec_out >= 0:
            raise ValueError("Output WCS has a spectral component but input WCS does not")
    if min(shape_in[-2:]) < 1 or min(shape_out[-2:]) < 1:
        raise ValueError("empty celestial axes")
    return tuple(int(n) for n in shape_out)


def _celestial_first(wcs):
    """(WCS with the celestial axes first (lng, lat, others...), numpy axis
    permutation taking an array of the original WCS to that order)."""
    from astropy.wcs import WCS
    if isinstance(wcs, CelestialPlane) or not isinstance(wcs, WCS) or not wcs.has_celestial \
            or wcs.naxis == 2 and (wcs.wcs.lng, wcs.wcs.lat) == (0, 1):
        return wcs, None  # (a WCS without celestial axes is 2-D: validate)
    lng, lat = wcs.wcs.lng, wcs.wcs.lat
    correlation = wcs.axis_correlation_matrix  # world x pixel
    celestial_pixels = set(np.flatnonzero(correlation[[lng, lat]].any(axis=0)))
    if celestial_pixels != {lng, lat} or correlation[:, [lng, lat]].sum() != 4:
        raise ValueError("the celestial axes must not be coupled to other WCS axes")
    others = [k for k in range(wcs.naxis) if k not in (lng, lat)]
    if any(correlation[:, k].sum() != 1 or not correlation[k, k] for k in others):
        raise ValueError("non-celestial WCS axes must be independent")
    order = [lng, lat] + others
    if order == list(range(wcs.naxis)):
        return wcs, None
    n = wcs.naxis
    # numpy axis of WCS pixel axis k is n - 1 - k; new numpy order is the new WCS order reversed
    permutation = [n - 1 - k for k in order[::-1]]
    return wcs.sub([k + 1 for k in order]), permutation


@dataclasses.dataclass
class Job:
    """One reprojection, in canonical axis order: (planes..., lat, lng)."""

    planes_in: object                 # (n, ny, nx) host or device array
    shape_out: tuple[int, ...]        # canonical output shape
    permutation_out: list[int] | None
    celestial_in: object
    celestial_out: object
    roundtrip: bool
    n_wcs: int = 2                    # pixel axes of the WCSs (the rest are planes)
    device_map: tuple | None = None   # (plane_out, plane_in, frame_rotation)
    spectral: list | None = None      # per output plane: (input plane indices, weights)

    @property
    def projections(self):
        if self.device_map is None:
            return None
        return (self.device_map[0].projection, self.device_map[1].projection)

    @property
    def plane_shape(self) -> tuple[int, int]:
        return tuple(self.planes_in.shape[-2:])

    @property
    def raw_itemsize(self) -> int:
        return np.dtype(self.planes_in.dtype).itemsize

    def plane(self, index: int):
        """Input plane of output plane ``index`` (spectral axes interpolated)."""
        if self.spectral is None:
            return self.planes_in[index]
        indices, weights = self.spectral[index]
        if len(indices) == 0:
            return np.full(self.plane_shape, np.nan, np.float64)
        total = np.zeros(self.plane_shape, np.result_type(self.planes_in.dtype, np.float64))
        for k, w in zip(indices, weights):
            total += w * self.planes_in[k]
        return total

    def canonical(self, array):
        """(n, ny, nx) view of an output array in canonical order (a new
        array when the caller's axis order differs; see :meth:`finish`)."""
        if self.permutation_out is None:
            return array.reshape((-1,) + tuple(self.shape_out[-2:]))
        return np.empty(self.shape_out, array.dtype).reshape((-1,) + tuple(self.shape_out[-2:]))

    def finish(self, array, planes):
        """Copy the canonical result into the caller's axis order if needed."""
        if self.permutation_out is not None:
            inverse = np.argsort(self.permutation_out)
            array[...] = planes.reshape(self.shape_out).transpose(inverse)

    def host_map(self, row0: int, row1: int):
        """astropy's input pixel positions (x, y) of output rows row0..row1."""
        from astropy.wcs.utils import pixel_to_pixel
        nx_out = self.shape_out[-1]
        y_out, x_out = np.mgrid[row0:row1, 0:nx_out].astype(float)
        x_in, y_in = pixel_to_pixel(self.celestial_out, self.celestial_in, x_out, y_out)
        if self.roundtrip:
            x_back, y_back = pixel_to_pixel(self.celestial_in, self.celestial_out, x_in, y_in)
            with np.errstate(invalid="ignore"):
                reset = (np.abs(x_back - x_out) > 1) | (np.abs(y_back - y_out) > 1)
            x_in, y_in = np.where(reset, np.nan, x_in), np.where(reset, np.nan, y_in)
        return np.asarray(x_in, float), np.asarray(y_in, float)


def plan(data, wcs_in, wcs_out, shape_out, roundtrip: bool, order: int) -> Job:
    """The :class:`Job` of one ``reproject_interp`` call."""
    shape_out = validate(wcs_in, wcs_out, data.shape, shape_out)
    wcs_in_c, permutation_in = _celestial_first(wcs_in)
    wcs_out_c, permutation_out = _celestial_first(wcs_out)
    n_wcs = _pixel_n_dim(wcs_in)
    if permutation_in is not None:
        if isinstance(data, cla.Array):
            raise ValueError("device input arrays must have the celestial axes last")
        lead = list(range(data.ndim - n_wcs))
        data = data.transpose(lead + [len(lead) + k for k in permutation_in])
    canonical_out = tuple(shape_out)
    if permutation_out is not None:
        lead = list(range(len(shape_out) - n_wcs))
        full = lead + [len(lead) + k for k in permutation_out]
        canonical_out = tuple(shape_out[k] for k in full)
        permutation_out = full
    celestial_in = _celestial(wcs_in_c)
    celestial_out = _celestial(wcs_out_c)
    spectral = _spectral_map(wcs_in_c, wcs_out_c, data.shape, canonical_out, order)
    if spectral is not None and isinstance(data, cla.Array):
        raise ValueError("device input arrays need identical non-celestial axes")
    planes_in = data.reshape((-1,) + tuple(data.shape[-2:]))
    job = Job(planes_in, canonical_out, permutation_out, celestial_in, celestial_out,
              bool(roundtrip), n_wcs=n_wcs, spectral=spectral)
    job.device_map = _device_map(celestial_in, celestial_out, canonical_out[-2:])
    return job


def _celestial(wcs):
    from astropy.wcs import WCS
    if isinstance(wcs, WCS) and wcs.naxis > 2:
        return wcs.sub([1, 2])
    return wcs


def _spectral_map(wcs_in, wcs_out, shape_in, shape_out, order):
    """None when the non-celestial axes correspond one to one; else the
    per-output-plane weights of the input planes along the one extra axis
    (separable, same interpolation order as the celestial axes)."""
    from astropy.wcs import WCS
    if not isinstance(wcs_in, WCS) or wcs_in.naxis == 2:
        return None
    extra = wcs_in.naxis - 2
    same = all(
        shape_in[-3 - k] == shape_out[-3 - k]
        and wcs_in.sub([3 + k]).wcs.compare(wcs_out.sub([3 + k]).wcs, tolerance=1e-12)
        for k in range(extra))
    if same:
        return None
    if extra != 1:
        raise ValueError("only one non-celestial WCS axis may differ between input and output")
    if order >= 2:
        raise ValueError("spline orders along a differing spectral axis are not supported; "
                         "use order='bilinear' or 'nearest-neighbor'")
    from astropy.wcs.utils import pixel_to_pixel
    n_in, n_out = shape_in[-3], shape_out[-3]
    z = np.asarray(pixel_to_pixel(wcs_out.sub([3]), wcs_in.sub([3]),
                                  np.arange(n_out, dtype=float)), float)
    n_broadcast = int(np.prod(shape_in[:-3], dtype=int))
    per_plane = [_axis_weights(zk, n_in, order) for zk in z]
    return [(tuple(b * n_in + i for i in idx), w) for b in range(n_broadcast)
            for idx, w in per_plane]


def _axis_weights(z: float, n: int, order: int):
    """Input indices and weights of position ``z`` along one axis (reproject's
    edge rule; empty where blank)."""
    if not (-0.5 <= z < n - 0.5):
        return (), ()
    z = min(max(z, 0.0), n - 1.0)
    if order == 0:
        return (int(np.floor(z + 0.5)),), (1.0,)
    base = int(np.floor(z))
    fraction = z - base
    upper = min(base + 1, n - 1) if n > 1 else 0
    return (base, upper), (1.0 - fraction, fraction)


def _device_map(wcs_in, wcs_out, shape_out):
    """(plane_out, plane_in, frame rotation) when the device can map these
    WCSs exactly (checked against astropy), else None."""
    from astropy.wcs import WCS
    if isinstance(wcs_in, CelestialPlane) and isinstance(wcs_out, CelestialPlane):
        if wcs_in.frame != wcs_out.frame:
            raise ValueError("CelestialPlane inputs of different frames: pass astropy WCSs")
        return wcs_out, wcs_in, None
    if isinstance(wcs_in, CelestialPlane) or isinstance(wcs_out, CelestialPlane):
        raise ValueError("mixing a CelestialPlane with another WCS: pass astropy WCSs")
    if not (isinstance(wcs_in, WCS) and isinstance(wcs_out, WCS)):
        return None
    plane_in, plane_out = from_astropy(wcs_in), from_astropy(wcs_out)
    if plane_in is None or plane_out is None:
        return None
    # The planes (frozen, hashable) hold every number the map uses, frame keys included.
    key = (plane_in, plane_out, tuple(shape_out))
    if key not in _checked_maps:
        if len(_checked_maps) > 64:
            _checked_maps.clear()
        _checked_maps[key] = _checked_device_map(plane_in, plane_out, wcs_in, wcs_out,
                                                 shape_out)
    return _checked_maps[key]


_checked_maps: dict[tuple, tuple | None] = {}


def _checked_device_map(plane_in, plane_out, wcs_in, wcs_out, shape_out):
    rotation = None
    if plane_in.frame != plane_out.frame:
        rotation = frame_rotation(wcs_out, wcs_in)
        if rotation is None:
            return None
    if not _map_agrees(plane_out, plane_in, rotation, wcs_out, wcs_in, shape_out):
        return None
    return plane_out, plane_in, rotation


def frame_rotation(wcs_from, wcs_to) -> np.ndarray | None:
    """The 3x3 matrix taking celestial unit vectors of ``wcs_from``'s frame
    to ``wcs_to``'s, or None when that change is not a rotation (FK4's
    E-terms, frames needing distances or times)."""
    try:
        from astropy.coordinates import CartesianRepresentation, SkyCoord
        from astropy.wcs.utils import wcs_to_celestial_frame
        frame_from, frame_to = wcs_to_celestial_frame(wcs_from), wcs_to_celestial_frame(wcs_to)
        if frame_from.is_equivalent_frame(frame_to):
            return np.eye(3)

        def moved(vectors):
            coords = SkyCoord(CartesianRepresentation(*vectors), frame=frame_from)
            unit = coords.transform_to(frame_to).represent_as("unitspherical").to_cartesian()
            return np.array([unit.x.value, unit.y.value, unit.z.value])

        rotation = moved(np.eye(3))
        rng = np.random.default_rng(0)
        probe = rng.normal(size=(3, 16))
        probe /= np.linalg.norm(probe, axis=0)
        if np.abs(rotation @ probe - moved(probe)).max() > 1e-12 or \
                np.abs(rotation.T @ rotation - np.eye(3)).max() > 1e-12:
            return None
        return rotation
    except Exception:  # noqa: BLE001  (any frame astropy cannot turn: astropy's own map)
        return None


def _map_agrees(plane_out, plane_in, rotation, wcs_out, wcs_in, shape_out) -> bool:
    """The device formulas against astropy at 9 x 9 sample pixels."""
    from astropy.wcs.utils import pixel_to_pixel
    ny, nx = shape_out
    y, x = np.meshgrid(np.linspace(0, ny - 1, 9), np.linspace(0, nx - 1, 9), indexing="ij")
    params = pixel_map_params(plane_out, plane_in, rotation)
    ours = map_pixels_numpy(params, (plane_out.projection, plane_in.projection), x, y)
    with np.errstate(invalid="ignore"):
        theirs = pixel_to_pixel(wcs_out, wcs_in, x, y)
    for a, b in zip(ours, theirs):
        b = np.asarray(b, float)
        if not np.array_equal(np.isnan(a), np.isnan(b)):
            return False
        both = np.isfinite(a)
        if both.any() and np.abs(a[both] - b[both]).max() > MAP_CHECK_TOLERANCE:
            return False
    return True


__all__ = ["Job", "MAP_CHECK_TOLERANCE", "as_wcs", "frame_rotation", "parse_input",
           "parse_output", "plan", "validate"]
