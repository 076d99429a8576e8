"""Scale-out: one imaging call over several devices, or over a Dask cluster.

``partition``: device lists, the whole job's layout, row and plane splits.
``multidevice``: :class:`MultiDeviceImager` (partition by rows or w planes,
sum the grids, one FFT).  ``dask``: Dask arrays in, OpenCL per worker.
``entry``: the public ``vis2dirty``/``dirty2vis``/``Imager`` that route
``devices=``/``contexts=`` here and everything else to :mod:`clgrid.imaging`.
"""
