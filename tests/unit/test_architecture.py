"""The package's rooms keep their doors (``docs/architecture.md``): what each may import, no
import cycle, no import hidden inside a function, each driver imported in one module only, and
no ``Any`` in the ports. Its prose stays short and current: no module, function or docstring
too long to read in one sitting, no reference to a module that does not exist, and every module
named in ``docs/architecture.md``."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "reaper"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

#: What a newcomer reads in one sitting: a module, a function, a docstring (the why, once; the
#: rest is prose in ``docs/``).
MODULE_LINES = 450
FUNCTION_LINES = 80
DOCSTRING_LINES = 12
#: The job-queue room keeps what a pass reads and writes: this many lines at most, its SQL too.
#: 3,000 until the database seam gained ``-v``'s session lines and the names of unreadable TLS
#: files; a count is a stand-in for the concept check the rooms are meant to have.
#: 3,050 as well once the lease reap became PostgreSQL's (lease_reap.py and its SQL) and the
#: per-lease path it replaced went (issue 39): 2,985 then. 3,450 once the store answers gates
#: itself (the desk's answers and reads, about 600 lines with their SQL, moved in, and the desk
#: room and the store's binding layer went; which dispatch is in force moved down from the
#: pass, for the gates' answers too): 3,432 then.
JOBQUEUE_LINES = 3_450

#: Each room, and the rooms it may import (itself always). The pure core imports nothing of
#: the package; the adapters import the core; the pass imports the adapters; the demo is a use
#: case on the pass, and the edges sit on top of both (the demo never imports an edge). The
#: schema migrates through the job queue's driver seam and reads its SQL with the job queue's
#: loader; a pass never migrates, so neither the pass nor the job queue imports it. The gates
#: (what waits for a person) sit on the job queue's port and the broker's, below the pass and
#: the edges, which only print them. The test double implements the job queue's port by its
#: rules; nothing of the package imports it.
ROOMS: dict[str, set[str]] = {
    "reaper.__main__": {"reaper.edges.cli"},
    "reaper.version": set(),
    "reaper.errors": set(),
    "reaper.core": set(),
    "reaper.config": {"reaper.core", "reaper.errors"},
    "reaper.jobqueue": {"reaper.core", "reaper.errors"},
    "reaper.schema": {
        "reaper.core",
        "reaper.errors",
        "reaper.jobqueue.database",
        "reaper.jobqueue.sql",
    },
    "reaper.testing": {
        "reaper.core",
        "reaper.errors",
        "reaper.jobqueue.port",
        "reaper.jobqueue.rules",
    },
    "reaper.broker": {"reaper.core", "reaper.errors"},
    "reaper.gates": {
        "reaper.core",
        "reaper.errors",
        "reaper.config",
        "reaper.jobqueue.dispatch",
        "reaper.jobqueue.port",
        "reaper.jobqueue.rules",
        "reaper.broker.port",
    },
    "reaper.policies": {"reaper.core", "reaper.errors", "reaper.broker.port"},
    "reaper.reap": {
        "reaper.core",
        "reaper.errors",
        "reaper.config",
        "reaper.jobqueue",
        "reaper.broker",
        "reaper.policies",
        "reaper.gates",
    },
    "reaper.edges": {
        "reaper.core",
        "reaper.errors",
        "reaper.version",
        "reaper.config",
        "reaper.jobqueue",
        "reaper.broker",
        "reaper.policies",
        "reaper.gates",
        "reaper.reap",
        "reaper.schema",
        "reaper.demo",
    },
    "reaper.demo": {
        "reaper.core",
        "reaper.errors",
        "reaper.config",
        "reaper.jobqueue",
        "reaper.broker",
        "reaper.policies",
        "reaper.gates",
        "reaper.reap",
        "reaper.schema",
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


def sources() -> Iterator[tuple[str, str, ast.Module]]:
    """Every module of the package: its path from the repository, its text, its tree."""
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        yield path.relative_to(PACKAGE.parent).as_posix(), text, ast.parse(text)


def docstrings(tree: ast.Module) -> Iterator[tuple[str, ast.Expr, str]]:
    """Each docstring (module, class, function): what it documents, its node and its text."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                yield getattr(node, "name", "<module>"), first, first.value.value


def test_no_module_is_too_long_to_read_in_one_sitting() -> None:
    long = {path: n for path, text, _ in sources() if (n := len(text.splitlines())) > MODULE_LINES}
    assert long == {}


def test_the_job_queue_room_holds_only_what_a_pass_reads_and_writes() -> None:
    room = PACKAGE / "jobqueue"
    files = [p for p in room.rglob("*") if p.suffix in (".py", ".sql")]
    lines = sum(len(p.read_text().splitlines()) for p in files)
    assert any(p.suffix == ".sql" for p in files)
    assert lines <= JOBQUEUE_LINES, f"reaper/jobqueue/ is {lines} lines with its SQL"


def test_no_function_is_too_long_to_read_in_one_sitting() -> None:
    long = {
        f"{path}:{node.lineno} {node.name}": n
        for path, _, tree in sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > FUNCTION_LINES
    }
    assert long == {}


def test_no_docstring_runs_past_a_paragraph() -> None:
    long = {
        f"{path}:{doc.lineno} {name}": n
        for path, _, tree in sources()
        for name, doc, _ in docstrings(tree)
        if (n := (doc.end_lineno or doc.lineno) - doc.lineno + 1) > DOCSTRING_LINES
    }
    assert long == {}


#: A module named in prose: ``reaper.x.y`` (Sphinx roles and dotted attributes included) or a
#: path ``reaper/x/y.py``. A bare ``reaper.x`` is left alone: examples name a ``reaper`` object.
_DOTTED = re.compile(r"(?<![\w.-])reaper(?:\.[A-Za-z_]\w*){2,}")
_PATH = re.compile(r"(?<![\w/.-])reaper/[\w/]+\.py\b")


def _module_file(name: str) -> Path | None:
    relative = Path(*name.split("."))
    for candidate in (
        (PACKAGE.parent / relative).with_suffix(".py"),
        PACKAGE.parent / relative / "__init__.py",
    ):
        if candidate.is_file():
            return candidate
    return None


def _top_level_names(path: Path) -> set[str]:
    """What a module defines or imports at its top level (``if``/``try`` blocks included)."""
    names: set[str] = set()
    pending: list[ast.stmt] = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            pending.extend([*node.body, *node.orelse])
        else:
            names.update(
                n.id
                for n in ast.walk(node)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            )
    return names


def _resolves(reference: str) -> bool:
    """The longest prefix of ``reference`` that is a module exists, and the next name, if any,
    is defined (or imported) in it."""
    parts = reference.split(".")
    for end in range(len(parts), 1, -1):
        found = _module_file(".".join(parts[:end]))
        if found is not None:
            return end == len(parts) or parts[end] in _top_level_names(found)
    return False


def prose(text: str, tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Every docstring and comment of a module, with its line."""
    for _, doc, words in docstrings(tree):
        yield doc.lineno, words
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def test_no_docstring_or_comment_names_a_module_that_does_not_exist() -> None:
    dangling = sorted(
        f"{path}:{line} {found}"
        for path, text, tree in sources()
        for line, words in prose(text, tree)
        for found in [m.group() for m in _DOTTED.finditer(words) if not _resolves(m.group())]
        + [m.group() for m in _PATH.finditer(words) if not (PACKAGE.parent / m.group()).is_file()]
    )
    assert dangling == []


def rooms_in_the_doc() -> dict[str, str]:
    """The table of ``docs/architecture.md``'s rooms: each room (``reaper/core/``, and
    ``reaper/`` for the top level) and the text of its row."""
    rows: dict[str, str] = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `(reaper/(?:\w+/)?)` \|(.*)", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def room_and_name(path: Path) -> tuple[str, str | None]:
    """How the doc names a module: in its room's row, by its path from the room (a package by
    its folder, ``dead_letters/``); a room's own ``__init__.py`` is the row itself (None)."""
    parts = path.relative_to(PACKAGE).parts
    if len(parts) == 1:
        return "reaper/", parts[0]
    room, inner = f"reaper/{parts[0]}/", Path(*parts[1:])
    if inner.name != "__init__.py":
        return room, inner.as_posix()
    return room, None if inner.parent == Path(".") else f"{inner.parent.as_posix()}/"


def test_the_architecture_names_every_module_in_its_room() -> None:
    rows = rooms_in_the_doc()
    unnamed = sorted(
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*.py")
        for room, name in [room_and_name(path)]
        if room not in rows or (name is not None and f"`{name}`" not in rows[room])
    )
    assert unnamed == []


def test_the_architecture_names_no_module_that_does_not_exist() -> None:
    missing = sorted(
        f"{room}{name}"
        for room, row in rooms_in_the_doc().items()
        for name in re.findall(r"`([\w/]+\.py)`", row)
        if not (PACKAGE.parent / room / name).is_file()
    )
    assert missing == []
