"""The declared migration steps and the plan (pure): every statement has its step and its
check, indexes are built CONCURRENTLY, and only what the catalog shows missing is planned."""

from __future__ import annotations

import re
from dataclasses import replace
from importlib import resources

import pytest

from reaper.core.domain import FLEET_PROJECT_ID
from reaper.schema.catalog import Catalog, IndexEntry, ProjectTable
from reaper.schema.plan import function_body, plan
from reaper.schema.sql import GRANTS, MIGRATE, migrations
from reaper.schema.steps import (
    MIGRATIONS,
    OUTBOX_MIGRATIONS,
    FunctionInPlace,
    InCatalog,
    IndexDropped,
    IndexValid,
    Part,
    TriggerInPlace,
    retired_indexes,
)

FLEET = f"'{FLEET_PROJECT_ID}'"


def complete_catalog() -> Catalog:
    """A database where every declared step is in place and every migration recorded."""
    steps = [s for m in MIGRATIONS for s in m.steps]
    held = [s.check for s in steps if isinstance(s.check, InCatalog)]
    tables = {c.table for c in held if c.part is Part.TABLE}
    return Catalog(
        tables=frozenset({*tables, "reaper_migration"}),
        columns=frozenset((c.table, c.name) for c in held if c.part is Part.COLUMN),
        indexes=tuple(
            IndexEntry(s.check.table, s.check.name, True, s.check.unique, s.check.columns)
            for s in steps
            if isinstance(s.check, IndexValid) and s.check.name not in retired_indexes()
        ),
        functions={
            s.check.signature: function_body(s.sql)
            for s in steps
            if isinstance(s.check, FunctionInPlace)
        },
        triggers={
            (s.check.table, s.check.name): (s.check.function, s.check.fires)
            for s in steps
            if isinstance(s.check, TriggerInPlace)
        },
        fleet_stream=True,
        recorded=frozenset(m.name for m in MIGRATIONS),
    )


def test_every_statement_of_every_migration_is_one_declared_step_in_file_order() -> None:
    files = migrations()
    assert [m.name for m in MIGRATIONS] == [name for name, _ in files]
    for migration, (_, statements) in zip(MIGRATIONS, files, strict=True):
        assert [s.statement for s in migration.steps] == list(statements), migration.name


def test_every_named_statement_is_described() -> None:
    sql_files = resources.files("reaper.schema.sql")
    texts = [sql_files.joinpath(f).read_text() for f in ("migrate.sql", "grants.sql")]
    folder = sql_files.joinpath("migrations")
    texts += [f.read_text() for f in folder.iterdir() if f.name.endswith(".sql")]
    named = [*MIGRATE.items(), *GRANTS.items(), *(i for _, s in migrations() for i in s.items())]
    for name, sql in named:
        assert sql.startswith("-- "), f"{name} has no description line"
    headers = sum(len(re.findall(r"^-- name: ", t, re.MULTILINE)) for t in texts)
    assert headers == len(named)


def test_indexes_and_only_indexes_are_built_concurrently_outside_a_transaction() -> None:
    for migration in MIGRATIONS:
        for step in migration.steps:
            builds_index = re.match(r"CREATE (UNIQUE )?INDEX", step.sql) is not None
            drops_index = re.match(r"DROP INDEX", step.sql) is not None
            assert step.concurrent == (builds_index or drops_index), step.statement
            assert ("CONCURRENTLY" in step.sql) == (builds_index or drops_index), step.statement
            assert drops_index == isinstance(step.check, IndexDropped), step.statement
            assert not step.sql.endswith(";"), step.statement


def test_an_index_a_later_migration_drops_is_never_built_and_is_dropped_where_it_stands() -> None:
    """event_sighting_latest_idx (0003) is served as well by its v2 (0008): 0013 drops it."""
    assert retired_indexes() == {"event_sighting_latest_idx"}
    empty = Catalog(tables=frozenset(), columns=frozenset(), indexes=())
    built = [b.index for m in plan(empty).migrations for b in m.builds if not b.retire]
    assert "event_sighting_latest_idx" not in built
    assert not [b for m in plan(empty).migrations for b in m.builds if b.retire]
    full = complete_catalog()
    old = IndexEntry("event", "event_sighting_latest_idx", True, False, None)
    planned = plan(replace(full, indexes=(*full.indexes, old)))
    assert [m.name for m in planned.migrations] == ["0013_retire_sighting_index"]
    (drop,) = planned.statements
    assert drop.concurrent and drop.sql.startswith("DROP INDEX CONCURRENTLY IF EXISTS")


def test_an_empty_database_needs_everything_but_the_columns_its_tables_are_created_with() -> None:
    empty = Catalog(tables=frozenset(), columns=frozenset(), indexes=())

    planned = plan(empty)

    assert planned.refusal is None
    assert planned.record_table is not None
    assert [m.name for m in planned.migrations] == [m.name for m in MIGRATIONS]
    assert not any(m.recorded for m in planned.migrations)
    names = [s.statement for s in planned.statements]
    assert not [n for n in names if n.startswith("add_")]
    assert "continue_existing_streams" in names and "create_fleet_stream" in names
    first = planned.migrations[0]
    assert [b.index for b in first.builds] == [
        "job_project_idempotency_key_uq",
        "job_dependency_depends_on_idx",
        "human_gate_identity_uq",
        "human_gate_open_idx",
    ]
    assert all(s.concurrent for b in first.builds for s in (b.create,))


def test_a_complete_database_needs_nothing() -> None:
    planned = plan(complete_catalog())

    assert planned.record_table is None
    assert planned.migrations == ()
    assert planned.statements == ()


def test_a_complete_but_unrecorded_database_needs_only_its_records() -> None:
    full = complete_catalog()
    catalog = replace(full, recorded=frozenset(), tables=full.tables - {"reaper_migration"})

    planned = plan(catalog)

    assert [s.statement for s in planned.statements] == ["create_migration_table"]
    assert [(m.name, m.complete, m.recorded) for m in planned.migrations] == [
        (m.name, True, False) for m in MIGRATIONS
    ]


def test_a_missing_column_of_an_existing_table_is_added() -> None:
    full = complete_catalog()
    catalog = replace(full, columns=full.columns - {("job", "finished_at")})

    (migration,) = plan(catalog).migrations

    assert migration.name == "0001_job_queue" and migration.recorded
    (statement,) = migration.transactional
    assert statement.sql == "ALTER TABLE job ADD COLUMN IF NOT EXISTS finished_at timestamptz"
    assert statement.reason == "column job.finished_at does not exist"


def test_an_invalid_index_is_dropped_then_built_and_an_equivalent_one_serves() -> None:
    full = complete_catalog()
    indexes = [i for i in full.indexes if i.name != "job_project_idempotency_key_uq"]
    rest = [i for i in indexes if i.name != "job_leased_expiry_idx"]
    catalog = replace(
        full,
        indexes=(
            *rest,
            IndexEntry("job", "job_leased_expiry_idx", False, False, None),
            # the host's own unique constraint on the same columns serves the reaper as well
            IndexEntry("job", "job_project_key", True, True, ("project_id", "idempotency_key")),
        ),
    )

    (migration,) = plan(catalog).migrations

    assert migration.name == "0003_reaper_indexes"
    (build,) = migration.builds
    assert build.drop is not None
    assert build.drop.sql == "DROP INDEX CONCURRENTLY IF EXISTS job_leased_expiry_idx"
    assert "indisvalid is false" in build.drop.reason
    assert build.create.statement == "index_job_leased_expiry"

    not_unique = replace(
        catalog,
        indexes=(*rest, IndexEntry("job", "x", True, False, ("project_id", "idempotency_key"))),
    )
    names = [b.index for m in plan(not_unique).migrations for b in m.builds]
    assert names == ["job_project_idempotency_key_uq", "job_leased_expiry_idx"]


def test_a_function_or_trigger_that_differs_is_replaced() -> None:
    full = complete_catalog()
    catalog = replace(
        full,
        functions={**full.functions, "reaper_sighting_scope(uuid,jsonb)": "SELECT 'old'"},
        triggers={
            **full.triggers,
            ("event", "event_append_only"): ("reaper_refuse_ledger_change()", 1 | 2 | 16),
        },
    )

    reasons = {s.statement: s.reason for s in plan(catalog).statements}

    assert reasons == {
        "create_event_append_only": "trigger event_append_only on event is not the one this "
        "version ships",
        "create_sighting_scope": "function reaper_sighting_scope(uuid,jsonb) differs from the "
        "one this version ships",
    }


@pytest.mark.parametrize("has_row", [True, False])
def test_the_fleet_project_row_is_inserted_where_a_project_table_lacks_it(has_row: bool) -> None:
    table = ProjectTable('"Project"', "id", has_fleet_row=has_row, required_columns=())
    catalog = replace(complete_catalog(), project_tables=(table,))

    statements = plan(catalog).statements

    if has_row:
        assert statements == ()
    else:
        (statement,) = statements
        assert statement.sql == (
            f'INSERT INTO "Project" (id) VALUES ({FLEET}) ON CONFLICT DO NOTHING'
        )


def test_a_project_table_that_needs_more_columns_is_refused_with_the_row_to_create() -> None:
    table = ProjectTable("project", "id", has_fleet_row=False, required_columns=("name", "owner"))

    planned = plan(replace(complete_catalog(), project_tables=(table,)))

    assert planned.statements == ()
    assert planned.refusal is not None
    assert "project has NOT NULL columns without a default: name, owner." in planned.refusal
    assert (
        f"INSERT INTO project (id, name, owner) VALUES ({FLEET}, <name>, <owner>);"
        in planned.refusal
    )
    assert "Nothing was changed" in planned.refusal


def test_the_outbox_schema_is_planned_only_when_asked_and_only_what_is_missing() -> None:
    catalog = complete_catalog()
    assert plan(catalog).migrations == ()

    asked = plan(catalog, outbox=True)

    (outbox,) = asked.migrations
    assert outbox.name == "outbox_dispatch" and not outbox.recorded
    assert [s.statement for s in outbox.statements] == [
        "add_job_dispatch_seq",
        "add_job_dispatched_at",
        "create_job_outbox",
        "index_job_outbox_unsent",
    ]
    assert [s.statement for s in outbox.statements if s.concurrent] == ["index_job_outbox_unsent"]
    # a host that has the columns and the table already gets the index alone
    hosted = replace(
        catalog,
        tables=catalog.tables | {"job_outbox"},
        columns=catalog.columns | {("job", "dispatch_seq"), ("job", "dispatched_at")},
    )
    (only,) = plan(hosted, outbox=True).migrations
    assert [s.statement for s in only.statements] == ["index_job_outbox_unsent"]
    assert [s.check for m in OUTBOX_MIGRATIONS for s in m.steps][:2] == [
        InCatalog("job", Part.COLUMN, "dispatch_seq", with_table=False),
        InCatalog("job", Part.COLUMN, "dispatched_at", with_table=False),
    ]
