"""pytest plugin: run test_ducc0_compat.py with ducc0 itself in clgrid's place.

    cd tests && python -m pytest -p ducc0_in_place scaleout/test_ducc0_compat.py

checks the port (references, tolerances, conventions) against the peer: every
case taken from ducc0's file must pass, the strict xfails turn to XPASS, and
only the clgrid-only checks (keyword signature, polarisation axis) fail.
"""

import ducc0.wgridder as wgridder

import clgrid


def _without_device(arguments: dict) -> dict:
    arguments.pop("queue", None)
    arguments.pop("context", None)
    return arguments


clgrid.vis2dirty = lambda **arguments: wgridder.vis2dirty(**_without_device(arguments))
clgrid.dirty2vis = lambda **arguments: wgridder.dirty2vis(**_without_device(arguments))
