"""The index of open sightings (migration 0009) on real PostgreSQL: built from the ledger by the
migration that creates it, on a ledger written before it existed, and what a pass reads to find
what is open touches that index alone, never the ledger's history."""

from __future__ import annotations

import json
import uuid

import pytest

from reaper.core.sightings import SightingsPass
from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import QUERIES
from reaper.schema.migrations import migrate
from tests.support.store import NOW
from tests.support.verdicts import BOTH, broker_finding, stale

pytestmark = pytest.mark.postgres


async def open_keys(store: PostgresStore) -> set[tuple[str, str, str]]:
    async with store.database.session("reading the index") as conn:
        rows = await conn.fetch("SELECT stream, payload::text AS payload FROM reaper_open_sighting")
    return {
        (
            str(r["stream"]),
            json.loads(r["payload"])["condition"],
            json.loads(r["payload"])["object"],
        )
        for r in rows
    }


async def test_the_migration_builds_the_index_from_a_ledger_written_before_it(
    pg_dsn: str,
) -> None:
    store = await PostgresStore.connect(pg_dsn, pool_size=1)
    try:
        project = uuid.uuid4()
        queues = [f"vibey.jobs.{n}" for n in range(3)]
        first = [stale(project), *(broker_finding(q) for q in queues)]
        await store.record_sightings(first, SightingsPass(now=NOW, sources_read=BOTH))
        # the second pass no longer sees queue 0: its sighting is closed
        await store.record_sightings(
            first[:1] + first[2:], SightingsPass(now=NOW, sources_read=BOTH)
        )
        expected = await open_keys(store)
        assert len(expected) == 3
        async with store.database.session("undoing 0009") as conn:
            await conn.execute("DROP TABLE reaper_open_sighting")
            await conn.execute("DELETE FROM reaper_migration WHERE name = '0009_open_sightings'")

        applied = list((await migrate(store.database)).applied)

        assert applied == ["0009_open_sightings"]
        assert await open_keys(store) == expected
    finally:
        await store.close()


async def test_finding_what_is_open_reads_the_index_not_the_ledger(pg_dsn: str) -> None:
    store = await PostgresStore.connect(pg_dsn, pool_size=1)
    try:
        async with store.database.session("explaining") as conn:
            plan = await conn.fetchval(
                "EXPLAIN (FORMAT JSON) " + QUERIES["open_sightings"],
                ["broker", "job_queue"],
                None,
            )
    finally:
        await store.close()
    relations = set()

    def walk(node: dict[str, object]) -> None:
        if isinstance(node.get("Relation Name"), str):
            relations.add(node["Relation Name"])
        for child in node.get("Plans", []):  # type: ignore[union-attr]
            walk(child)

    walk(json.loads(plan)[0]["Plan"])
    assert relations == {"reaper_open_sighting"}
