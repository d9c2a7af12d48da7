"""The schema's SQL: the ordered migrations, and the queries of the ``db`` commands.

Each migration (``migrations/NNNN_*.sql``, and the optional ``outbox/*.sql``) is a file of named
statements, each under a ``-- name: NAME --`` header and a one-line description, which
:mod:`reaper.schema.steps` declares as steps; ``migrate.sql`` (:data:`MIGRATE`) holds the
queries of ``reaper db migrate`` itself, ``grants.sql`` (:data:`GRANTS`) those of ``reaper db
grants`` and the doctor's privilege checks. The files are read as ``jobqueue/sql/queries.sql``.
"""

from __future__ import annotations

from importlib import resources

from reaper.jobqueue.sql import load_queries, parse_queries

__all__ = ["GRANTS", "MIGRATE", "migrations", "without_description"]


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


MIGRATE: dict[str, str] = load_queries(__name__, "migrate.sql")
GRANTS: dict[str, str] = load_queries(__name__, "grants.sql")
