"""The lease reap a page at a time, on real PostgreSQL: a pass over a few thousand expired
leases in several pages moves each lease once with exactly one event, keeps every stream
gapless beside events a host wrote first, and its streamed JSON report lists every verdict;
a page read stops at the page's end however few leases the planner expects."""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta
from typing import Any
from unittest.mock import ANY

import asyncpg
import pytest

from reaper.config import load_config
from reaper.edges.report import render_text, to_json, write_json
from reaper.jobqueue.lease_reap import statement
from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import QUERIES
from reaper.reap.context import Mode
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources
from tests.support.lease_rulings import lease_rulings
from tests.support.store import insert_expired_leases

pytestmark = [pytest.mark.postgres]

LEASES = 3000
POISON_EVERY = 10
PROJECTS = 7

HOST_EVENT = """
INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
VALUES ($1, $2, 'HostWrote', '{}'::jsonb, repeat('0', 64), true, now())
"""


def project(n: int) -> uuid.UUID:
    return uuid.UUID(f"00000000-0000-4000-8000-{n:012x}")


async def test_a_paged_pass_moves_each_lease_once_with_one_event_and_lists_every_verdict(
    pg_dsn: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        now = await conn.fetchval("SELECT clock_timestamp()")
        await insert_expired_leases(
            conn, LEASES, PROJECTS, now - timedelta(seconds=5), poison_every=POISON_EVERY
        )
        for n in range(3):  # a host writer got to project 0's stream first
            await conn.execute(HOST_EVENT, project(0), n + 1)
        settings = load_config(None, {"REAPER_DATABASE__DSN": pg_dsn}).settings
        result = await run_pass(settings, Sources(store=store, broker=None), mode=Mode.LEASES_ONLY)

        out = io.StringIO()
        await write_json(result, out)  # the moves read back from the ledger, streamed
        report = json.loads(out.getvalue())
        counted = to_json(result)  # the same report, the moves counted and not listed
        assert counted == {**report, "verdicts": [], "lease_reap": ANY}
        assert report["lease_reap"] == {**counted["lease_reap"], "listed": True}  # type: ignore[dict-item]
        assert report["lease_reap"]["moved"] == LEASES and report["lease_reap"]["recorded"]
        verdicts = report["verdicts"]
        assert len(verdicts) == LEASES == len({v["object"] for v in verdicts})
        assert all(v["recorded"] for v in verdicts)
        poison = [v for v in verdicts if v["condition"] == "poison"]
        assert len(poison) == LEASES // POISON_EVERY
        assert all(v["action"] == "park" for v in poison)
        assert {v["action"] for v in verdicts if v["condition"] == "lease_expired"} == {"requeue"}
        assert result.ok, result.problems()

        still_leased = await conn.fetchval("SELECT count(*) FROM job WHERE state = 'leased'")
        assert still_leased == 0
        events = await conn.fetch(
            "SELECT project_id, seq, payload ->> 'object' AS object FROM event "
            "WHERE kind = 'QueueReaped' ORDER BY project_id, seq"
        )
        assert len(events) == LEASES  # one event per move
        assert sorted(e["object"] for e in events) == sorted(v["object"] for v in verdicts)
        streams = await conn.fetch(
            "SELECT project_id, array_agg(seq ORDER BY seq) AS seqs FROM event GROUP BY 1"
        )
        assert len(streams) == PROJECTS
        for s in streams:  # gapless, the host's three first on project 0
            assert s["seqs"] == list(range(1, len(s["seqs"]) + 1))
        host = await conn.fetchval("SELECT count(*) FROM event WHERE kind = 'HostWrote'")
        assert host == 3

        text = render_text(result)
        assert f"requeue  lease_expired {LEASES - len(poison)} job(s) in {PROJECTS}" in text
        # the rest are pointed at where they are, the ledger, never at a new pass
        assert "more not listed here; each is a QueueReaped event in the ledger: " in text
        assert "reaper reap --json" not in text
        assert len(text.splitlines()) < 40  # summarised, not one line per move
    finally:
        await conn.close()


#: A job table as a host's stands: most jobs finished (no lease, no expiry), a few leased.
SKEWED = """
INSERT INTO job (id, project_id, kind, phase, state, run_after, attempts, max_attempts,
                 lease_owner, lease_expires_at, finished_at, created_at, updated_at)
SELECT gen_random_uuid(), $3::uuid, 'build', 'build',
       CASE WHEN g % $2 = 0 THEN 'leased' ELSE 'succeeded' END,
       $4::timestamptz - interval '2 hours', 1, 7,
       CASE WHEN g % $2 = 0 THEN 'worker' END,
       CASE WHEN g % $2 = 0 THEN $4::timestamptz - (g % 3600 + 1) * interval '1 second' END,
       CASE WHEN g % $2 = 0 THEN NULL ELSE $4::timestamptz - interval '1 hour' END,
       $4::timestamptz - interval '1 day', $4::timestamptz - interval '1 day'
FROM generate_series(1, $1::int) AS g
"""


def _scans(plan: dict[str, Any]) -> list[tuple[str, str, int]]:
    """Each node of an EXPLAIN (ANALYZE, FORMAT JSON) plan: its type, index and actual rows."""
    nodes = [(plan["Node Type"], plan.get("Index Name", ""), plan["Actual Rows"])]
    for child in plan.get("Plans", []):
        nodes += _scans(child)
    return nodes


async def test_a_page_read_walks_the_index_to_the_pages_end_not_through_every_lease_left(
    pg_dsn: str, store: PostgresStore
) -> None:
    """2,000 leased among 40,000 jobs, read from halfway: the planner, which takes the leased
    rows and the rows with an expiry for independent sets, expects a handful of rows past the
    key, and left to itself fetches all 1,000 left and sorts them for a page of 100 (on a
    mass expiry, every page read the rest of the set again). The page read walks the
    leased-expiry index and stops at the page's end, and reads the same page."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        now = await conn.fetchval("SELECT clock_timestamp()")
        await conn.execute(SKEWED, 40_000, 20, project(1), now)
        await conn.execute("ANALYZE job")
        key = await conn.fetchrow(
            "SELECT lease_expires_at, id FROM job WHERE state = 'leased' "
            "ORDER BY lease_expires_at, id OFFSET 999 LIMIT 1"
        )
        after = (key["lease_expires_at"], key["id"])
        args = (now, 0, *after, None, 0, 1, 100, json.dumps(["retry", "cancel"]))
        plans = {}
        for walk in (False, True):
            tx = conn.transaction()  # the batch moves what it picks: rolled back
            await tx.start()
            if walk:
                await conn.execute(QUERIES["walk_leased_expiry_index"])
            text = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + statement("reap_lease_batch"), *args
            )
            await tx.rollback()
            plans[walk] = _scans(json.loads(text)[0]["Plan"])
        # why the walk is asked for (if a PostgreSQL plans this well, the walk is not needed)
        assert ("Bitmap Heap Scan", "", 1000) in plans[False], plans[False]
        assert ("Index Scan", "job_leased_expiry_idx", 100) in plans[True], plans[True]
        assert not [n for n in plans[True] if n[0].startswith("Bitmap")], plans[True]
        ruled = await lease_rulings(store.database, now, 0, after, 100)
        expected = await conn.fetch(
            "SELECT id FROM job WHERE state = 'leased' AND (lease_expires_at, id) > ($1, $2) "
            "ORDER BY lease_expires_at, id LIMIT 100",
            key["lease_expires_at"],
            key["id"],
        )
        assert [r[0] for r in ruled] == [r["id"] for r in expected]
    finally:
        await conn.close()
