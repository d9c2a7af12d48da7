"""The lease reap's SQL is the pure lease judge's twin (reaper/jobqueue/sql/lease_reap.sql):
drawn leases (no owner; owners and kinds with quotes, backslashes, control characters,
non-ASCII; expiries at and around the grace at sub-millisecond steps; attempts at, under and
over the limit) get the same ruling from the statement as from ``judge_lease_page``, and every
event it writes carries the canonical JSON of the judge's verdict, byte for byte (its digest is
``digest_of`` of it), as does the read-only query a dry run asks."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import Dispatch, HeldLease, Thresholds
from reaper.core.judge_leases import judge_lease_page
from reaper.core.sightings import verdict_from_record
from reaper.jobqueue.lease_reap import FIRST_KEY, statement
from reaper.jobqueue.rules import park_identity, park_prompt
from reaper.jobqueue.sql import QUERIES, load_queries
from tests.support.store import NOW, Job, insert_jobs

pytestmark = pytest.mark.postgres

OUTBOX_SCHEMA = load_queries("reaper.schema.sql", "outbox/outbox_dispatch.sql")

# PostgreSQL's text holds neither NUL nor a lone surrogate; everything else is drawn, with the
# characters quoting has to get right drawn often.
_char = st.one_of(
    st.sampled_from(['"', "'", "\\", "\n", "\t", "\x01", "\x1f", "\x7f", "é", "…", "😀", "\u2028"]),
    st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
)
_name = st.text(_char, min_size=1, max_size=12) | st.integers(199, 202).flatmap(
    lambda n: st.text(_char, min_size=n, max_size=n)  # around where a holder's name is cut
)


@st.composite
def _lease(draw: st.DrawFn, grace: int) -> HeldLease:
    limit = draw(st.integers(1, 5))
    # around the grace's boundary at sub-millisecond steps, or well past it
    past_us = draw(
        st.integers(grace * 1_000_000 - 2_500, grace * 1_000_000 + 2_500) | st.integers(0, 10**12)
    )
    return HeldLease(
        uuid.uuid4(),
        draw(st.sampled_from(_PROJECTS)),
        draw(_name),
        draw(st.none() | _name),
        NOW - timedelta(microseconds=past_us),
        draw(st.integers(max(0, limit - 2), limit + 1)),
        limit,
    )


_PROJECTS = [uuid.UUID(int=1), uuid.UUID(int=2), uuid.uuid4()]


@st.composite
def _page(draw: st.DrawFn) -> tuple[int, list[HeldLease]]:
    grace = draw(st.sampled_from([0, 1, 30]))
    return grace, draw(st.lists(_lease(grace), min_size=1, max_size=8))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(drawn=_page(), outbox=st.booleans())
def test_the_statement_rules_and_records_as_the_judge_does(
    pg_dsn: str, drawn: tuple[int, list[HeldLease]], outbox: bool
) -> None:
    grace, leases = drawn
    asyncio.run(_check(pg_dsn, grace, leases, outbox))


async def _check(dsn: str, grace: int, leases: list[HeldLease], outbox: bool) -> None:
    leases.sort(key=lambda lease: (lease.lease_expires_at, lease.job_id))
    ruled = judge_lease_page(leases, Thresholds(lease_grace_seconds=grace), NOW)
    verdicts = {v.lease.job_id: v for v in ruled if v.lease}
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            if outbox:  # the outbox schema's table and column (but its index, built online)
                for name in ("add_job_dispatch_seq", "create_job_outbox"):
                    await conn.execute(OUTBOX_SCHEMA[name])
            await insert_jobs(conn, [_job(lease) for lease in leases])
            await _dry_run_agrees(conn, grace, verdicts, leases)
            await _moves_agree(conn, grace, verdicts, leases, outbox)
            raise _RolledBack
    except _RolledBack:
        pass
    finally:
        await conn.close()


class _RolledBack(Exception):
    """Every example leaves the database as it found it."""


def _job(lease: HeldLease) -> Job:
    return Job(
        id=lease.job_id,
        project_id=lease.project_id,
        state="leased",
        kind=lease.kind,
        attempts=lease.attempts,
        max_attempts=lease.max_attempts,
        lease_owner=lease.lease_owner,
        lease_expires_at=lease.lease_expires_at,
    )


async def _dry_run_agrees(
    conn: asyncpg.Connection, grace: int, verdicts: dict, leases: list[HeldLease]
) -> None:
    rows = await conn.fetch(
        statement("lease_rulings"), NOW, grace, *FIRST_KEY, None, 0, 1, len(leases)
    )
    assert [r["id"] for r in rows] == list(verdicts)  # the same leases ruled, in key order
    # a quiet pass's question: any lease at all, exactly when the judge rules on one
    probe = statement("any_expired_lease")
    assert await conn.fetchval(probe, NOW, grace, *FIRST_KEY, None, 0, 1, 1) is bool(verdicts)
    by_id = {lease.job_id: lease for lease in leases}
    for row in rows:
        verdict = verdicts[row["id"]]
        expected = canonical_json(verdict.payload())
        assert row["payload"] == expected
        assert row["digest"] == digest_of(expected)
        assert row["poison"] is (verdict.condition == "poison")
        if row["poison"]:  # a park's gate; a requeue raises none
            assert row["identity"] == park_identity(by_id[row["id"]])
            assert row["prompt"] == park_prompt(by_id[row["id"]])
        else:
            assert row["identity"] is None and row["prompt"] is None


async def _moves_agree(
    conn: asyncpg.Connection, grace: int, verdicts: dict, leases: list[HeldLease], outbox: bool
) -> None:
    choices = json.dumps(["retry", "cancel"])
    dispatch = Dispatch.OUTBOX if outbox else Dispatch.POLLING
    row = await conn.fetchrow(
        statement("reap_lease_batch", dispatch), NOW, grace, *FIRST_KEY,
        None, 0, 1, len(leases), choices,
    )  # fmt: skip
    assert row["picked"] == len(verdicts)
    if verdicts:
        assert row["payloads"] is None  # no host writer here: every event written
        assert sum(row["moves"]) == len(verdicts)
    events = await conn.fetch("SELECT project_id, seq, payload, digest FROM event ORDER BY 1, 2")
    by_stream: dict[uuid.UUID, list[int]] = {}
    for event in events:
        payload = json.loads(event["payload"])
        verdict = verdicts[uuid.UUID(payload["object"])]
        assert event["digest"] == digest_of(canonical_json(verdict.payload()))
        assert payload == verdict.payload()
        by_stream.setdefault(event["project_id"], []).append(event["seq"])
    assert len(events) == len(verdicts)
    assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in by_stream.values())
    await _read_back_agrees(conn, row, verdicts, by_stream)
    jobs = {r["id"]: r for r in await conn.fetch("SELECT * FROM job")}
    gates = {r["job_id"]: r for r in await conn.fetch("SELECT * FROM human_gate")}
    for lease in leases:
        job, verdict = jobs[lease.job_id], verdicts.get(lease.job_id)
        if verdict is None:
            assert job["state"] == "leased"
        elif verdict.condition == "poison":
            assert (job["state"], job["attempts"]) == ("awaiting_human", max(0, lease.attempts - 1))
            assert gates[lease.job_id]["identity"] == park_identity(lease)
        else:
            assert (job["state"], job["run_after"]) == ("ready", NOW)
            assert job["lease_owner"] is None
            if outbox:
                assert job["dispatch_seq"] == 1
    if outbox:
        keys = {r["key"] for r in await conn.fetch("SELECT key FROM job_outbox")}
        requeued = [j for j, v in verdicts.items() if v.condition != "poison"]
        assert keys == {f"dispatch:{j}:1" for j in requeued}


async def _read_back_agrees(
    conn: asyncpg.Connection, row: asyncpg.Record, verdicts: dict, by_stream: dict
) -> None:
    """The runs of numbers the batch returns name exactly its events, and reading them back
    gives every verdict, its payload byte for byte the judge's canonical JSON."""
    columns = [list(row[c] or ()) for c in ("run_streams", "run_firsts", "run_lasts")]
    runs = list(zip(*columns, strict=True))
    named = {(s, n) for s, first, last in runs for n in range(first, last + 1)}
    assert named == {(s, n) for s, seqs in by_stream.items() for n in seqs}
    read = [
        (stream, event)
        for stream, first, last in runs
        for event in await conn.fetch(QUERIES["reaped_events"], stream, first, last)
    ]
    assert len(read) == len(verdicts)
    for stream, event in read:
        back = verdict_from_record(stream, json.loads(event["payload"]), True)
        verdict = verdicts[uuid.UUID(back.object)]
        assert canonical_json(back.payload()) == canonical_json(verdict.payload())
        assert back.project_id == verdict.project_id and event["trusted"]


def test_a_lease_at_the_grace_is_not_ruled_and_one_microsecond_past_it_is() -> None:
    """The boundary the property draws around, pinned: the judge rounds up to the millisecond,
    so a microsecond past the grace is past it; exactly at it is not."""
    grace = 30
    at = HeldLease(uuid.uuid4(), _PROJECTS[0], "k", None, NOW - timedelta(seconds=grace), 1, 3)
    past = HeldLease(
        uuid.uuid4(), _PROJECTS[0], "k", None, NOW - timedelta(seconds=grace, microseconds=1), 1, 3
    )
    [ruled] = judge_lease_page([at, past], Thresholds(lease_grace_seconds=grace), NOW)
    assert ruled.lease == past
    assert ruled.measured == 30.001
