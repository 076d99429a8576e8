"""Every deviation of clgrid's single-dish gridders from cygrid 2.0.4 under
cygrid's own tests, per ``--clgrid-compat`` mode: {mode: {"file::Class::test":
measured reason}}.  Strict: a test listed here that passes fails the run, so
the list cannot go stale.

With ``compat="cygrid"`` nothing deviates: all 24 pass.

By default (``compat="exact"``) the ten tests that compare with cygrid's
stored results (``data/cygrid_test_maps.npy``, ``cygrid_test_sightlines.npy``,
``atol=1e-6``) fail exactly where cygrid itself leaves out a sample inside the
support radius: cygrid's HEALPix disc around a sample's pixel (radius
``sphere_radius`` plus one pixel resolution, shifted along each ring) does
not reach the pixel of every cell closer than ``sphere_radius``.  Measured
(2026-11-26, Intel CPU runtime; the pairs from
``clgrid.singledish.compat.CygridSelection`` against the exact distances):
cygrid drops 2 sample-cell pairs of the 60 x 60 map, at 0.99972 and 0.99593
of the support radius (cells (y, x) = (5, 51) and (14, 58)), and 1 of the
1000 sight-lines, at 0.98943 (sight-line 408).  clgrid's exact sum includes
them: the stored map differs there by up to 2.47e-5 (the first plane; the
higher powers of the signal stay within 1e-6) and the sight-line by 3.29e-4.
Everywhere else the results agree within 1e-6.
"""

_MAP = ("cygrid's stored map leaves out 2 samples inside the support radius (at 0.99972 "
        "and 0.99593 of it; cells (5, 51), (14, 58)) that clgrid's exact selection keeps: "
        "2 of 3600 values differ by up to 2.47e-5 > atol 1e-6; passes with compat='cygrid'")
_SIGHTLINES = ("cygrid's stored sight-lines leave out 1 sample inside the support radius "
               "(at 0.98943 of it; sight-line 408) that clgrid's exact selection keeps: 1 of "
               "1000 values differs by 3.29e-4 > atol 1e-6; passes with compat='cygrid'")

XFAILS: dict[str, dict[str, str]] = {
    "exact": {
        "test_cygrid.py::TestWcsGrid::test_gridding2d": _MAP,
        "test_cygrid.py::TestWcsGrid::test_gridding3d": _MAP,
        "test_cygrid.py::TestWcsGrid::test_gridding4d": _MAP,
        "test_cygrid.py::TestWcsGrid::test_c_contiguous": _MAP,
        "test_cygrid.py::TestWcsGrid::test_user_datacube_memorycell": _MAP,
        "test_cygrid.py::TestSlGrid::test_gridding1d": _SIGHTLINES,
        "test_cygrid.py::TestSlGrid::test_gridding2d": _SIGHTLINES,
        "test_cygrid.py::TestSlGrid::test_gridding3d": _SIGHTLINES,
        "test_cygrid.py::TestSlGrid::test_c_contiguous": _SIGHTLINES,
        "test_cygrid.py::TestSlGrid::test_user_datacube_memorycell": _SIGHTLINES,
    },
    "cygrid": {},
}
