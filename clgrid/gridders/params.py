"""Parameters of the table gridders, below every module that uses them.

:class:`GridderParams` (the scatter kernel's work distribution) and
:class:`ImageParams` (the image-GCF strategy's geometry) live here, not in
``gridder`` or ``dispatch``, so that ``dispatch``, ``image_gcf`` and
``tunecache`` can use them without importing the gridder (no import circle).
"""

from __future__ import annotations

import dataclasses

COARSENING = (1, 2, 4, 8)
MAX_COARSENING = 16


@dataclasses.dataclass(frozen=True)
class GridderParams:
    """Work-distribution parameters of the gridding kernel (tunable).

    block_u, block_v
        Grid points per work-item along u and v (Merry's thread coarsening).
    wg_size
        Work-items per work-group (one tile of the bin's blocks).
    vis_per_group
        Consecutive records per work-group (load balance; the papers use 1024).
    """

    block_u: int = 1
    block_v: int = 1
    wg_size: int = 128
    vis_per_group: int = 1024

    def validate(self) -> None:
        if self.block_u not in COARSENING or self.block_v not in COARSENING:
            raise ValueError(f"block_u and block_v must be in {COARSENING}")
        if self.block_u * self.block_v > MAX_COARSENING:
            raise ValueError(f"block_u * block_v must be <= {MAX_COARSENING}")
        if self.wg_size < 1 or self.vis_per_group < 1:
            raise ValueError("wg_size and vis_per_group must be >= 1")


def default_params(profile, support: int, npol: int) -> GridderParams:
    """Untuned defaults from the device profile (no timing runs)."""
    if profile.device_type == "gpu":
        block = 1 if support < 8 else (2 if support < 32 else 4)
        bu, bv = (block, block) if block * block <= MAX_COARSENING else (4, 4)
        wg = min(256, profile.max_work_group_size)
        return GridderParams(bu, bv, wg, 1024)
    # CPUs: few big work-items vectorised by the driver; coarsen to reuse loads
    block = 1 if support < 4 else 2
    wg = min(64, profile.max_work_group_size)
    return GridderParams(block, block, wg, 1024)


@dataclasses.dataclass(frozen=True)
class ImageParams:
    """Geometry of the image-GCF strategy.

    image_oversample
        Samples per cell stored in the image (the GCF's own ``oversample``
        when None).
    position_oversample
        Sub-pixel resolution of visibility positions: the records carry the
        position quantised to ``1 / position_oversample`` cell, and the
        sampler interpolates the kernel there.
    """

    image_oversample: int | None = None
    position_oversample: int = 256

    def validate(self) -> None:
        if self.image_oversample is not None and self.image_oversample < 1:
            raise ValueError("image_oversample must be >= 1")
        if not 1 <= self.position_oversample <= 4096:
            raise ValueError("position_oversample must be in [1, 4096]")


__all__ = ["COARSENING", "GridderParams", "ImageParams", "MAX_COARSENING", "default_params"]
