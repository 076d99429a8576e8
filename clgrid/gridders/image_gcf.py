"""Separable GCFs as OpenCL images, sampled with hardware linear interpolation.

Strategy ``'image'`` of :class:`clgrid.Gridder` (Romein 2012, section 4.1).
The two 1-D tables of a separable GCF are stored as the rows of one 2-D
image, one row per W plane, RGBA float texels ``(u re, u im, v re, v im)``;
texel ``k`` holds the kernel at distance ``(k - (S * O_img) // 2) / O_img``
cells.  Visibility positions are quantised much more finely
(``position_oversample``, 256 by default) and the sampler interpolates the
kernel linearly between stored samples there, so a table of ``O_img`` samples
per cell approaches the accuracy of a far larger nearest-sample table.

Accuracy (stated, and tested in ``tests/test_image_gcf.py`` against the
kernel evaluated exactly at the true position): per footprint cell the
weight error is at most

* ``max|K''| / (8 O_img^2)`` from linear interpolation,
* ``max|K'| / (2 O_pos)`` from the position quantisation,
* ``max|K'| / O_img * 2^-8`` from the hardware's interpolation weight, which
  the OpenCL specification lets be as coarse as 8 bits (NVIDIA uses 8 bits;
  CPU runtimes compute it in float),

see :func:`interpolation_error_bound`.  Images hold float32 texels, so a
float64 grid gets float32-accurate weights with this strategy.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from .params import ImageParams
from .gcf import GCF, KERNELS, separable_gcf

#: Bits of the hardware linear-filter weight that the OpenCL spec guarantees.
FILTER_WEIGHT_BITS = 8


class ImageGCF:
    """A separable GCF uploaded as an RGBA float 2-D image.

    Parameters
    ----------
    queue
        Command queue of the device.
    gcf
        A separable :class:`~clgrid.gridders.gcf.GCF`.
    params
        :class:`~clgrid.gridders.params.ImageParams`; with ``image_oversample``
        different from ``gcf.oversample`` the table is re-evaluated from the
        GCF's analytic kernel (``'es'`` or ``'kaiser-bessel'``).
    real_dtype
        The gridder's precision (recorded; texels are float32).
    """

    def __init__(self, queue: cl.CommandQueue, gcf: GCF, params: ImageParams, real_dtype):
        if not gcf.separable:
            raise ValueError("the image strategy holds separable GCFs only; "
                             "use strategy='scatter' or 'tiled' for full W tables")
        params = params or ImageParams()
        params.validate()
        self.params = params
        self.gcf = self._resampled(gcf, params.image_oversample)
        self.image_oversample = self.gcf.oversample
        self.position_oversample = params.position_oversample
        self.real_dtype = np.dtype(real_dtype)
        width = gcf.support * self.image_oversample
        device = queue.device
        if not device.image_support:
            raise ValueError(f"{device.name.strip()!r} has no image support")
        if width > device.image2d_max_width or gcf.w_planes > device.image2d_max_height:
            raise ValueError(f"GCF image of {width} x {gcf.w_planes} texels exceeds the "
                             f"device's 2-D image limit ({device.image2d_max_width} x "
                             f"{device.image2d_max_height})")
        self.texels = image_texels(self.gcf)
        image_format = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
        self.image = cl.create_image(queue.context,
                                     cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                                     image_format, shape=(width, gcf.w_planes),
                                     hostbuf=self.texels)
        self.position_gcf = position_gcf(gcf, self.position_oversample)

    @staticmethod
    def _resampled(gcf: GCF, image_oversample: int | None) -> GCF:
        if image_oversample is None or image_oversample == gcf.oversample:
            return gcf
        if gcf.kernel not in KERNELS or gcf.w_planes != 1:
            raise ValueError("image_oversample differing from the GCF's oversample needs an "
                             f"analytic one-plane GCF ({KERNELS}); got kernel {gcf.kernel!r}")
        return separable_gcf(gcf.support, image_oversample, gcf.kernel, gcf.beta)

    def template_params(self) -> dict:
        """Extra parameters of ``gridder_image.cl.mako``."""
        return {"image_oversample": self.image_oversample,
                "position_oversample": self.position_oversample}


def image_texels(gcf: GCF) -> np.ndarray:
    """(w_planes, S * O, 4) float32 texels: the tables ordered by distance."""
    support, oversample = gcf.support, gcf.oversample
    # table[w, f, j] is at distance j + (f - (S O) // 2) / O, i.e. sample k = j O + f
    by_distance_u = gcf.table_u.transpose(0, 2, 1).reshape(gcf.w_planes, support * oversample)
    by_distance_v = gcf.table_v.transpose(0, 2, 1).reshape(gcf.w_planes, support * oversample)
    texels = np.stack([by_distance_u.real, by_distance_u.imag,
                       by_distance_v.real, by_distance_v.imag], axis=-1)
    return np.ascontiguousarray(texels, dtype=np.float32)


def position_gcf(gcf: GCF, position_oversample: int) -> GCF:
    """A GCF with ``gcf``'s support and W planes but ``position_oversample``
    sub-pixel steps: used only to quantise positions in :func:`plan_uv`."""
    shape = (gcf.w_planes, position_oversample, gcf.support)
    zeros = np.zeros(shape, np.complex128)
    return GCF(gcf.support, position_oversample, gcf.w_planes, gcf.w_step_lambda,
               table_u=zeros, table_v=zeros, kernel="position-only")


def interpolation_error_bound(gcf: GCF, position_oversample: int = 256,
                              filter_bits: int = FILTER_WEIGHT_BITS) -> float:
    """Stated bound on one footprint weight's error ``|w_image - K(x_true)|``
    per axis, relative to the kernel's peak, from the table's own samples
    (finite differences stand in for the derivatives)."""
    texels = image_texels(gcf)
    samples = np.hypot(texels[..., 0], texels[..., 1])
    peak = samples.max()
    step = 1.0 / gcf.oversample
    first = np.abs(np.diff(samples, axis=-1)).max() / step
    second = np.abs(np.diff(samples, 2, axis=-1)).max() / step ** 2
    interpolation = second * step ** 2 / 8
    quantisation = first / (2 * position_oversample)
    filter_weight = first * step * 2.0 ** -filter_bits
    return float((interpolation + quantisation + filter_weight) / peak)


__all__ = ["FILTER_WEIGHT_BITS", "ImageGCF", "image_texels", "interpolation_error_bound",
           "position_gcf"]
