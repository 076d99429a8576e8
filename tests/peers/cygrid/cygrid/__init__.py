"""Not cygrid: the package name under which cygrid's own tests (``tests/``,
vendored unmodified) import what they test with relative imports
(``from .. import cygrid``, ``from ..healpix import Healpix``).  This file
only marks the folder as the package ``cygrid`` for pytest; the modules
themselves (``cygrid``, ``cygrid.cygrid``, ``cygrid.healpix``, clgrid's
classes under cygrid's names) are put in place by ``../conftest.py`` before
anything is collected."""
raise ImportError("tests/peers/cygrid/cygrid is cygrid's test layout only: run it with "
                  "pytest from tests/peers/cygrid (tox -e peers-cygrid), whose conftest.py "
                  "supplies the modules")
