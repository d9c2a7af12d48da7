"""The job queue's SQL: one file of named queries, and the loader of named-query files.

``queries.sql`` holds every query a pass (and the gate and ledger commands' reads) runs (the
lease reap's batches are in ``lease_reap.sql``; what only a person's answer to a gate or a
person's read runs is at its end), each
under a ``-- name: NAME --`` header followed by a one-line description; :data:`QUERIES` maps each
name to its text, every ``{piece}`` in it replaced by the named piece (a part several queries
share: a gate row, a lease's ruling, an outbox row), so that each is written once. The schema's
migrations and the migrator's own queries are in :mod:`reaper.schema.sql`, in the same form.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- name: (?P<name>[a-z_][a-z0-9_]*) --$", re.MULTILINE)
_PIECE = re.compile(r"\{(?P<name>[a-z_][a-z0-9_]*)\}")


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
    ``reaper/demo/scenario.sql``, the schema its own in ``reaper/schema/sql/``)."""
    return parse_queries(resources.files(package).joinpath(filename).read_text("utf-8"))


def _all_queries() -> dict[str, str]:
    queries = load_queries()
    for name, text in load_queries(filename="lease_reap.sql").items():
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = text
    return {name: _spliced(queries, name) for name in queries}


def _spliced(queries: dict[str, str], name: str, within: tuple[str, ...] = ()) -> str:
    """The text of ``name``, each ``{piece}`` in it replaced by that piece's own text (spliced
    in turn, without its closing semicolon: it stands inside another statement)."""
    if name not in queries:
        raise ValueError(f"no query or piece {name!r} to splice into {within[-1]!r}")
    if name in within:
        raise ValueError(f"query {name!r} splices itself in")
    return _PIECE.sub(
        lambda m: _spliced(queries, m["name"], (*within, name)).rstrip(";"), queries[name]
    )


QUERIES: dict[str, str] = _all_queries()

__all__ = ["QUERIES", "load_queries", "parse_queries"]
