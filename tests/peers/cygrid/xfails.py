"""Every deviation of clgrid's single-dish gridders from cygrid 2.0.4 under
cygrid's own tests, per ``--clgrid-compat`` mode: {mode: {"file::Class::test":
measured reason}}.  Strict: a test listed here that passes fails the run, so
the list cannot go stale.
"""

XFAILS: dict[str, dict[str, str]] = {
    "exact": {},
    "cygrid": {},
}
