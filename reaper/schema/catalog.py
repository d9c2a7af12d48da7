"""What the database already holds, as ``reaper db migrate`` needs to know it.

What the database already holds, as ``reaper db migrate`` needs to know it: one snapshot of
the catalog, read before anything is changed, from which :func:`reaper.schema.plan.plan`
decides which declared step is needed.

Reading it takes no lock on a table of the host's: the catalog answers from ``pg_class``,
``pg_attribute``, ``pg_index``, ``pg_proc`` and ``pg_trigger``. Two answers come from rows, not
the catalog: whether the fleet stream has its ``ledger_stream`` row (the reaper's own table),
and whether a host's project table holds the fleet's project row (one indexed read, an ACCESS
SHARE lock that conflicts only with ACCESS EXCLUSIVE, bounded by the session's lock_timeout).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from reaper.core.domain import FLEET_PROJECT_ID
from reaper.jobqueue.database import Connection, Database
from reaper.schema.sql import MIGRATE

__all__ = [
    "FLEET_PROJECT_LITERAL",
    "RECORD_TABLE",
    "Catalog",
    "IndexEntry",
    "ProjectTable",
    "applied_migrations",
    "read_catalog",
]

#: The table that records the migrations applied.
RECORD_TABLE: Final = "reaper_migration"

#: The fleet's reserved project id as an SQL literal (a UUID: nothing in it needs quoting).
FLEET_PROJECT_LITERAL: Final = f"'{FLEET_PROJECT_ID}'"


@dataclass(frozen=True)
class IndexEntry:
    """One index on a table the reaper declares."""

    table: str
    name: str
    #: False for an index an interrupted ``CREATE INDEX CONCURRENTLY`` left behind.
    valid: bool
    unique: bool
    #: Its key columns, in order, when it is on plain columns with no predicate; else None.
    key_columns: tuple[str, ...] | None


@dataclass(frozen=True)
class ProjectTable:
    """A host's table of projects that a ``project_id`` must exist in."""

    #: The table and its key column as SQL (quoted by PostgreSQL where they need it).
    table: str
    column: str
    #: Whether it holds the fleet's reserved project row.
    has_fleet_row: bool
    #: NOT NULL columns without a default: an insert of the key alone cannot fill them.
    required_columns: tuple[str, ...]


@dataclass(frozen=True)
class Catalog:
    """What the database holds of what the reaper declares."""

    tables: frozenset[str]
    columns: frozenset[tuple[str, str]]
    indexes: tuple[IndexEntry, ...]
    #: ``(table, column)`` of the NOT NULL columns.
    not_null: frozenset[tuple[str, str]] = frozenset()
    #: ``(table, constraint)`` of the named constraints.
    constraints: frozenset[tuple[str, str]] = frozenset()
    #: Each declared function's body (``prosrc``) by signature, where it exists.
    functions: Mapping[str, str] = field(default_factory=dict)
    #: ``(table, trigger) -> (function, tgtype)`` for the user triggers on declared tables.
    triggers: Mapping[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    fleet_stream: bool = False
    project_tables: tuple[ProjectTable, ...] = ()
    #: The migrations recorded as applied (empty where the record table does not exist).
    recorded: frozenset[str] = frozenset()

    def index(self, table: str, name: str) -> IndexEntry | None:
        return next((i for i in self.indexes if i.table == table and i.name == name), None)


async def read_catalog(
    conn: Connection, *, tables: Sequence[str], functions: Sequence[str], host_tables: Sequence[str]
) -> Catalog:
    """The snapshot for the declared ``tables`` (the record table is always read too), the
    declared ``functions`` (by signature) and the project tables referenced from
    ``host_tables``."""
    names = sorted({*tables, RECORD_TABLE})
    present = frozenset(r["name"] for r in await conn.fetch(MIGRATE["catalog_tables"], names))
    column_rows = await conn.fetch(MIGRATE["catalog_columns"], names)
    columns = frozenset((r["table_name"], r["column_name"]) for r in column_rows)
    not_null = frozenset((r["table_name"], r["column_name"]) for r in column_rows if r["not_null"])
    constraints = frozenset(
        (r["table_name"], r["constraint_name"])
        for r in await conn.fetch(MIGRATE["catalog_constraints"], names)
    )
    indexes = tuple(
        IndexEntry(
            table=r["table_name"],
            name=r["index_name"],
            valid=r["valid"],
            unique=r["is_unique"],
            key_columns=tuple(r["key_columns"]) if r["plain"] else None,
        )
        for r in await conn.fetch(MIGRATE["catalog_indexes"], names)
    )
    bodies = {
        r["signature"]: r["body"]
        for r in await conn.fetch(MIGRATE["catalog_functions"], list(functions))
    }
    triggers = {
        (r["table_name"], r["trigger_name"]): (r["function"], r["fires"])
        for r in await conn.fetch(MIGRATE["catalog_triggers"], names)
    }
    fleet_stream = "ledger_stream" in present and bool(
        await conn.fetchval(MIGRATE["fleet_stream_exists"], FLEET_PROJECT_ID)
    )
    recorded: frozenset[str] = frozenset()
    if RECORD_TABLE in present:
        recorded = frozenset(r["name"] for r in await conn.fetch(MIGRATE["recorded_migrations"]))
    return Catalog(
        tables=present,
        columns=columns,
        indexes=indexes,
        not_null=not_null,
        constraints=constraints,
        functions=bodies,
        triggers=triggers,
        fleet_stream=fleet_stream,
        project_tables=await _project_tables(conn, host_tables),
        recorded=recorded,
    )


async def _project_tables(conn: Connection, host_tables: Sequence[str]) -> tuple[ProjectTable, ...]:
    found = []
    for r in await conn.fetch(MIGRATE["project_tables"], list(host_tables)):
        probe = MIGRATE["fleet_project_exists"].format(
            table=r["table_sql"], column=r["column_sql"], fleet=FLEET_PROJECT_LITERAL
        )
        found.append(
            ProjectTable(
                table=r["table_sql"],
                column=r["column_sql"],
                has_fleet_row=bool(await conn.fetchval(probe)),
                required_columns=tuple(r["required_columns"]),
            )
        )
    return tuple(found)


async def applied_migrations(database: Database) -> set[str]:
    """The migrations recorded as applied (``reaper doctor``; the table must exist)."""
    async with database.session("reading which migrations are applied") as conn:
        return {r["name"] for r in await conn.fetch(MIGRATE["recorded_migrations"])}
