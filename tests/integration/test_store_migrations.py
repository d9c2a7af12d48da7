"""Migrations: ordered, idempotent, safe when run concurrently, over an existing host schema;
and the ledger is append-only in the database itself."""

from __future__ import annotations

import asyncio
import re
import uuid
from importlib import resources

import asyncpg
import pytest

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import FLEET_PROJECT_ID
from reaper.errors import StoreUnavailable
from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import QUERIES, load_queries
from reaper.schema.migrations import migrate
from reaper.schema.sql import migrations

pytestmark = pytest.mark.postgres

ALL = [name for name, _ in migrations()]


async def test_migrations_apply_in_order_then_nothing(pg_empty_dsn: str) -> None:
    store = await PostgresStore.connect(pg_empty_dsn)
    try:
        assert list((await migrate(store.database)).applied) == ALL
        assert list((await migrate(store.database)).applied) == []
    finally:
        await store.close()
    assert sorted(ALL) == ALL
    assert ALL[0].startswith("0001_")


async def test_concurrent_migrators_take_turns(pg_empty_dsn: str) -> None:
    stores = [await PostgresStore.connect(pg_empty_dsn) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(s.database) for s in stores))
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    applied = [name for result in results for name in result.applied]
    assert sorted(applied) == ALL  # each migration applied exactly once, by one of them
    conn = await asyncpg.connect(pg_empty_dsn)
    try:
        rows = await conn.fetch("SELECT name FROM reaper_migration ORDER BY name")
    finally:
        await conn.close()
    assert [r["name"] for r in rows] == ALL


async def test_migrations_adopt_an_existing_host_installation(pg_empty_dsn: str) -> None:
    """The host already has job, human_gate and an event stream with history."""
    project = uuid.uuid4()
    conn = await asyncpg.connect(pg_empty_dsn)
    try:
        await conn.execute(
            """
            CREATE TABLE job (
                id uuid PRIMARY KEY, project_id uuid NOT NULL, kind text NOT NULL,
                state text NOT NULL, priority int NOT NULL DEFAULT 0,
                run_after timestamptz NOT NULL DEFAULT now(), attempts int NOT NULL DEFAULT 0,
                lease_owner text, lease_expires_at timestamptz, idempotency_key text,
                created_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now());
            CREATE TABLE event (
                project_id uuid NOT NULL, seq bigint NOT NULL, kind text NOT NULL,
                payload jsonb NOT NULL, digest text NOT NULL, trusted boolean NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (project_id, seq));
            """
        )
        payload = canonical_json({"hello": "world"})
        for seq in (1, 2, 3):
            await conn.execute(
                "INSERT INTO event VALUES ($1, $2, 'Other', $3::jsonb, $4, true)",
                project,
                seq,
                payload,
                digest_of(payload),
            )
    finally:
        await conn.close()

    store = await PostgresStore.connect(pg_empty_dsn)
    try:
        assert list((await migrate(store.database)).applied) == ALL
    finally:
        await store.close()
    conn = await asyncpg.connect(pg_empty_dsn)
    try:
        columns = {
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'job'"
            )
        }
        streams = dict(await conn.fetch("SELECT project_id, last_seq FROM ledger_stream"))
    finally:
        await conn.close()
    assert {"max_attempts", "finished_at", "phase"} <= columns
    assert streams[project] == 3  # the next event of that stream is seq 4
    assert streams[FLEET_PROJECT_ID] == 0


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE event SET trusted = false",
        "DELETE FROM event",
        "TRUNCATE event",
    ],
)
async def test_the_database_refuses_to_change_the_ledger(pg_dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        payload = canonical_json({"object": "x"})
        await conn.execute(
            "INSERT INTO event (project_id, seq, kind, payload, digest, trusted)"
            " VALUES ($1, 1, 'QueueReaped', $2::jsonb, $3, true)",
            uuid.uuid4(),
            payload,
            digest_of(payload),
        )
        with pytest.raises(asyncpg.PostgresError, match="append-only"):
            await conn.execute(statement)
        assert await conn.fetchval("SELECT count(*) FROM event") == 1
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("package", "files", "queries"),
    [
        ("reaper.jobqueue.sql", ("queries.sql", "lease_reap.sql"), QUERIES),
    ],
)
def test_every_query_is_named_and_described(
    package: str, files: tuple[str, ...], queries: dict[str, str]
) -> None:
    text = "".join(resources.files(package).joinpath(f).read_text() for f in files)
    for name, sql in queries.items():
        assert sql.startswith("--"), f"{name} has no description line"
        assert "now()" not in sql.lower().replace("default now()", ""), name
    assert len(re.findall(r"^-- name: ", text, re.MULTILINE)) == len(queries)


def test_no_query_is_named_in_two_files() -> None:
    files = ("queries.sql", "lease_reap.sql")
    names = [set(load_queries(filename=f)) for f in files]
    assert sum(len(n) for n in names) == len(set().union(*names)) == len(QUERIES)


async def test_an_unreachable_database_is_a_scrubbed_store_unavailable() -> None:
    dsn = "postgresql://postgres:s3cret-pw@127.0.0.1:1/nowhere"
    with pytest.raises(StoreUnavailable) as caught:
        await PostgresStore.connect(dsn)
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert "127.0.0.1:1/nowhere" in message
    assert "\n" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


async def test_a_missing_database_says_so(pg_empty_dsn: str) -> None:
    dsn = pg_empty_dsn.rsplit("/", 1)[0] + "/qr_does_not_exist"
    with pytest.raises(StoreUnavailable, match="does not exist"):
        await PostgresStore.connect(dsn)


async def test_an_unmigrated_database_asks_for_a_migration(pg_empty_dsn: str) -> None:
    store = await PostgresStore.connect(pg_empty_dsn)
    try:
        with pytest.raises(StoreUnavailable, match="reaper db migrate"):
            await store.list_gates()
    finally:
        await store.close()
