"""The package's rooms keep their doors (``docs/architecture.md``): what each may import, no
import cycle, no import hidden inside a function, each driver imported in one module only, and
no ``Any`` in the ports. Each module says in one sentence what it is, and no two say the same;
its prose stays short and current: no function or docstring too long to read in one sitting,
no reference to a module that does not exist, and every room named in ``docs/architecture.md``.
"""

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

#: What a newcomer reads in one sitting: a function, a docstring (the why, once; the rest is
#: prose in ``docs/``).
FUNCTION_LINES = 80
DOCSTRING_LINES = 12
#: A module is cut where its concept ends, which its docstring's first line names; past this
#: many lines it likely holds two. A backstop for the concept check, not a size to trim to.
CONCEPT_LINES = 500
#: The first line of a module's docstring as written (``"""`` included), like any line.
FIRST_LINE_CHARS = 100

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


def first_line(tree: ast.Module) -> tuple[str | None, str | None]:
    """A module's docstring's first line, and what is wrong with it as the one sentence that
    names what the module is (None when nothing is)."""
    doc = ast.get_docstring(tree, clean=False)
    if not doc or not doc.strip():
        return None, "no docstring"
    lines = doc.lstrip("\n").splitlines()
    first = lines[0].strip()
    if not first.endswith("."):
        return first, "its first line is not a sentence ending with a period"
    if re.search(r"(?<!\be\.g)(?<!\bi\.e)[.?!]\s", first):
        return first, "its first line holds more than one sentence"
    if len(lines) > 1 and lines[1].strip():
        return first, "its first sentence runs past its first line (a blank line follows it)"
    if len('"""' + first) > FIRST_LINE_CHARS:
        return first, f"its first line is over {FIRST_LINE_CHARS} characters"
    return first, None


def test_every_module_says_in_one_sentence_what_it_is() -> None:
    wrong = {
        path: f"{why}: {first!r}"
        for path, _, tree in sources()
        for first, why in [first_line(tree)]
        if why is not None
    }
    assert wrong == {}


def test_no_two_modules_say_they_are_the_same_thing() -> None:
    said: dict[str, list[str]] = {}
    for path, _, tree in sources():
        first, _ = first_line(tree)
        if first is not None:
            said.setdefault(first, []).append(path)
    assert {first: paths for first, paths in said.items() if len(paths) > 1} == {}


def test_no_module_is_likely_to_hold_two_concepts() -> None:
    long = {
        path: (
            f"{n} lines: over {CONCEPT_LINES}, it likely holds two concepts; split it where one "
            "ends, each part named by its docstring's first line (a backstop, not a size to "
            "trim to)"
        )
        for path, text, _ in sources()
        if (n := len(text.splitlines())) > CONCEPT_LINES
    }
    assert long == {}


#: Public names that nothing of the package uses, on purpose: entry points and what a host's
#: code or tests import (``reaper``'s public face is imported under ``TYPE_CHECKING`` and needs
#: no entry).
USED_FROM_OUTSIDE = {
    # the in-memory job queue a host's tests, and this project's, run above the store
    "reaper/testing/memory.py: MemoryJobQueue",
}


def test_every_public_function_and_class_is_used_in_the_package() -> None:
    """Dead code goes: a public top-level function or class that nothing of ``reaper/`` uses
    but its own definition (tests alone do not count) is flagged. A use is a name or an
    attribute of that name anywhere else in the package, so a name shared with another is
    taken as used: the check never flags what lives."""
    trees = [(path, tree) for path, _, tree in sources()]
    used: dict[str, list[tuple[str, int]]] = {}
    for path, tree in trees:
        for node in ast.walk(tree):
            name = (
                node.id
                if isinstance(node, ast.Name)
                else node.attr
                if isinstance(node, ast.Attribute)
                else None
            )
            if name is not None:
                used.setdefault(name, []).append((path, node.lineno))
    unused = sorted(
        f"{path}: {node.name}"
        for path, tree in trees
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and not node.name.startswith("_")
        and not any(
            not (where == path and node.lineno <= line <= (node.end_lineno or node.lineno))
            for where, line in used.get(node.name, ())
        )
    )
    assert [u for u in unused if u not in USED_FROM_OUTSIDE] == []
    assert sorted(USED_FROM_OUTSIDE - set(unused)) == []  # an entry no longer needed goes


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


def test_the_architecture_names_every_room() -> None:
    doc = ARCHITECTURE.read_text(encoding="utf-8")
    unnamed = sorted(
        room
        for room in ROOMS
        for name in [room.removeprefix("reaper.")]
        if f"`{name}/`" not in doc and f"`{name}.py`" not in doc
    )
    assert unnamed == []


#: A path the doc gives to something of the package: ``reaper/x/y.py``, or from its room,
#: ``jobqueue/port.py``, ``core/dead_letters/`` (a path with a wildcard names a pattern).
_DOC_PATH = re.compile(r"(?<![\w/.*-])((?:[a-z_]+/)+(?:[a-z_0-9]+\.(?:py|sql)\b)?)(?![\w*])")


def test_the_architecture_names_no_module_that_does_not_exist() -> None:
    rooms = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    missing = sorted(
        found
        for found in set(_DOC_PATH.findall(ARCHITECTURE.read_text(encoding="utf-8")))
        for inside in [found.removeprefix("reaper/")]
        if inside.split("/")[0] in rooms and not (PACKAGE / inside).exists()
    )
    assert missing == []
