"""One definition of a sighting's scope: ``reaper.core.domain.sighting_scope`` and the SQL
function the ledger's queries use, ``reaper_sighting_scope_v2`` (migration 0008), give the same
answer for every shape of record; 0003's ``reaper_sighting_scope`` still gives the old one for
every record with no bucket."""

from __future__ import annotations

import json
from uuid import UUID

import asyncpg
import pytest

from reaper.core.domain import FLEET_PROJECT_ID, Source, sighting_scope

pytestmark = [pytest.mark.postgres]

PROJECT = UUID("00000000-0000-0000-0000-00000000002a")

CASES = [
    (Source.BROKER, FLEET_PROJECT_ID, "vibey.jobs.dead", "vibey.jobs.dead", None),
    (Source.BROKER, FLEET_PROJECT_ID, "vibey.jobs.dead", "vibey.jobs.dead", 1),
    (Source.BROKER, FLEET_PROJECT_ID, "celery.dead", "celery.dead", 1000),
    (Source.BROKER, FLEET_PROJECT_ID, None, "vibey.q#odd name", None),
    (Source.BROKER, FLEET_PROJECT_ID, "", "vibey.q", 10),
    (Source.JOB_QUEUE, PROJECT, None, "7d0c2a56-0000-0000-0000-000000000001", None),
]


async def test_the_sql_scope_is_the_python_scope(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        for source, stream, queue, object_, bucket in CASES:
            payload: dict[str, object] = {"source": source.value, "queue": queue, "object": object_}
            if bucket is not None:
                payload["bucket"] = bucket
            v2, v1 = await conn.fetchrow(
                "SELECT reaper_sighting_scope_v2($1::uuid, $2::jsonb), "
                "reaper_sighting_scope($1::uuid, $2::jsonb)",
                stream,
                json.dumps(payload),
            )
            assert v2 == sighting_scope(source, stream, queue, object_, bucket), payload
            if bucket is None:
                assert v1 == v2, payload
    finally:
        await conn.close()
