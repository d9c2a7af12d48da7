"""The reaper's SQL: ordered migrations and one file of named queries.

``queries.sql`` holds every query under a ``-- name: NAME --`` header followed by a one-line
description; :data:`QUERIES` maps each name to its text. Reading the SQL means opening one file.
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


def migrations() -> list[tuple[str, str]]:
    """Every migration as ``(name, sql)``, in the order they apply (by file name)."""
    folder = resources.files(__name__).joinpath("migrations")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text("utf-8")) for f in files]


QUERIES: dict[str, str] = load_queries()

__all__ = ["QUERIES", "load_queries", "migrations", "parse_queries"]
