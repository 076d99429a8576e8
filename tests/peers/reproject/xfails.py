"""Every deviation of clgrid.reproject_interp from reproject 0.21.0 under
reproject's own interpolation tests: (test name, regex on the parameter id or
None for all of them, measured reason). Strict: a test listed here that passes
fails the run (reproject's ``xfail_strict = true``), so the list cannot go stale.
"""

XFAILS: list[tuple[str, str | None, str]] = [
]
