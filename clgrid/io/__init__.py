"""Host-side input and output; no OpenCL here and nothing else of clgrid.

``ms``: Measurement Sets (python-casacore) read in row chunks.  ``fitsio``:
FITS images written and read with their WCS (astropy).  ``simulate``:
synthetic observations (array layouts, uvw tracks) for tests, tuning and
examples.
"""
