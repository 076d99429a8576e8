"""Conventions of the code and the tests that a reader relies on (issue 38).

Parsed with :mod:`ast`, nothing imported or run; no OpenCL device needed.

* every ``pytest.raises`` in tests/ names its message (``match=``), so a
  test cannot pass on another error of the same type;
* a test module imports no other test module: shared helpers live in
  modules not named ``test_*`` (``gridder_reference.py``, ``vla_ms.py`` ...);
* tests/ mirrors the package: every test module sits in ``tests/<part>/``,
  ``<part>`` a subpackage of ``clgrid`` or ``project`` (the whole-project
  tests), helpers at tests/'s root beside conftest.py; and no two test
  modules share a name, since pytest's default import mode imports each by
  its name (tests/README.md);
* no module of ``clgrid`` imports a private name (``_name``) from another
  subpackage: what crosses a subpackage's edge is public;
* no kernel launch in ``clgrid`` leaves the work-group size to the driver
  (``kernel(queue, global, None, ...)``): :func:`clgrid.device.kernels.launch`
  pins it, since PoCL compiles anew for every group size a driver picks.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PACKAGE = ROOT / "clgrid"


#: The folders of tests/ that are not a part of ``clgrid``: the tests of the
#: whole project (layering, conventions, README, examples, threads, same bits,
#: robustness across parts) and the peers' own suites (theirs, unmodified).
PROJECT, PEERS = TESTS / "project", TESTS / "peers"


def _test_sources() -> list[Path]:
    """The project's own test files, helpers included, in every folder of
    tests/ (the peers' suites under tests/peers are theirs, unmodified)."""
    return sorted(path for path in TESTS.rglob("*.py") if PEERS not in path.parents)


def _test_modules() -> list[Path]:
    return [path for path in _test_sources() if path.name.startswith("test_")]


def _subpackages() -> set[str]:
    return {path.parent.name for path in PACKAGE.glob("*/__init__.py")}


def _raises_without_match(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [f"{path.relative_to(TESTS)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.raises"
            and not any(keyword.arg == "match" for keyword in node.keywords)]


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _subpackage(path: Path) -> str:
    """``core``, ``imaging`` ... or ``top`` for modules directly in clgrid/."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else "top"


def _target_subpackage(path: Path, node: ast.ImportFrom) -> str:
    """The subpackage an ``from ... import`` reads from."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        module = (node.module or "").split(".")
        target = base.joinpath(*module) if node.module else base
        try:
            parts = target.relative_to(PACKAGE).parts
        except ValueError:
            return "outside"
        return parts[0] if parts and parts[0] != "" else "top"
    module = (node.module or "").split(".")
    return module[1] if module[0] == "clgrid" and len(module) > 1 else "outside"


def _private_imports_across(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        private = [alias.name for alias in node.names
                   if alias.name.startswith("_") and not alias.name.startswith("__")]
        target = _target_subpackage(path, node)
        if private and target not in (_subpackage(path), "outside"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {private} from {target}")
    return found


def _unpinned_launches_at(path: Path) -> list[int]:
    """Lines of calls ``f(<queue>, <global size>, None, ...)``: an enqueued
    kernel whose work-group size the driver picks."""
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and len(node.args) >= 3
            and "queue" in ast.unparse(node.args[0])
            and isinstance(node.args[1], (ast.Tuple, ast.Name, ast.Call))
            and isinstance(node.args[2], ast.Constant) and node.args[2].value is None]


def _unpinned_launches(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}" for line in _unpinned_launches_at(path)]


def test_every_pytest_raises_names_its_message():
    missing = [site for path in _test_sources() for site in _raises_without_match(path)]
    assert not missing, f"pytest.raises without match=: {missing}"


def test_test_modules_import_no_other_test_module():
    crossing = [f"{path.relative_to(TESTS)} imports {name}" for path in _test_sources()
                for name in _imported_modules(path) if name.startswith("test_")]
    assert not crossing, f"move shared helpers to a module not named test_*: {crossing}"


def test_tests_mirror_the_package():
    """Each test module in tests/<subpackage>/ or tests/project/; only
    conftest.py and the helpers (not test_*) at tests/'s root."""
    folders = _subpackages() | {PROJECT.name}
    misplaced = [str(path.relative_to(TESTS)) for path in _test_modules()
                 if path.parent.parent != TESTS or path.parent.name not in folders]
    assert not misplaced, ("move these to tests/<subpackage of clgrid>/ or tests/project/: "
                           f"{misplaced}")
    nested = [str(path.relative_to(TESTS)) for path in _test_sources()
              if not path.name.startswith("test_") and path.parent != TESTS]
    assert not nested, f"helpers and conftests live at tests/'s root: {nested}"


def test_test_module_names_are_unique():
    """pytest's default import mode imports a test module by its name, the
    folder put on sys.path: two modules of one name would clash."""
    seen: dict[str, list[str]] = {}
    for path in _test_modules():
        seen.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules of one name: {clashes}"


def test_no_private_name_crosses_a_subpackage():
    crossing = [site for path in sorted(PACKAGE.rglob("*.py"))
                for site in _private_imports_across(path)]
    assert not crossing, f"private names imported from another subpackage: {crossing}"


def test_no_kernel_launch_leaves_the_group_size_to_the_driver():
    unpinned = [site for path in sorted(PACKAGE.rglob("*.py"))
                for site in _unpinned_launches(path)]
    assert not unpinned, f"launch these through clgrid.device.kernels.launch: {unpinned}"


def test_the_checks_see_what_they_check():
    """The walks are not vacuous: they find raises, imports and subpackages."""
    assert any("pytest.raises" in path.read_text() for path in _test_sources())
    assert "gridder_reference" in _imported_modules(TESTS / "gridders" / "test_gridder.py")
    assert {"core", "reproject", "singledish"} <= _subpackages()
    assert len(_test_modules()) > 40 and TESTS / "conftest.py" in _test_sources()
    assert not any(PEERS in path.parents for path in _test_sources())
    assert _subpackage(PACKAGE / "core" / "table.py") == "core"
    table = ast.parse((PACKAGE / "core" / "table.py").read_text())
    relative = next(node for node in ast.walk(table)
                    if isinstance(node, ast.ImportFrom) and node.module == "setpoints")
    assert _target_subpackage(PACKAGE / "core" / "table.py", relative) == "core"


def test_the_launch_check_finds_an_unpinned_launch(tmp_path):
    sample = tmp_path / "example.py"
    sample.write_text("kernel(self.queue, (n,), None, a.data)\n"
                      "launch(kernel, self.queue, (n,), a.data)\n"
                      "kernel(queue, (n,), (64,), a.data)\n")
    assert _unpinned_launches_at(sample) == [1]
