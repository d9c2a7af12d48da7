"""The package's rooms keep their doors (``docs/architecture.md``): what each may import, no
import cycle, no import hidden inside a function, each driver imported in one module only, and
no ``Any`` in the ports."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "reaper"

#: Each room, and the rooms it may import (itself always). The pure core imports nothing of
#: the package; the adapters import the core; the pass imports the adapters; the demo is a use
#: case on the pass, and the edges sit on top of both (the demo never imports an edge).
ROOMS: dict[str, set[str]] = {
    "reaper.__main__": {"reaper.edges.cli"},
    "reaper.version": set(),
    "reaper.errors": set(),
    "reaper.core": set(),
    "reaper.config": {"reaper.core", "reaper.errors"},
    "reaper.jobqueue": {"reaper.core", "reaper.errors"},
    "reaper.broker": {"reaper.core", "reaper.errors"},
    "reaper.policies": {"reaper.core", "reaper.errors", "reaper.broker.port"},
    "reaper.reap": {
        "reaper.core",
        "reaper.errors",
        "reaper.config",
        "reaper.jobqueue",
        "reaper.broker",
        "reaper.policies",
    },
    "reaper.edges": {
        "reaper.core",
        "reaper.errors",
        "reaper.version",
        "reaper.config",
        "reaper.jobqueue",
        "reaper.broker",
        "reaper.policies",
        "reaper.reap",
        "reaper.demo",
    },
    "reaper.demo": {
        "reaper.core",
        "reaper.errors",
        "reaper.config",
        "reaper.jobqueue",
        "reaper.broker",
        "reaper.policies",
        "reaper.reap",
    },
}

#: The only module allowed to import each driver.
DRIVERS = {"asyncpg": "reaper.jobqueue.database", "httpx": "reaper.broker.http"}

PORTS = ("reaper.jobqueue.port", "reaper.broker.port")


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"))


def is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (PACKAGE.parent / relative).with_suffix(".py").is_file() or (
        PACKAGE.parent / relative / "__init__.py"
    ).is_file()


def imports(tree: ast.Module) -> Iterator[tuple[str, ast.stmt]]:
    """Every module a module imports at its top level (``TYPE_CHECKING`` blocks aside)."""
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield (full if is_module(full) else node.module), node


def room_of(module: str) -> str:
    return max((r for r in ROOMS if module == r or module.startswith(r + ".")), key=len)


def allowed(source: str, target: str) -> bool:
    room = room_of(source)
    if target == room or target.startswith(room + "."):
        return True
    return any(target == door or target.startswith(door + ".") for door in ROOMS[room])


def test_each_room_imports_only_what_it_may() -> None:
    wrong = [
        f"{name} imports {target}"
        for name, tree in modules()
        if name != "reaper"  # the public face re-exports lazily, at attribute access
        for target, _ in imports(tree)
        if target.startswith("reaper") and not allowed(name, target)
    ]
    assert wrong == []


def test_there_is_no_import_cycle() -> None:
    graph = {
        name: {t for t, _ in imports(tree) if t.startswith("reaper.") and t != name}
        for name, tree in modules()
    }
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in done:
                visit(nxt, [*path, nxt])
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        if start not in done:
            visit(start, [start])
    assert cycles == []


def test_no_import_is_hidden_inside_a_function() -> None:
    hidden = [
        f"{name}:{node.lineno}"
        for name, tree in modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
        if isinstance(inner, ast.Import | ast.ImportFrom)
    ]
    assert hidden == []


@pytest.mark.parametrize(("driver", "home"), sorted(DRIVERS.items()))
def test_each_driver_is_imported_in_one_module(driver: str, home: str) -> None:
    importers = {
        name
        for name, tree in modules()
        for target, _ in imports(tree)
        if target == driver or target.startswith(driver + ".")
    }
    assert importers == {home}


@pytest.mark.parametrize("port", PORTS)
def test_the_ports_have_no_any(port: str) -> None:
    tree = dict(modules())[port]
    assert "Any" not in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "Any" not in {
        alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for alias in n.names
    }


def test_no_module_is_too_long_to_read_in_one_sitting() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert long == {}


#: The rooms held to the size limits below so far; the others join them as they are cut.
SIZED_ROOMS = ("reaper.config", "reaper.edges", "reaper.demo")
MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_DOCSTRING_LINES = 450, 80, 12


def sized_modules() -> Iterator[tuple[str, int, ast.Module]]:
    """Each module of the sized rooms: its name, its length in lines, its tree."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if any(name == room or name.startswith(room + ".") for room in SIZED_ROOMS):
            text = path.read_text(encoding="utf-8")
            yield name, len(text.splitlines()), ast.parse(text)


def test_sized_rooms_keep_modules_functions_and_docstrings_short() -> None:
    too_long: list[str] = []
    for name, lines, tree in sized_modules():
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in [tree, *ast.walk(tree)]:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {length} lines")
            if not isinstance(
                node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            ):
                continue
            if ast.get_docstring(node) is not None:
                doc = node.body[0]
                length = (doc.end_lineno or doc.lineno) - doc.lineno + 1
                if length > MAX_DOCSTRING_LINES:
                    too_long.append(f"{name}:{doc.lineno} docstring: {length} lines")
    assert sorted(set(too_long)) == []
