"""After a fleet crash, on real PostgreSQL: one pass requeues every expired lease, more than
the old per-pass cap of 20,000; a pass whose time budget is spent says how many it left, and
the next turn (any worker's, or serve's) comes at once and takes them; two reapers paging
through the same expired leases at once move each exactly once, with one event each."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta

import asyncpg
import pytest

import reaper.jobqueue.lease_reap as lease_reap
from reaper.config import Settings, load_config
from reaper.edges.hook import TURN, QueueReaper
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.context import Mode
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources
from tests.support.lease_moves import every_verdict
from tests.support.store import insert_expired_leases

pytestmark = [pytest.mark.postgres]

#: One more than the per-pass cap there was.
OLD_CAP = 20_000
PROJECTS = 5

#: Every job with its number of QueueReaped events about it, and each stream's numbers.
TALLY = """
SELECT (SELECT count(*) FROM job WHERE state = 'leased') AS leased,
       (SELECT count(*) FROM event WHERE kind = 'QueueReaped') AS events,
       (SELECT count(DISTINCT payload ->> 'object') FROM event WHERE kind = 'QueueReaped')
           AS objects,
       (SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY project_id
                                                             ORDER BY seq) AS place
                              FROM event) AS e WHERE seq <> place) AS out_of_place
"""


async def seeded(dsn: str, leases: int) -> datetime:
    conn = await asyncpg.connect(dsn)
    try:
        now: datetime = await conn.fetchval("SELECT clock_timestamp()")
        await insert_expired_leases(conn, leases, PROJECTS, now - timedelta(seconds=5))
        await conn.execute("ANALYZE job")
        return now
    finally:
        await conn.close()


async def tally(dsn: str) -> asyncpg.Record:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchrow(TALLY)
    finally:
        await conn.close()


def settings_for(dsn: str, **reap: str) -> Settings:
    environ = {"REAPER_DATABASE__DSN": dsn}
    environ |= {f"REAPER_QUEUE__REAP__{key.upper()}": value for key, value in reap.items()}
    return load_config(None, environ).settings


async def test_one_pass_requeues_more_than_the_old_cap_each_with_its_event(
    pg_dsn: str, store: PostgresStore
) -> None:
    leases = OLD_CAP + 1
    await seeded(pg_dsn, leases)
    result = await run_pass(
        settings_for(pg_dsn), Sources(store=store, broker=None), mode=Mode.LEASES_ONLY
    )

    assert result.ok, result.problems()
    assert result.leases.remaining == 0
    assert not [n for n in result.notes if "expired lease(s) left" in n]
    verdicts = await every_verdict(result)  # the moves read back from the ledger
    assert len(verdicts) == leases == result.verdict_count
    assert len({r.verdict.object for r in verdicts if r.recorded}) == leases
    after = await tally(pg_dsn)
    assert (after["leased"], after["events"], after["objects"]) == (0, leases, leases)
    assert after["out_of_place"] == 0


async def test_a_spent_budget_reports_what_is_left_and_the_next_turn_takes_it_at_once(
    pg_dsn: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_reap, "BATCH_FIRST", 100)
    monkeypatch.setattr(lease_reap, "LANES", 1)
    await seeded(pg_dsn, 350)
    # a budget no batch fits in: each pass moves one batch, then stops and counts the rest
    settings = settings_for(pg_dsn, lease_reap_budget_seconds="0.001", enabled="false")

    async def connect(_: Settings) -> Sources:
        return Sources(store=await PostgresStore.connect(pg_dsn))  # closed after its pass

    fleet = [QueueReaper(settings, holder=f"worker-{n}", connect=connect) for n in range(2)]
    remaining: list[int] = []
    notes: list[str] = []
    for n in range(4):  # the workers in turn, each asking as soon as it is due
        worker = fleet[n % 2]
        assert worker.is_due()
        run = await worker.run_if_due()
        assert run.ran and run.result is not None, run
        assert run.result.ok, run.result.problems()
        remaining.append(run.result.leases.remaining)
        notes += [note for note in run.result.notes if "expired lease(s) left" in note]
    assert remaining == [250, 150, 50, 0]
    assert notes == [
        f"{left} more expired lease(s) left when the lease reap's budget of 0.001 s was spent: "
        "the next turn comes at once and takes them"
        for left in (250, 150, 50)
    ]
    after = await tally(pg_dsn)
    assert (after["leased"], after["events"], after["objects"]) == (0, 350, 350)
    assert after["out_of_place"] == 0
    # the last pass left nothing: the turn is held for the interval again
    turn = await store.take_turn(TURN, settings.queue.reap.interval_seconds, "worker-9")
    assert not turn.mine and turn.taken_by == "worker-1"
    assert not fleet[1].is_due()
    lost = await fleet[0].run_if_due()  # due since its own pass left leases, it finds it held
    assert lost.due and not lost.ran and lost.turn is not None and not lost.turn.mine


async def test_two_reapers_paging_at_once_move_each_lease_once(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases = 4000
    await seeded(pg_dsn, leases)
    settings = settings_for(pg_dsn)
    stores = [await PostgresStore.connect(pg_dsn) for _ in range(2)]
    try:
        results = await asyncio.gather(
            *(
                run_pass(settings, Sources(store=s, broker=None), mode=Mode.LEASES_ONLY)
                for s in stores
            )
        )
        read_back = [await every_verdict(result) for result in results]  # each its own moves
    finally:
        for s in stores:
            await s.close()
    moved = [{r.verdict.object for r in verdicts if r.recorded} for verdicts in read_back]
    assert [len(m) for m in moved] == [r.leases.listing.reap.moved for r in results]
    assert all(result.ok for result in results), [r.problems() for r in results]
    assert not moved[0] & moved[1], "a lease moved by both reapers"
    assert len(moved[0] | moved[1]) == leases
    after = await tally(pg_dsn)
    assert (after["leased"], after["events"], after["objects"]) == (0, leases, leases)
    assert after["out_of_place"] == 0
    assert uuid.UUID(next(iter(moved[0] | moved[1])))  # the objects are the jobs' ids
