"""cygrid 2.0.4's test files this suite runs, with their sha256 as in its sdist
(``cygrid-2.0.4.tar.gz``); ``../fetch_upstream.py cygrid`` puts them in place."""

#: sha256 of each file, as in the sdist (paths below ``cygrid-2.0.4/``).
VENDORED = {
    "cygrid/tests/__init__.py":
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "cygrid/tests/test_cygrid.py":
        "b9c63fa11785d288aae4a39a65967db989def94622a91f9fe6b857cad1655044",
    "cygrid/tests/test_healpix.py":
        "72c33b0f4b6c430281db5462298e2c345ab17ad9f14437b250f5c14b6dcd1b93",
    "cygrid/tests/data/cygrid_test_maps.npy":
        "c2f0674051e2e5b44ce2432f11ca5c5d7625baa59adec1940abe11941f99addb",
    "cygrid/tests/data/cygrid_test_sightlines.npy":
        "efc431a51fada2ce71e44fdc3d2b35516defe8addce744d3176713e024284b39",
}
