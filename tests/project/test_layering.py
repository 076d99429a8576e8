"""The package's layering stays true: no import circle, imports point down only.

Every module under ``clgrid/`` is parsed with :mod:`ast` (nothing is
imported or run); every ``import``/``from ... import`` counts, relative or
absolute, at module level or inside a function (a function-level import
closes a circle just as well at run time).  ``from pkg import name`` counts
as an import of ``pkg.name`` where that is a module, else of ``pkg``.
docs/architecture.md draws the layers this test holds.  No OpenCL device
is needed, so it runs once, not per platform.
"""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clgrid"

#: What each part of the package may import (itself always).  ``top`` is
#: ``clgrid/__init__.py``, ``clgrid/cli.py`` and the compatibility aliases
#: ``clgrid/gcf.py``, ``clgrid/dask.py`` and ``clgrid/wgridder.py``: they may
#: import anything.
ALLOWED = {
    "device": set(),                     # OpenCL devices, templates, radix sort
    "io": set(),                         # Measurement Sets, FITS, simulation: host only
    "core": {"device"},                  # the gridding core (ES kernel, W-stacking)
    "imaging": {"core", "device"},       # Imager, vis2dirty, weighting
    "gridders": {"core", "device", "io"},  # table gridders (Romein/Merry, on the core), tuning
    "singledish": {"device"},            # HEALPix pre-ordering and gather
    "reproject": {"device"},             # WCS reprojection
    "scaleout": {"imaging", "core", "device"},                 # several devices, Dask
    "pipeline": {"scaleout", "imaging", "core", "device", "io"},  # MS -> FITS, clgrid image
    # clgrid tune {imaging,table}: the tuners time an Imager and a Gridder, so
    # they sit above both missions; what they fill (the cache, the search
    # spaces, the timing loop) is clgrid.core.tuning, read by the engines
    "tuning": {"imaging", "gridders", "core", "device", "io"},
}
TOP = {"clgrid", "clgrid.cli", "clgrid.gcf", "clgrid.dask", "clgrid.wgridder"}
#: Imports that cross the rule on purpose, as (importer, imported) modules.
#: Empty today; an entry needs a reason beside it.
EXCEPTIONS: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path) -> set[str]:
    """The clgrid modules that ``module`` imports, anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node)
            names = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES else target
                     for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # clgrid.x.y.attr -> clgrid.x.y
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _part(module: str) -> str:
    if module in TOP:
        return "top"
    return module.split(".")[1]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, result = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return result


def test_the_walk_sees_the_package():
    """Guards the test itself: the walker finds the modules and known edges."""
    assert {"clgrid.core.engine", "clgrid.device.profiles", "clgrid.imaging.imager",
            "clgrid.gridders.gridder", "clgrid.scaleout.multidevice"} <= set(MODULES)
    assert "clgrid.core.plan" in GRAPH["clgrid.core.engine"]                # relative
    assert "clgrid.device.profiles" in GRAPH["clgrid.core.plan"]            # parent-relative
    assert "clgrid.core.tuning.register" in GRAPH["clgrid.gridders.gridder"]  # in a method
    assert "clgrid.io.simulate" in GRAPH["clgrid.tuning.table"]               # in a function


def test_cycle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    assert _cycles(GRAPH) == [], "import circle(s) between clgrid modules"


def test_imports_point_down():
    wrong = []
    for module, targets in sorted(GRAPH.items()):
        source = _part(module)
        if source == "top":
            continue
        for target in sorted(targets):
            destination = _part(target)
            if destination == source or (module, target) in EXCEPTIONS:
                continue
            if destination == "top" or destination not in ALLOWED[source]:
                wrong.append(f"{module} ({source}) imports {target} ({destination})")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_every_part_has_a_layer():
    parts = {_part(module) for module in MODULES} - {"top"}
    assert parts == set(ALLOWED), "a new subpackage needs its line in ALLOWED"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_subpackage_is_packaged(module):
    """setup.cfg ships every subpackage (a wheel without one would not import)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    packages = {name.strip() for name in config["options"]["packages"].split(",")}
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    assert package in packages, f"setup.cfg [options] packages lacks {package}"


def test_one_engine_class():
    """Issue 38's measure: every gridding path runs on one engine class,
    ``clgrid.core.engine.Engine``, its stages chosen in
    ``clgrid/core/strategies.py``; no mission keeps a driver of its own."""
    engines = sorted(f"{path.relative_to(ROOT)}:{node.name}"
                     for path in PACKAGE.rglob("*.py")
                     for node in ast.walk(ast.parse(path.read_text(), str(path)))
                     if isinstance(node, ast.ClassDef) and node.name.endswith("Engine"))
    assert engines == ["clgrid/core/engine.py:Engine"], engines
