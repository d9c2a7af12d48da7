"""The reaper's SQL: one file of named queries, the ordered migrations, and the migrator's
own queries.

``queries.sql`` holds every query under a ``-- name: NAME --`` header followed by a one-line
description; :data:`QUERIES` maps each name to its text. Reading the SQL means opening one file.
Each migration (``migrations/NNNN_*.sql``, and the optional ``outbox/*.sql``) is a file of
named statements in the same form, which :mod:`reaper.jobqueue.schema` declares as steps;
``migrate.sql`` (:data:`MIGRATE`) holds the queries of ``reaper db migrate`` itself.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- name: (?P<name>[a-z_][a-z0-9_]*) --$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split a named-query file into ``{name: sql}`` (the description comment is kept)."""
    parts = _HEADER.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body.strip()
    return queries


def load_queries(package: str = __name__, filename: str = "queries.sql") -> dict[str, str]:
    """The named queries of one file of a package (the demo keeps its seeding queries in
    ``reaper/demo/scenario.sql``)."""
    return parse_queries(resources.files(package).joinpath(filename).read_text("utf-8"))


def migrations(folder: str = "migrations") -> list[tuple[str, dict[str, str]]]:
    """Every migration of ``folder`` as ``(name, {statement name: sql})``, in the order they
    apply (by file name), each statement in the order of its file. ``migrations/`` is the
    reaper's schema; ``outbox/`` the optional outbox dispatch schema (``--outbox``)."""
    found = resources.files(__name__).joinpath(folder)
    files = sorted((f for f in found.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), parse_queries(f.read_text("utf-8"))) for f in files]


def without_description(sql: str) -> str:
    """A named statement without its leading description comment and its final semicolon:
    what is run, and shown."""
    lines = sql.splitlines()
    while lines and lines[0].startswith("--"):
        lines.pop(0)
    return "\n".join(lines).strip().removesuffix(";").rstrip()


QUERIES: dict[str, str] = load_queries()
MIGRATE: dict[str, str] = load_queries(filename="migrate.sql")

__all__ = [
    "MIGRATE",
    "QUERIES",
    "load_queries",
    "migrations",
    "parse_queries",
    "without_description",
]
