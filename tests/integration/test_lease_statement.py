"""The lease reap's statement is the lease judge's twin: on any leases, ``reap_leases`` rules
as :func:`~reaper.core.judge_leases.judge_lease_page` does, and writes each move's event with
the payload :mod:`reaper.core.canonical` would write, byte for byte (its digest is the sha256 of
the very bytes PostgreSQL built), the gate a park raises as the pure rules word it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import Dispatch, Thresholds
from reaper.core.judge_leases import LeaseColumns, LeaseRulings, judge_lease_page
from reaper.jobqueue.lease_reap import reap_lease_batch, reap_statement
from reaper.jobqueue.rules import park_identity, park_prompt
from tests.support.store import NOW, Job, insert_jobs

pytestmark = pytest.mark.postgres

PROJECTS = (uuid.UUID(int=1), uuid.UUID(int=2))

#: Quotes, backslashes, every C0 control but NUL (which no text column holds), DEL, C1
#: controls, bidi controls, non-ASCII letters and symbols, astral characters.
_ALPHABET = st.one_of(
    st.sampled_from("\"'\\\x01\x07\x08\t\n\x0b\x0c\r\x1b\x1f\x7f\x80\x85\x9f\u00a0\u00ad"),
    st.sampled_from("\u2028\u202a\u202e\u2066\u2069\ufeffé中🙂𝄞…"),
    st.characters(min_codepoint=1, max_codepoint=0x10FFFF, exclude_categories=("Cs",)),
)
_NAME = st.one_of(st.text(_ALPHABET, max_size=12), st.text(_ALPHABET, min_size=195, max_size=205))


@dataclass(frozen=True)
class Drawn:
    project: uuid.UUID
    kind: str
    owner: str | None
    #: Microseconds before ``now - grace``: around the boundary, either side.
    offset_us: int
    attempts: int
    max_attempts: int


_LEASE = st.builds(
    Drawn,
    project=st.sampled_from(PROJECTS),
    kind=_NAME,
    owner=st.one_of(st.none(), _NAME),
    offset_us=st.one_of(
        st.integers(-2500, 2500),
        st.integers(-(10**9), 10**12),
        st.sampled_from([0, 1, 999, 1000, 1001]),
    ),
    attempts=st.integers(0, 6),
    max_attempts=st.integers(1, 5),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    drawn=st.lists(_LEASE, min_size=1, max_size=8),
    grace=st.sampled_from([0, 1, 30]),
    outbox=st.booleans(),
    now_us=st.integers(0, 999_999),
)
async def test_the_statement_rules_and_records_as_the_judge_does(
    pg_dsn: str, drawn: list[Drawn], grace: int, outbox: bool, now_us: int
) -> None:
    now = NOW.replace(microsecond=now_us)
    jobs = [
        Job(
            d.project,
            state="leased",
            kind=d.kind,
            lease_owner=d.owner,
            lease_expires_at=now - timedelta(seconds=grace, microseconds=d.offset_us),
            attempts=d.attempts,
            max_attempts=d.max_attempts,
        )
        for d in drawn
    ]
    jobs.sort(key=lambda j: (j.lease_expires_at or now, j.id))
    page = LeaseColumns.of_rows(
        [
            (
                j.id,
                j.project_id,
                j.kind,
                j.lease_owner,
                j.lease_expires_at,
                j.attempts,
                j.max_attempts,
            )
            for j in jobs
        ]
    )
    rulings = judge_lease_page(page, Thresholds(lease_grace_seconds=grace), now)
    conn = await asyncpg.connect(pg_dsn)
    try:
        async with conn.transaction():
            if outbox:
                await conn.execute(_OUTBOX_SCHEMA)
            await insert_jobs(conn, jobs)
            statement = reap_statement(Dispatch.OUTBOX if outbox else Dispatch.POLLING)
            row = await reap_lease_batch(conn, statement, now, grace, 100, PROJECTS, _FIRST)
            await _check(conn, page, rulings, row)
            if outbox:
                await _check_outbox(conn, page, rulings)
            raise _Rollback
    except _Rollback:
        pass
    finally:
        await conn.close()


class _Rollback(Exception):
    """Ends an example's transaction: the next starts from the same empty tables."""


_FIRST = (datetime(1, 1, 1, tzinfo=UTC), uuid.UUID(int=0))

#: The outbox dispatch schema's two parts the statement writes (as ``outbox_dispatch.sql``).
_OUTBOX_SCHEMA = """
ALTER TABLE job ADD COLUMN IF NOT EXISTS dispatch_seq bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS job_outbox (
    id bigserial PRIMARY KEY, key text UNIQUE, job_id uuid, project_id uuid, payload jsonb,
    not_before timestamptz, created_at timestamptz DEFAULT now(), sent_at timestamptz,
    claimed_at timestamptz)
"""


async def _check_outbox(
    conn: asyncpg.Connection, page: LeaseColumns, rulings: LeaseRulings
) -> None:
    """Each requeue started one dispatch episode: dispatch_seq 1, its one outbox row."""
    requeued = sorted(
        str(page.job_ids[i]) for k, i in enumerate(rulings.rows) if not rulings.poison[k]
    )
    keys = [r["key"] for r in await conn.fetch("SELECT key FROM job_outbox ORDER BY key")]
    assert keys == sorted(f"dispatch:{job}:1" for job in requeued)


async def _check(
    conn: asyncpg.Connection, page: LeaseColumns, rulings: LeaseRulings, row: Mapping[str, Any]
) -> None:
    # the index's filter and the judge's rule are one: what is picked is what is ruled on
    assert row["picked"] == row["ruled"] == len(rulings)
    events = {
        r["digest"]: r
        for r in await conn.fetch("SELECT project_id, seq, payload::text, digest FROM event")
    }
    assert len(events) == len(rulings)
    by_project: dict[uuid.UUID, list[int]] = {}
    for k in range(len(rulings)):
        verdict = rulings.verdict(page, k)
        expected = canonical_json(verdict.payload())
        event = events[digest_of(expected)]  # the digest of PostgreSQL's very bytes
        assert json.loads(event["payload"]) == verdict.payload()
        assert event["project_id"] == verdict.project_id
        by_project.setdefault(event["project_id"], []).append(event["seq"])
        lease = page.lease(rulings.rows[k])
        job = await conn.fetchrow(
            "SELECT state, attempts, lease_owner FROM job WHERE id = $1", lease.job_id
        )
        if rulings.poison[k]:
            assert (job["state"], job["attempts"]) == ("awaiting_human", max(lease.attempts - 1, 0))
            gate = await conn.fetchrow(
                "SELECT identity, prompt FROM human_gate WHERE job_id = $1", lease.job_id
            )
            assert (gate["identity"], gate["prompt"]) == (park_identity(lease), park_prompt(lease))
        else:
            assert (job["state"], job["lease_owner"]) == ("ready", None)
    for seqs in by_project.values():
        assert seqs == list(range(1, len(seqs) + 1))  # gapless, in the judge's order
    ruled = {page.job_ids[i] for i in rulings.rows}
    for i, job_id in enumerate(page.job_ids):
        if job_id not in ruled:
            state = await conn.fetchval("SELECT state FROM job WHERE id = $1", job_id)
            assert state == "leased", f"lease {i} is within its grace and must be left"
