"""ducc0 0.42.0's test file this suite runs, with its sha256 as in its sdist
(``ducc0-0.42.0.tar.gz``); ``../fetch_upstream.py ducc0`` puts it in place."""

#: sha256 of each file, as in the sdist (paths below ``ducc0-0.42.0/``).
VENDORED = {
    "python/test/test_wgridder.py":
        "c0442e52c0f5aed0221d905fdf4bb167cf39a744cb31eca92df387eef777f4f1",
    "LICENSE":
        "b55394f88a632f607ca6180b50c961b83d1400e8bcc899a50bf182567ef49ff2",
}
