"""Gates: a delivery_exhausted answer re-readies its job for one more delivery, in the same
transaction as the answer; answering twice, an unknown gate or an invalid choice is refused."""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg
import pytest

from reaper.core.moments import utc
from reaper.core.records import Gate
from reaper.errors import GateError, StoreUnavailable
from reaper.jobqueue.postgres import PostgresStore
from tests.support.store import NOW, fetch_job, insert_jobs, leased, reap_page

pytestmark = pytest.mark.postgres

LATER = NOW + timedelta(minutes=10)


async def _parked(pg_dsn: str, store: PostgresStore) -> tuple[uuid.UUID, Gate]:
    job = leased(uuid.uuid4(), attempts=7, max_attempts=7)
    await insert_jobs(pg_dsn, [job])
    outcome = await reap_page(store)
    assert outcome.parked == (job.id,)
    [gate] = await store.list_gates()
    return job.id, gate


async def test_answering_re_readies_the_job_for_exactly_one_more_delivery(
    pg_dsn: str, store: PostgresStore
) -> None:
    job_id, gate = await _parked(pg_dsn, store)
    assert gate.is_open and gate.answered_by is None

    answered = await store.answer_gate(gate.id, "retry", LATER, answered_by="operator:ana")

    assert (answered.answer, answered.answered_at, answered.answered_by) == (
        "retry",
        LATER,
        "operator:ana",
    )
    row = await fetch_job(pg_dsn, job_id)
    assert (row["state"], row["run_after"], row["updated_at"]) == ("ready", LATER, LATER)
    assert row["max_attempts"] - row["attempts"] == 1  # the claim spends it: one delivery
    assert await store.list_gates() == []
    assert await store.list_gates(open_only=False) == [answered]
    assert await store.list_gates(open_only=False, kind="bus_dead_lettered") == []


async def test_answering_twice_is_refused_with_when_and_what(
    pg_dsn: str, store: PostgresStore
) -> None:
    _, gate = await _parked(pg_dsn, store)
    await store.answer_gate(gate.id, "retry", LATER)
    with pytest.raises(GateError) as caught:
        await store.answer_gate(gate.id, "retry", LATER + timedelta(minutes=1))
    message = str(caught.value)
    assert f"gate {gate.id} was already answered at {utc(LATER)} with 'retry'" == message


async def test_unknown_gates_and_invalid_choices_are_refused(
    pg_dsn: str, store: PostgresStore
) -> None:
    job_id, gate = await _parked(pg_dsn, store)
    missing = uuid.uuid4()
    with pytest.raises(GateError, match=f"gate {missing} does not exist"):
        await store.answer_gate(missing, "retry", LATER)
    with pytest.raises(GateError, match=r"'replay' is not an answer .* choose 'retry'"):
        await store.answer_gate(gate.id, "replay", LATER)
    assert (await fetch_job(pg_dsn, job_id))["state"] == "awaiting_human"
    assert (await store.list_gates())[0].is_open


async def test_the_answer_and_the_move_commit_together(pg_dsn: str, store: PostgresStore) -> None:
    job_id, gate = await _parked(pg_dsn, store)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            """
            CREATE FUNCTION no_ready() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'the job table refuses'; END $$;
            CREATE TRIGGER no_ready BEFORE UPDATE ON job FOR EACH ROW
                EXECUTE FUNCTION no_ready();
            """
        )
        with pytest.raises(StoreUnavailable, match="the job table refuses"):
            await store.answer_gate(gate.id, "retry", LATER)
        assert (await store.list_gates())[0].is_open  # the answer rolled back with the move
        await conn.execute("DROP TRIGGER no_ready ON job")
    finally:
        await conn.close()
    await store.answer_gate(gate.id, "retry", LATER)
    assert (await fetch_job(pg_dsn, job_id))["state"] == "ready"


async def test_a_job_no_longer_parked_is_left_as_it_is(pg_dsn: str, store: PostgresStore) -> None:
    job_id, gate = await _parked(pg_dsn, store)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("UPDATE job SET state = 'cancelled' WHERE id = $1", job_id)
    finally:
        await conn.close()
    answered = await store.answer_gate(gate.id, "retry", LATER)
    assert answered.answer == "retry"
    assert (await fetch_job(pg_dsn, job_id))["state"] == "cancelled"


async def test_a_kind_without_an_answer_here_is_refused(pg_dsn: str, store: PostgresStore) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        gate_id = await conn.fetchval(
            "INSERT INTO human_gate (project_id, kind, prompt, choices)"
            " VALUES ($1, 'something_else', 'why?', '[\"ok\"]') RETURNING id",
            uuid.uuid4(),
        )
    finally:
        await conn.close()
    with pytest.raises(GateError, match="something_else gate: this store cannot answer it"):
        await store.answer_gate(gate_id, "ok", LATER)
