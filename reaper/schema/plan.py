"""The plan: what ``reaper db migrate`` would run on a database, as its catalog shows it.

From the steps of :mod:`reaper.schema.steps`; pure: no I/O.

Each step names one statement of its migration's file (``sql/migrations/NNNN_*.sql``). A step
whose check finds its work already done is skipped, so a database whose schema is in place is
migrated without a lock on any table of the host's. A column is added only to a table that
exists (a table created by this run has it already). An index is built ``CONCURRENTLY``,
outside a transaction, and one left invalid by an interrupted build is dropped and built again;
an index a later migration drops (another serves its reads as well) is dropped ``CONCURRENTLY``
too, and never built first. A migration is recorded once every step of it is in place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from reaper.schema.catalog import FLEET_PROJECT_LITERAL, RECORD_TABLE, Catalog
from reaper.schema.sql import MIGRATE, without_description
from reaper.schema.steps import (
    MIGRATIONS,
    OUTBOX_MIGRATIONS,
    FleetRow,
    FunctionInPlace,
    InCatalog,
    IndexDropped,
    IndexValid,
    Migration,
    Part,
    Step,
    TriggerInPlace,
    retired_indexes,
)

__all__ = [
    "IndexBuild",
    "MigrationPlan",
    "PlannedStatement",
    "SchemaPlan",
    "drop_index",
    "fleet_project_refusal",
    "function_body",
    "plan",
    "plan_migration",
    "script",
]

#: A declared index name: plain, so safe to put into a statement as it is.
_PLAIN_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class PlannedStatement:
    """One statement a migration runs (or, in a dry run, would run), and what the catalog
    showed that makes it needed."""

    migration: str
    statement: str
    sql: str
    reason: str
    #: Run outside a transaction (a concurrent index build or drop).
    concurrent: bool = False


@dataclass(frozen=True)
class IndexBuild:
    """A concurrent build of one index, preceded by the drop of an invalid one of that name;
    or, where ``retire``, ``create`` is the concurrent drop of an index no longer needed."""

    index: str
    create: PlannedStatement
    drop: PlannedStatement | None = None
    retire: bool = False


@dataclass(frozen=True)
class MigrationPlan:
    """What one migration still needs: its transactional statements (one transaction, in
    order), then its index builds, then its record."""

    name: str
    recorded: bool
    transactional: tuple[PlannedStatement, ...] = ()
    builds: tuple[IndexBuild, ...] = ()

    @property
    def statements(self) -> tuple[PlannedStatement, ...]:
        builds = (s for b in self.builds for s in (b.drop, b.create) if s is not None)
        return (*self.transactional, *builds)

    @property
    def complete(self) -> bool:
        """Every step is in place (whether or not it is recorded)."""
        return not self.transactional and not self.builds


@dataclass(frozen=True)
class SchemaPlan:
    """What ``reaper db migrate`` would do, in order; ``refusal`` says why it must not start."""

    record_table: PlannedStatement | None
    migrations: tuple[MigrationPlan, ...]
    refusal: str | None = None

    @property
    def statements(self) -> tuple[PlannedStatement, ...]:
        first = (self.record_table,) if self.record_table else ()
        return (*first, *(s for m in self.migrations for s in m.statements))


def plan(catalog: Catalog, *, outbox: bool = False) -> SchemaPlan:
    """What to run on a database as ``catalog`` shows it: only what is needed; with
    ``outbox``, the outbox dispatch schema after the reaper's own."""
    record_table = None
    if RECORD_TABLE not in catalog.tables:
        record_table = PlannedStatement(
            "",
            "create_migration_table",
            without_description(MIGRATE["create_migration_table"]),
            f"table {RECORD_TABLE} does not exist",
        )
    chosen = (*MIGRATIONS, *OUTBOX_MIGRATIONS) if outbox else MIGRATIONS
    needed = (plan_migration(m, catalog) for m in chosen)
    return SchemaPlan(
        record_table=record_table,
        migrations=tuple(m for m in needed if not (m.complete and m.recorded)),
        refusal=fleet_project_refusal(catalog),
    )


def plan_migration(migration: Migration, catalog: Catalog) -> MigrationPlan:
    """What one migration still needs on a database as ``catalog`` shows it."""
    transactional: list[PlannedStatement] = []
    builds: list[IndexBuild] = []
    for step in migration.steps:
        if isinstance(step.check, IndexValid):
            if step.check.name in retired_indexes():
                continue  # a later migration drops it: never built
            build = _index_build(migration.name, step, step.check, catalog)
            if build is not None:
                builds.append(build)
        elif isinstance(step.check, IndexDropped):
            if catalog.index(step.check.table, step.check.name) is not None:
                reason = (
                    f"index {step.check.name} on {step.check.table} exists and another "
                    "serves its reads as well"
                )
                drop = PlannedStatement(migration.name, step.statement, step.sql, reason, True)
                builds.append(IndexBuild(step.check.name, drop, retire=True))
        else:
            transactional.extend(
                PlannedStatement(migration.name, step.statement, sql, reason)
                for sql, reason in _needed(step, catalog)
            )
    return MigrationPlan(
        migration.name, migration.name in catalog.recorded, tuple(transactional), tuple(builds)
    )


def _needed(step: Step, catalog: Catalog) -> list[tuple[str, str]]:
    """``(sql, reason)`` for each statement this step needs (none: it is in place)."""
    check, sql = step.check, step.sql
    match check:
        case InCatalog():
            missing = _missing(check, catalog)
            return [] if missing is None else [(sql, missing)]
        case FunctionInPlace(signature):
            body = catalog.functions.get(signature)
            if body is None:
                return [(sql, f"function {signature} does not exist")]
            if body != function_body(sql):
                return [(sql, f"function {signature} differs from the one this version ships")]
        case TriggerInPlace(table, name, function, fires):
            found = catalog.triggers.get((table, name))
            if found is None:
                return [(sql, f"trigger {name} on {table} does not exist")]
            if found != (function, fires):
                return [(sql, f"trigger {name} on {table} is not the one this version ships")]
        case FleetRow(stream=True):
            if not catalog.fleet_stream:
                return [(sql, "the fleet stream has no ledger_stream row")]
        case FleetRow(stream=False):
            return [
                (
                    sql.format(table=t.table, column=t.column, fleet=FLEET_PROJECT_LITERAL),
                    f"{t.table} has no row for the fleet's project id {FLEET_PROJECT_LITERAL}",
                )
                for t in catalog.project_tables
                if not t.has_fleet_row and not t.required_columns
            ]
    return []  # in place (an index is planned as a build, not here)


def _missing(check: InCatalog, catalog: Catalog) -> str | None:
    """Why the catalog does not show ``check`` as it should be; None when it does."""
    table, name = check.table, check.name
    if check.part is Part.TABLE:
        return None if table in catalog.tables else f"table {table} does not exist"
    if check.with_table and table not in catalog.tables:
        return None  # the table this run creates has it already
    if check.part is Part.COLUMN:
        there = (table, name) in catalog.columns
        what = f"column {table}.{name} {'does not exist' if check.present else 'exists'}"
    elif check.part is Part.NOT_NULL:
        there = (table, name) in catalog.not_null
        what = f"column {table}.{name} is {'not ' if check.present else ''}NOT NULL"
    else:
        there = (table, name) in catalog.constraints
        what = f"table {table} {'has no' if check.present else 'has'} constraint {name}"
    return None if there == check.present else what


def _index_build(
    migration: str, step: Step, check: IndexValid, catalog: Catalog
) -> IndexBuild | None:
    found = catalog.index(check.table, check.name)
    if found is not None and found.valid:
        return None
    if found is None and check.columns is not None:
        serves = any(
            i.valid and i.key_columns == check.columns and (i.unique or not check.unique)
            for i in catalog.indexes
            if i.table == check.table
        )
        if serves:
            return None
    if found is None:
        reason = f"index {check.name} on {check.table} does not exist"
        create = PlannedStatement(migration, step.statement, step.sql, reason, True)
        return IndexBuild(check.name, create)
    reason = (
        f"index {check.name} on {check.table} is invalid (pg_index.indisvalid is false: an "
        "interrupted concurrent build left it)"
    )
    return IndexBuild(
        check.name,
        PlannedStatement(migration, step.statement, step.sql, f"{reason}: built again", True),
        drop=drop_index(migration, check.name, f"{reason}: dropped first"),
    )


def drop_index(migration: str, index: str, reason: str) -> PlannedStatement:
    """The concurrent drop of an invalid index (a declared name, plain by construction)."""
    if _PLAIN_NAME.fullmatch(index) is None:
        raise ValueError(f"not a plain index name: {index!r}")
    sql = without_description(MIGRATE["drop_invalid_index"]).format(index=index)
    return PlannedStatement(migration, "drop_invalid_index", sql, reason, True)


def function_body(sql: str) -> str:
    """The body of a ``CREATE FUNCTION ... AS $$ body $$`` statement, as ``pg_proc.prosrc``
    holds it."""
    found = re.search(r"\$\$(.*)\$\$", sql, re.DOTALL)
    if found is None:
        raise ValueError("a function's statement has no $$-quoted body")
    return found.group(1)


def fleet_project_refusal(catalog: Catalog) -> str | None:
    """Why the fleet's project row cannot be created by the migration, with how to create it
    by hand; None when it can (or is there)."""
    blocked = [t for t in catalog.project_tables if not t.has_fleet_row and t.required_columns]
    if not blocked:
        return None
    lines = [
        "the fleet's reserved project id "
        f"{FLEET_PROJECT_LITERAL} (dead-letter parks and fleet events are recorded under it) "
        "must exist in the host's project table, and the migration cannot insert it:"
    ]
    for t in blocked:
        columns = ", ".join(t.required_columns)
        values = ", ".join(f"<{c}>" for c in t.required_columns)
        lines.append(
            f"  {t.table} has NOT NULL columns without a default: {columns}. Create the row "
            f"by hand: INSERT INTO {t.table} ({t.column}, {columns}) "
            f"VALUES ({FLEET_PROJECT_LITERAL}, {values});"
        )
    lines.append("Nothing was changed; run `reaper db migrate` again once the row exists.")
    return "\n".join(lines)


def script(schema_plan: SchemaPlan, lock_timeout: float) -> str:
    """The plan as the SQL a run would execute, in order, each statement after its reason
    (``reaper db migrate --dry-run``)."""
    head = "-- reaper db migrate --dry-run: nothing was run."
    if not schema_plan.statements and not schema_plan.migrations:
        return f"{head} The schema is up to date: nothing would run."
    milliseconds = max(1, round(lock_timeout * 1000))
    begin = [_sql("script_begin"), _sql("set_local_lock_timeout", milliseconds)]
    lines = [f"{head} A run would execute these statements, in order:"]
    lines += _sql("script_session", milliseconds).splitlines()
    if schema_plan.record_table is not None:
        record = schema_plan.record_table
        lines += [f"-- {record.reason}", f"{record.sql};"]
    for m in schema_plan.migrations:
        lines.append(f"-- {m.name}" + ("" if m.recorded else " (not recorded yet)"))
        if m.transactional or not m.builds:
            lines += begin
            for s in m.transactional:
                lines += [f"-- {s.reason}", f"{s.sql};"]
            if not m.recorded and not m.builds:
                lines.append(f"-- every step in place: {m.name} is recorded as applied")
            lines.append(_sql("script_commit"))
        for s in m.statements[len(m.transactional) :]:
            lines += [f"-- {s.reason} (outside a transaction)", f"{s.sql};"]
        if m.builds and not m.recorded:
            lines.append(f"-- every step in place: {m.name} is recorded as applied")
    return "\n".join(lines)


def _sql(name: str, milliseconds: int = 0) -> str:
    """A statement of ``migrate.sql`` as a script shows it, ending with its semicolon."""
    return without_description(MIGRATE[name]).format(milliseconds=milliseconds) + ";"
