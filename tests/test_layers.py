"""The house's shape: imports point down the layers, no two modules import
each other (through others or not), and no module is over 600 lines. A
deferred import inside a function, or one for types only, counts as an import.

``UPWARD``, ``CIRCLES`` and ``OVERSIZE`` list what was so when this test was
written: they are debts to pay off (remove an entry once fixed), never to grow.
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

# Modules in one import circle when written (a package's front aside: it
# imports its modules, which may import names from it).
CIRCLES: list[set[str]] = []

# Modules over MAX_LINES when written, with their length then: they may not grow.
OVERSIZE: dict[str, int] = {}


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


def _module_edges(root: Path) -> dict[str, set[str]]:
    """Each module under ``root`` (a package's front aside) and the modules
    it imports: ``from p import m`` of a module m is m, not p's front."""
    paths = {_module_under(root, p): p for p in sorted(root.rglob("*.py"))}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for module, path in paths.items():
        if path.name == "__init__.py":
            continue
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                target = resolve(name)
                if target and target != module and paths[target].name != "__init__.py":
                    found.add(target)
        edges[module] = found
    return edges


def _module_under(root: Path, path: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def import_circles(root: Path = SRC) -> list[set[str]]:
    """The sets of modules that import one another, each set at least two."""
    edges = _module_edges(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[set[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        # Tarjan's strongly connected components, with a stack of iterators
        # (a recursion as deep as the longest chain of imports is not needed).
        index[start] = low[start] = len(index)
        stack.append(start)
        work = [(start, iter(sorted(edges[start])))]
        while work:
            node, todo = work[-1]
            step = next(todo, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    work.append((step, iter(sorted(edges.get(step, ())))))
                elif step in stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1:
                    circles.append(members)
    return circles


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


def test_no_new_import_circle() -> None:
    new = [c for c in import_circles() if not any(c <= known for known in CIRCLES)]
    said = "\n".join("  " + ", ".join(sorted(c)) for c in new)
    assert not new, f"modules that import one another (move what both need down):\n{said}"


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


def test_the_circle_check_sees_a_circle_through_a_function_or_types(tmp_path: Path) -> None:
    """Three modules in a ring (one import in a function, one for types
    only) are one circle; a package's front importing its modules is none."""
    pkg = tmp_path / "warehouse"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from warehouse.a import f\n")
    (pkg / "a.py").write_text("from warehouse import b\n\ndef f() -> None: ...\n")
    (pkg / "b.py").write_text("def g() -> None:\n    from warehouse.c import h\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from warehouse.a import f\n"
    )
    (pkg / "d.py").write_text("from warehouse import f\n")
    assert import_circles(pkg) == [{"warehouse.a", "warehouse.b", "warehouse.c"}]
    (pkg / "c.py").write_text("")
    assert import_circles(pkg) == []
