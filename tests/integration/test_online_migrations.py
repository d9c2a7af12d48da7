"""Online migrations (SPEC §10) on a real PostgreSQL beside a live host: only what is missing
is run, no lock is waited for past lock_timeout, a blocker is named, nothing is left half-way,
invalid indexes are rebuilt, the dry run runs nothing, and the host's enum states and project
table are migrated over."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

import reaper
from reaper.core.domain import FLEET_PROJECT_ID
from reaper.errors import MigrationStopped
from reaper.jobqueue.postgres import PostgresStore
from reaper.schema import migrations as migrator
from reaper.schema.migrations import RETRY_PAUSE_SECONDS, MigrationRun
from reaper.schema.sql import migrations
from tests.support.host_schema import HOST_WITH_PROJECTS

pytestmark = pytest.mark.postgres

ALL = [name for name, _ in migrations()]
PACKAGE_ROOT = str(Path(reaper.__file__).resolve().parents[1])
HOST_TABLES = "job, job_dependency, human_gate, event"

#: The schema as the catalog holds it: what "changed nothing" is checked against.
SCHEMA = """
SELECT 'table ' || c.relname || ' column ' || a.attname || ' '
       || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid) || ' valid=' || i.indisvalid
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = ic.relnamespace WHERE n.nspname = 'public'
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t WHERE NOT t.tgisinternal
UNION ALL
SELECT 'function ' || p.oid::regprocedure::text || ' ' || md5(p.prosrc)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
ORDER BY 1
"""


async def schema_and_records(dsn: str) -> tuple[list[str], list[str]]:
    """The schema, and the migrations recorded (none where the record table does not exist)."""
    conn = await asyncpg.connect(dsn)
    try:
        schema = [r[0] for r in await conn.fetch(SCHEMA)]
        records: list[str] = []
        if await conn.fetchval("SELECT to_regclass('reaper_migration') IS NOT NULL"):
            records = [r[0] for r in await conn.fetch("SELECT name FROM reaper_migration")]
        return schema, sorted(records)
    finally:
        await conn.close()


async def execute(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def fetchval(dsn: str, sql: str) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


async def index_validity(dsn: str, index: str) -> object:
    """True (valid), False (invalid) or None (no such index)."""
    return await fetchval(
        dsn, f"SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('{index}')"
    )


@dataclass
class Holder:
    """A session of the host's with a transaction open."""

    conn: asyncpg.Connection
    pid: int

    async def release(self) -> None:
        await self.conn.execute("ROLLBACK")


@contextlib.asynccontextmanager
async def holding(dsn: str, statement: str, name: str = "host-worker") -> AsyncIterator[Holder]:
    """A host session whose transaction stays open after ``statement`` (rolled back after)."""
    conn = await asyncpg.connect(dsn, server_settings={"application_name": name})
    try:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        await conn.execute("BEGIN")
        await conn.execute(statement)  # what pg_stat_activity shows as its query
        yield Holder(conn, pid)
    finally:
        with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError):
            await conn.execute("ROLLBACK")
        await conn.close()


async def migrate(
    dsn: str, *, dry_run: bool = False, lock_timeout_seconds: float = 2.0
) -> MigrationRun:
    store = await PostgresStore.connect(dsn)
    try:
        return await migrator.migrate(
            store.database, dry_run=dry_run, lock_timeout_seconds=lock_timeout_seconds
        )
    finally:
        await store.close()


async def timed_migrate(dsn: str, **kwargs: float) -> tuple[MigrationRun, float]:
    started = time.monotonic()
    run = await migrate(dsn, **kwargs)  # type: ignore[arg-type]
    return run, time.monotonic() - started


@dataclass(frozen=True)
class Cli:
    code: int
    out: str
    err: str


async def reaper_cli(dsn: str, tmp_path: Path, *args: str, **env_overrides: str) -> Cli:
    """``python -m reaper ARGS`` of the package under test, configured by the environment."""
    config_dir = tmp_path / "conf.d"
    config_dir.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REAPER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
    env.update({"REAPER_CONFIG_DIR": str(config_dir), "REAPER_DATABASE__DSN": dsn, **env_overrides})
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reaper",
        *args,
        env=env,
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return Cli(process.returncode, out.decode(), err.decode())


# --------------------------------------------------------------------------- (a) no lock at all


@pytest.mark.parametrize(
    "held",
    [
        "SELECT id FROM job FOR UPDATE",
        "LOCK TABLE job IN ROW EXCLUSIVE MODE",
        f"LOCK TABLE {HOST_TABLES} IN ACCESS EXCLUSIVE MODE",
    ],
)
async def test_migrating_a_migrated_database_waits_for_nothing_beside_a_long_transaction(
    pg_dsn: str, held: str
) -> None:
    """Even with every host table locked ACCESS EXCLUSIVE by a transaction left open, a
    migration of a database whose schema is in place returns at once: it asks for no lock on
    any of them (one would wait out the 5 s lock_timeout, then stop)."""
    before = await schema_and_records(pg_dsn)
    async with holding(pg_dsn, held):
        run, seconds = await timed_migrate(pg_dsn, lock_timeout_seconds=5)

    assert run.up_to_date and run.applied == () and run.statements == ()
    assert seconds < 3, seconds  # a wait for any lock would last the 5 s lock_timeout
    assert await schema_and_records(pg_dsn) == before


@pytest.mark.parametrize(
    "mode", ["ROW EXCLUSIVE", "ACCESS EXCLUSIVE"], ids=["row-exclusive", "access-exclusive"]
)
async def test_a_first_migration_onto_a_complete_host_schema_takes_no_lock_on_its_tables(
    pg_dsn: str, mode: str
) -> None:
    """A host installation with every table, column, index, function and trigger, and no
    record of any migration: the migration only records them, locking none of the host's
    tables (the holder would make any lock on them wait out the lock_timeout)."""
    await execute(pg_dsn, "DROP TABLE reaper_migration")
    schema_before, _ = await schema_and_records(pg_dsn)

    async with holding(pg_dsn, f"LOCK TABLE {HOST_TABLES} IN {mode} MODE"):
        run, seconds = await timed_migrate(pg_dsn, lock_timeout_seconds=5)

    assert run.applied == tuple(ALL)
    assert [s.statement for s in run.statements] == ["create_migration_table"]
    assert seconds < 3, seconds  # a wait for any lock would last the 5 s lock_timeout
    schema_after, records = await schema_and_records(pg_dsn)
    assert records == ALL
    assert [s for s in schema_after if "reaper_migration" not in s] == schema_before


# --------------------------------------------------------------------------- (b) a blocker


async def test_a_migration_blocked_by_a_long_transaction_names_it_and_changes_nothing(
    pg_dsn: str,
) -> None:
    """0001 needs a column, which takes ACCESS EXCLUSIVE on job; a host session holds rows
    of job FOR UPDATE in a transaction left open. The migration stops after about its
    lock_timeout, names that session, rolls back, records nothing; once the transaction has
    ended, the next run completes."""
    await execute(
        pg_dsn,
        "ALTER TABLE job DROP COLUMN finished_at;"
        " DELETE FROM reaper_migration WHERE name = '0001_job_queue'",
    )
    before = await schema_and_records(pg_dsn)
    lock_timeout = 0.5

    async with holding(
        pg_dsn, "SELECT id FROM job WHERE state = 'ready' FOR UPDATE", name="host-long-txn"
    ) as holder:
        started = time.monotonic()
        with pytest.raises(MigrationStopped) as stopped:
            await migrate(pg_dsn, lock_timeout_seconds=lock_timeout)
        seconds = time.monotonic() - started

        message = str(stopped.value)
        assert stopped.value.blocking_pids == (holder.pid,)
        assert f"pid {holder.pid}" in message
        assert "application_name 'host-long-txn'" in message
        assert "user 'postgres'" in message
        assert "state 'idle in transaction'" in message
        assert "transaction open " in message
        assert "SELECT id FROM job WHERE state = 'ready' FOR UPDATE" in message
        assert "ADD COLUMN IF NOT EXISTS finished_at" in message
        assert "nothing of 0001_job_queue was changed" in message
        assert "a long transaction is reported, not waited for" in message
        # one wait, one pause to see it still open, then the report: not LOCK_ATTEMPTS waits
        assert "(1 attempt)" in message
        assert lock_timeout <= seconds < lock_timeout + RETRY_PAUSE_SECONDS + 2.0, seconds
        assert await schema_and_records(pg_dsn) == before

    run = await migrate(pg_dsn, lock_timeout_seconds=lock_timeout)

    assert run.applied == ("0001_job_queue",)
    assert [s.statement for s in run.statements] == ["add_job_finished_at"]
    schema, records = await schema_and_records(pg_dsn)
    assert "table job column finished_at timestamp with time zone" in schema
    assert records == ALL


async def test_a_concurrent_build_blocked_by_a_writer_leaves_nothing_half_way(
    pg_dsn: str,
) -> None:
    """A concurrent index build waits for the transactions writing the table; a writer's
    transaction left open stops it within about lock_timeout, naming the writer. The build it
    began is not left valid-looking, the migration is not recorded, and the next run, once
    the writer is gone, builds the index."""
    await execute(
        pg_dsn,
        "DROP INDEX job_leased_expiry_idx;"
        " DELETE FROM reaper_migration WHERE name = '0003_reaper_indexes'",
    )
    schema_before, records_before = await schema_and_records(pg_dsn)

    async with holding(
        pg_dsn, "LOCK TABLE job IN ROW EXCLUSIVE MODE", name="host-writer"
    ) as holder:
        started = time.monotonic()
        with pytest.raises(MigrationStopped) as stopped:
            await migrate(pg_dsn, lock_timeout_seconds=0.5)
        seconds = time.monotonic() - started

        message = str(stopped.value)
        assert stopped.value.blocking_pids == (holder.pid,)
        assert f"pid {holder.pid}" in message and "application_name 'host-writer'" in message
        assert "holding RowExclusiveLock on job" in message
        assert "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_leased_expiry_idx" in message
        assert "0003_reaper_indexes is not recorded" in message
        # the build's wait, a try at dropping what it left (the writer blocks that too), a pause
        assert "(1 attempt)" in message
        assert seconds < 0.5 * 2 + RETRY_PAUSE_SECONDS + 2.0, seconds
        assert await index_validity(pg_dsn, "job_leased_expiry_idx") in (None, False)
        schema, records = await schema_and_records(pg_dsn)
        assert records == records_before
        assert [s for s in schema if "job_leased_expiry_idx" not in s] == schema_before

    run = await migrate(pg_dsn, lock_timeout_seconds=0.5)

    assert run.applied == ("0003_reaper_indexes",)
    assert run.statements[-1].statement == "index_job_leased_expiry"
    assert await index_validity(pg_dsn, "job_leased_expiry_idx") is True
    _, records = await schema_and_records(pg_dsn)
    assert records == ALL


async def test_a_lock_held_briefly_is_tried_again_after_a_pause(pg_dsn: str) -> None:
    """A blocker whose transaction ends after the first attempt gave up: the migration
    pauses, sees it gone, tries again, and completes."""
    await execute(pg_dsn, "ALTER TABLE job DROP COLUMN phase")
    watcher = await asyncpg.connect(pg_dsn)
    try:
        async with holding(pg_dsn, "LOCK TABLE job IN ROW EXCLUSIVE MODE") as holder:
            migration = asyncio.create_task(migrate(pg_dsn, lock_timeout_seconds=1.5))
            # the first attempt waits for the lock, then gives up: end the blocker in the pause
            await _wait_for_migrator(watcher, migration, waiting=True)
            await _wait_for_migrator(watcher, migration, waiting=False)
            await holder.release()
            run = await asyncio.wait_for(migration, 10)
    finally:
        await watcher.close()

    assert [s.statement for s in run.statements] == ["add_job_phase"]
    assert run.applied == ()


async def _wait_for_migrator(
    watcher: asyncpg.Connection, migration: asyncio.Task[MigrationRun], *, waiting: bool
) -> None:
    probe = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'queue-reaper db migrate'"
        " AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + 10
    while (await watcher.fetchval(probe) == 1) != waiting:
        assert not migration.done(), migration.result()
        assert time.monotonic() < deadline, f"the migrator never became waiting={waiting}"
        await asyncio.sleep(0.01)


async def test_the_stop_message_on_the_command_line_names_the_blocker_and_no_password(
    pg_dsn: str, tmp_path: Path
) -> None:
    """`reaper db migrate` exits 1 with the message on stderr; the configured password never
    appears in it, not even where the blocking session's query spells it out."""
    password = "Pw-migrate-7e1c"  # trust auth: PostgreSQL ignores it
    await execute(pg_dsn, "ALTER TABLE job DROP COLUMN max_attempts")
    async with holding(
        pg_dsn, f"SELECT '{password}' AS secret, id FROM job FOR UPDATE", name="host-secretive"
    ) as holder:
        cli = await reaper_cli(
            pg_dsn,
            tmp_path,
            "db",
            "migrate",
            REAPER_DATABASE__PASSWORD=password,
            REAPER_DATABASE__LOCK_TIMEOUT_SECONDS="0.5",
        )

    assert cli.code == 1, cli
    assert cli.out == ""
    assert cli.err.startswith("reaper: db migrate stopped: migration 0001_job_queue: ")
    assert f"pid {holder.pid}" in cli.err and "application_name 'host-secretive'" in cli.err
    assert password not in cli.err
    assert "***" in cli.err


async def test_a_concurrent_build_that_fails_leaves_no_index_behind(pg_dsn: str) -> None:
    """Host rows that break a unique index: the build fails, its invalid index is dropped,
    the migration is not recorded, and the message names the duplicated key."""
    await execute(
        pg_dsn,
        "DROP INDEX job_project_idempotency_key_uq;"
        " DELETE FROM reaper_migration WHERE name = '0001_job_queue';"
        " INSERT INTO job (project_id, kind, idempotency_key)"
        " SELECT '00000000-0000-4000-8000-000000000001', 'build', 'twice'"
        " FROM generate_series(1, 2)",
    )
    before = await schema_and_records(pg_dsn)

    with pytest.raises(MigrationStopped) as stopped:
        await migrate(pg_dsn)

    message = str(stopped.value)
    assert "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS job_project_idempotency_key_uq" in (
        message
    )
    assert "(project_id, idempotency_key)=(00000000-0000-4000-8000-000000000001, twice)" in (
        message
    )
    assert "invalid index job_project_idempotency_key_uq was dropped" in message
    assert "0001_job_queue is not recorded" in message
    assert await index_validity(pg_dsn, "job_project_idempotency_key_uq") is None
    assert await schema_and_records(pg_dsn) == before


# --------------------------------------------------------------------------- (c) invalid index


async def _invalidate_by_flag(dsn: str) -> None:
    await execute(
        dsn,
        "UPDATE pg_index SET indisvalid = false"
        " WHERE indexrelid = 'job_leased_expiry_idx'::regclass",
    )


async def _invalidate_by_cancelled_build(dsn: str) -> None:
    await execute(dsn, "DROP INDEX job_leased_expiry_idx")
    async with holding(dsn, "LOCK TABLE job IN ROW EXCLUSIVE MODE"):
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("SET lock_timeout = '200ms'")
            with pytest.raises(asyncpg.LockNotAvailableError):
                await conn.execute(
                    "CREATE INDEX CONCURRENTLY job_leased_expiry_idx"
                    " ON job (lease_expires_at, id) WHERE state = 'leased'"
                )
        finally:
            await conn.close()


@pytest.mark.parametrize(
    "invalidate",
    [_invalidate_by_flag, _invalidate_by_cancelled_build],
    ids=["indisvalid-false", "cancelled-concurrent-build"],
)
async def test_an_invalid_index_is_dropped_and_built_again(pg_dsn: str, invalidate: object) -> None:
    await invalidate(pg_dsn)  # type: ignore[operator]
    assert await index_validity(pg_dsn, "job_leased_expiry_idx") is False

    dry = await migrate(pg_dsn, dry_run=True)
    run = await migrate(pg_dsn)

    expected = ["drop_invalid_index", "index_job_leased_expiry"]
    assert [s.statement for s in dry.statements] == expected
    assert [s.statement for s in run.statements] == expected
    assert "indisvalid is false" in run.statements[0].reason
    assert run.statements[0].sql == "DROP INDEX CONCURRENTLY IF EXISTS job_leased_expiry_idx"
    assert run.applied == ()
    assert await index_validity(pg_dsn, "job_leased_expiry_idx") is True
    assert (await migrate(pg_dsn)).up_to_date


# --------------------------------------------------------------------------- (d) the dry run


async def test_the_dry_run_prints_only_the_needed_statements_and_runs_none(
    pg_dsn: str, tmp_path: Path
) -> None:
    await execute(
        pg_dsn,
        "ALTER TABLE job DROP COLUMN phase; DROP INDEX human_gate_open_idx;"
        " DELETE FROM reaper_migration WHERE name = '0004_dead_letters'",
    )
    before = await schema_and_records(pg_dsn)

    cli = await reaper_cli(pg_dsn, tmp_path, "db", "migrate", "--dry-run")

    assert cli.code == 0, cli
    assert cli.err == ""
    assert await schema_and_records(pg_dsn) == before
    assert [line for line in cli.out.splitlines() if not line.startswith("--")] == [
        "SET lock_timeout = '2000ms';",
        "SET statement_timeout = 0;",
        "BEGIN;",
        "SET LOCAL lock_timeout = '2000ms';",
        "ALTER TABLE job ADD COLUMN IF NOT EXISTS phase text;",
        "COMMIT;",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS human_gate_open_idx",
        "    ON human_gate (created_at) WHERE answered_at IS NULL;",
        "BEGIN;",
        "SET LOCAL lock_timeout = '2000ms';",
        "COMMIT;",
    ]
    assert "-- column job.phase does not exist" in cli.out
    assert "-- index human_gate_open_idx on human_gate does not exist" in cli.out
    assert "-- 0004_dead_letters (not recorded yet)" in cli.out

    # a run does what the dry run said, and nothing else
    run = await migrate(pg_dsn)
    assert [s.statement for s in run.statements] == ["add_job_phase", "index_human_gate_open"]
    assert run.applied == ("0004_dead_letters",)

    again = await reaper_cli(pg_dsn, tmp_path, "db", "migrate", "--dry-run")
    assert again.code == 0, again
    assert again.out.strip() == (
        "-- reaper db migrate --dry-run: nothing was run. The schema is up to date: "
        "nothing would run."
    )


async def test_a_dry_run_on_an_empty_database_creates_nothing(pg_empty_dsn: str) -> None:
    dry = await migrate(pg_empty_dsn, dry_run=True)

    assert await schema_and_records(pg_empty_dsn) == ([], [])
    assert dry.applied == tuple(ALL)
    assert dry.statements[0].statement == "create_migration_table"
    run = await migrate(pg_empty_dsn)
    assert run.statements == dry.statements
    assert run.applied == dry.applied


async def test_the_real_command_migrates_and_says_what_it_ran(
    pg_empty_dsn: str, tmp_path: Path
) -> None:
    cli = await reaper_cli(pg_empty_dsn, tmp_path, "db", "migrate")

    assert cli.code == 0, cli
    lines = cli.out.splitlines()
    assert lines[-len(ALL) :] == [f"applied {name}" for name in ALL]
    assert "0001_job_queue: ran CREATE TABLE IF NOT EXISTS job (" in cli.out
    assert "(table job does not exist)" in cli.out

    again = await reaper_cli(pg_empty_dsn, tmp_path, "db", "migrate")
    assert (again.code, again.out) == (0, "schema is up to date: nothing to apply\n")


# --------------------------------------------------------------------------- (e) host variants


async def test_a_host_with_enum_states_and_a_project_table_is_migrated(pg_empty_dsn: str) -> None:
    await execute(pg_empty_dsn, HOST_WITH_PROJECTS.replace("PROJECT_COLUMNS", "name text"))
    await execute(
        pg_empty_dsn,
        "INSERT INTO project (id, name) VALUES (gen_random_uuid(), 'p1');"
        " INSERT INTO job (project_id, kind, phase, state, lease_expires_at)"
        " SELECT id, 'build', 'build', 'leased', now() FROM project;"
        " INSERT INTO job (project_id, kind, phase, state) SELECT id, 'test', 'test', 'ready'"
        " FROM project",
    )

    run = await migrate(pg_empty_dsn)

    assert run.applied == tuple(ALL)
    fleet = next(s for s in run.statements if s.statement == "create_fleet_project")
    assert fleet.sql == (
        f"INSERT INTO project (id) VALUES ('{FLEET_PROJECT_ID}') ON CONFLICT DO NOTHING"
    )
    assert fleet.reason == f"project has no row for the fleet's project id '{FLEET_PROJECT_ID}'"
    assert (
        await fetchval(
            pg_empty_dsn, f"SELECT count(*) FROM project WHERE id = '{FLEET_PROJECT_ID}'"
        )
        == 1
    )
    for index in ("job_leased_expiry_idx", "job_ready_project_run_after_idx"):
        assert await index_validity(pg_empty_dsn, index) is True, index
    assert (
        await fetchval(pg_empty_dsn, "SELECT count(*) FROM job WHERE state = 'leased'::job_state")
        == 1
    )
    assert (
        await fetchval(
            pg_empty_dsn,
            "SELECT format_type(atttypid, NULL) FROM pg_attribute"
            " WHERE attrelid = 'job'::regclass AND attname = 'state'",
        )
        == "job_state"
    )
    # what the fleet stream records satisfies the host's foreign keys
    await execute(
        pg_empty_dsn,
        f"INSERT INTO job (project_id, kind, state) VALUES ('{FLEET_PROJECT_ID}',"
        " 'bus.dead_letter', 'awaiting_human');"
        f" INSERT INTO event (project_id, seq, kind, payload, digest) VALUES ('{FLEET_PROJECT_ID}',"
        f" 1, 'QueueReaped', '{{}}', repeat('0', 64))",
    )
    assert (await migrate(pg_empty_dsn)).up_to_date


async def test_a_project_table_that_needs_more_columns_gets_a_clear_message(
    pg_empty_dsn: str, tmp_path: Path
) -> None:
    await execute(
        pg_empty_dsn,
        HOST_WITH_PROJECTS.replace(
            "PROJECT_COLUMNS", "name text NOT NULL, \"Owner\" text NOT NULL, slug text DEFAULT 'x'"
        ),
    )
    before = await schema_and_records(pg_empty_dsn)

    for args in (("db", "migrate"), ("db", "migrate", "--dry-run")):
        cli = await reaper_cli(pg_empty_dsn, tmp_path, *args)

        assert cli.code == 1, cli
        assert cli.out == ""
        assert f"the fleet's reserved project id '{FLEET_PROJECT_ID}'" in cli.err
        assert 'project has NOT NULL columns without a default: name, "Owner".' in cli.err
        assert (
            'INSERT INTO project (id, name, "Owner") VALUES '
            f"('{FLEET_PROJECT_ID}', <name>, <\"Owner\">);"
        ) in cli.err
        assert "Nothing was changed" in cli.err
        assert await schema_and_records(pg_empty_dsn) == before

    await execute(
        pg_empty_dsn,
        f"INSERT INTO project (id, name, \"Owner\") VALUES ('{FLEET_PROJECT_ID}', 'fleet', 'ops')",
    )
    run = await migrate(pg_empty_dsn)
    assert run.applied == tuple(ALL)
    assert "create_fleet_project" not in [s.statement for s in run.statements]


async def test_0007_and_0008_are_applied_after_0009_and_0010(pg_dsn: str) -> None:
    """A database the previous version migrated (0009 and 0010 applied, 0007 and 0008 not: no
    dead_letter.envelope, no reaper_sighting_scope_v2) gets exactly 0007 and 0008, online, and
    is then up to date; the open sightings it held keep their scope."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "DROP INDEX event_sighting_latest_v2_idx; DROP INDEX dead_letter_envelope_idx;"
            "ALTER TABLE dead_letter DROP COLUMN envelope;"
            "DROP FUNCTION reaper_sighting_scope_v2(uuid, jsonb);"
            "DELETE FROM reaper_migration WHERE name IN "
            "('0007_dead_letter_envelopes', '0008_sighting_buckets')"
        )
        applied = [r["name"] for r in await conn.fetch("SELECT name FROM reaper_migration")]
        assert "0009_open_sightings" in applied and "0010_observations" in applied
    finally:
        await conn.close()

    run = await migrate(pg_dsn, lock_timeout_seconds=5)
    assert run.applied == ("0007_dead_letter_envelopes", "0008_sighting_buckets")
    assert [s.statement for s in run.statements] == [
        "add_dead_letter_envelope",
        "index_dead_letter_envelope",
        "create_sighting_scope_v2",
        "index_event_sighting_latest_v2",
    ]
    assert all(s.concurrent for s in run.statements if s.statement.startswith("index_"))
    assert (await migrate(pg_dsn)).up_to_date
