"""What tuning measures and the engines read: the tuning cache, the search
spaces, the timing loop.  The tuners that fill the cache, and ``clgrid tune
{imaging,table}``, are :mod:`clgrid.tuning` (they run an ``Imager`` or a
``Gridder``, above the core).

==============  ==================================================================
module          holds
==============  ==================================================================
``cache``       the one cache file: its format, sections per kind (``imaging``,
                ``table``) keyed by device, the reading of older files, the
                checks (a malformed file or entry: one warning, the defaults)
``tiles``       the gridding core's tiles: candidates, ``cached_tiles`` (read by
                :func:`~clgrid.core.strategies.imaging_engine`), ``store_tiles``
``register``    the register spread's geometry and GCF read path: candidates,
                ``cached_register_params``/``cached_gcf_read`` (read by
                ``Gridder(register_params='auto')``), ``store_register_params``
``timing``      ``timed_calls``/``median_seconds``: the tuners' and benchmarks' loop
==============  ==================================================================
"""

from .cache import TuningCacheWarning, cache_path
from .register import cached_gcf_read, cached_register_params, store_register_params
from .tiles import cached_tiles, store_tiles, tile_candidates
from .timing import median_seconds, timed_calls

__all__ = ["TuningCacheWarning", "cache_path", "cached_gcf_read", "cached_register_params",
           "cached_tiles", "median_seconds", "store_register_params", "store_tiles",
           "tile_candidates", "timed_calls"]
