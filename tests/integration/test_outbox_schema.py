"""``reaper db migrate --outbox`` on real PostgreSQL (SPEC §3): the outbox dispatch schema for a
fresh install that wants it, only when asked, only what is missing, and a host's own outbox
left as it is."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_online_migrations import execute, fetchval, reaper_cli

from reaper.jobqueue.postgres import PostgresStore
from tests.support.host_schema import OUTBOX_SCHEMA

pytestmark = pytest.mark.postgres

OUTBOX_COLUMNS = (
    "SELECT count(*) FROM pg_attribute WHERE attrelid = 'job'::regclass"
    " AND attname IN ('dispatch_seq', 'dispatched_at') AND NOT attisdropped"
)


async def dispatch_found(dsn: str) -> bool:
    store = await PostgresStore.connect(dsn, pool_size=1)
    try:
        return (await store.database_facts()).outbox_schema
    finally:
        await store.close()


async def test_a_fresh_install_gets_the_outbox_schema_only_when_it_asks(
    pg_empty_dsn: str, tmp_path: Path
) -> None:
    plain = await reaper_cli(pg_empty_dsn, tmp_path, "db", "migrate")
    assert plain.code == 0, plain
    assert await fetchval(pg_empty_dsn, OUTBOX_COLUMNS) == 0
    assert await fetchval(pg_empty_dsn, "SELECT to_regclass('job_outbox') IS NULL") is True
    assert not await dispatch_found(pg_empty_dsn)

    dry = await reaper_cli(pg_empty_dsn, tmp_path, "db", "migrate", "--outbox", "--dry-run")
    assert dry.code == 0, dry
    assert "-- outbox_dispatch (not recorded yet)" in dry.out
    assert "ALTER TABLE job ADD COLUMN IF NOT EXISTS dispatch_seq" in dry.out
    assert "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_outbox_unsent_idx" in dry.out
    assert await fetchval(pg_empty_dsn, OUTBOX_COLUMNS) == 0  # the dry run ran nothing

    asked = await reaper_cli(pg_empty_dsn, tmp_path, "db", "migrate", "--outbox")
    assert asked.code == 0, asked
    assert asked.out.splitlines()[-1] == "applied outbox_dispatch"
    assert await fetchval(pg_empty_dsn, OUTBOX_COLUMNS) == 2
    assert await dispatch_found(pg_empty_dsn)  # dispatch = "auto" now finds outbox dispatch

    again = await reaper_cli(pg_empty_dsn, tmp_path, "db", "migrate", "--outbox")
    assert (again.code, again.out) == (0, "schema is up to date: nothing to apply\n")
    shown = await reaper_cli(pg_empty_dsn, tmp_path, "config", "show")
    assert "outbox" in shown.out, shown


async def test_both_in_one_run_on_an_empty_database(pg_empty_dsn: str, tmp_path: Path) -> None:
    # job is created by this run, then given the dispatch columns by the outbox migration
    run = await reaper_cli(pg_empty_dsn, tmp_path, "db", "migrate", "--outbox")
    assert run.code == 0, run
    assert "applied 0001_job_queue" in run.out and "applied outbox_dispatch" in run.out
    assert await fetchval(pg_empty_dsn, OUTBOX_COLUMNS) == 2


async def test_a_hosts_own_outbox_is_kept_and_only_the_missing_index_added(
    pg_dsn: str, tmp_path: Path
) -> None:
    await execute(pg_dsn, OUTBOX_SCHEMA)
    await execute(pg_dsn, "INSERT INTO job_outbox (key) VALUES ('the host''s own row')")

    run = await reaper_cli(pg_dsn, tmp_path, "db", "migrate", "--outbox")

    assert run.code == 0, run
    ran = [line for line in run.out.splitlines() if ": ran " in line]
    assert len(ran) == 1 and "job_outbox_unsent_idx" in ran[0], run.out
    assert await fetchval(pg_dsn, "SELECT count(*) FROM job_outbox") == 1
