"""The tuners and ``clgrid tune {imaging,table}``: they time an ``Imager`` or
a ``Gridder`` on a device and fill the tuning cache that the core reads
(:mod:`clgrid.core.tuning`: the cache file, search spaces and the timing
loop, below them).

===========  ===================================================================
module       holds
===========  ===================================================================
``imaging``  ``tune_tiles``: the gridding core's tiles (``clgrid tune imaging``)
``table``    ``tune``: the register spread's geometry and GCF read path
             (``clgrid tune table``)
``command``  the ``clgrid tune`` parser, and the old spellings' rewriting
===========  ===================================================================
"""
