"""The house's shape: imports point down the layers, and no module is over
600 lines. A deferred import inside a function counts as an import.

``UPWARD`` and ``OVERSIZE`` list what was so when this test was written:
they are debts to pay off (remove an entry once fixed), never to grow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import warehouse

SRC = Path(warehouse.__file__).parent
MAX_LINES = 600

# Lowest first: a package may import its own layer and those below, never above.
LAYERS: list[set[str]] = [
    # foundations: errors, small helpers, native code, permission rules
    {"errors", "faults", "lazy", "limits", "native", "private", "sqlitewal", "keys", "gitcmd"}
    | {"usage", "permissions"},
    {"blocks", "volumes"},  # block storage
    {"manifest"},  # the manifest format
    {"catalog", "catalogsql", "settings"},  # the database
    {"collection", "putcache"},  # reading and writing trees of files
    # a warehouse, embedded or remote, and what works on one
    {"base", "interface", "embedded", "embeddedsharing", "remote", "gc", "clusters"},
    {"step", "jobs", "mapreduce", "query", "lineage"},  # jobs and what runs as them
    {"workflows", "cwl", "regol"},  # workflows of jobs
    {"mount", "gateways", "web", "server"},  # doors: FUSE, WebDAV/S3, HTTP
    {"cli", "__init__"},  # the command line and the package's front
]

# (module, package it imports from a higher layer) as found when written.
UPWARD: set[tuple[str, str]] = set()

# Modules over MAX_LINES when written, with their length then: they may not grow.
OVERSIZE: dict[str, int] = {
    "warehouse.jobs.manager": 607,
    "warehouse.workflows.driver": 787,
}


def _layer(package: str) -> int:
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    raise AssertionError(f"warehouse.{package} is in no layer of tests/test_layers.py")


def _package(module: str) -> str:
    """The top-level package of ``warehouse.x.y`` (x)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> set[str]:
    """Every warehouse module ``path`` imports, at the top or in a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "warehouse":
                found.update(f"warehouse.{a.name}" for a in node.names)
            elif node.module.startswith("warehouse."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("warehouse."))
    return found


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    return ".".join(rel.parts)


def upward_imports() -> set[tuple[str, str]]:
    """(module, package) for each import of a higher layer's package."""
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        module = _module(path)
        own = _package(module)
        if own == "__init__":
            continue  # the package's front re-exports from every layer
        for imported in _imports(path):
            other = _package(imported)
            if other != own and _layer(other) > _layer(own):
                found.add((module, other))
    return found


def line_counts() -> dict[str, int]:
    return {_module(p): len(p.read_text().splitlines()) for p in sorted(SRC.rglob("*.py"))}


def test_every_package_is_in_a_layer() -> None:
    for path in SRC.iterdir():
        if path.suffix == ".py" or (path / "__init__.py").exists():
            _layer(path.name.removesuffix(".py"))


def test_no_new_import_points_up_the_layers() -> None:
    new = upward_imports() - UPWARD
    said = "\n".join(f"  {m} imports warehouse.{p}" for m, p in sorted(new))
    assert not new, f"imports up the layers (a lower layer never imports a higher one):\n{said}"


def test_no_module_over_600_lines_or_growing_past_it() -> None:
    over = {
        module: n
        for module, n in line_counts().items()
        if n > MAX_LINES and n > OVERSIZE.get(module, 0)
    }
    assert not over, f"modules over {MAX_LINES} lines (split them): {over}"


def test_the_checks_see_an_upward_import_and_a_long_module(tmp_path: Path) -> None:
    """The checks themselves: an import of a higher layer in a function is found."""
    code = tmp_path / "m.py"
    code.write_text("def f() -> None:\n    from warehouse.cli import main\n")
    assert _imports(code) == {"warehouse.cli"}
    assert _layer("cli") > _layer("blocks")
