"""The job-queue contract where the host dispatches through RabbitMQ (SPEC §3, ADR-0044 §4, §8),
held by both ``PostgresStore`` and ``MemoryJobQueue``: every transition that makes a job ready
again starts a new dispatch episode (``dispatch_seq + 1`` and one outbox row, in the same
transaction), a park starts none, and a dead-lettered dispatch parks the job it points to only
while that job is still at the pointer's generation."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from reaper.core.dead_letters import DISPATCH_SCHEMA, DispatchPointer, dispatch_pointer
from reaper.core.domain import Action, DeadLetter, Dispatch
from reaper.jobqueue.port import ParkRules
from tests.contract.conftest import Subject
from tests.support.dead_letters import got_letter
from tests.support.dispatch import dispatch_body
from tests.support.store import NOW, Job, leased, reap_page

pytestmark = pytest.mark.postgres

RULES = ParkRules(
    depth=1, min_depth=1, owned_queue_pattern=r"^vibey\.", dead_letter_queue_pattern=r"\.dead$"
)


def pointer_letter(job: Job, generation: int, message_id: str = "d-1") -> DeadLetter:
    body = json.dumps(
        dispatch_body(DispatchPointer(job.id, job.project_id, generation, job.kind, NOW))
    )
    return got_letter(body, message_id, "delivery_limit")


def pointed(letter: DeadLetter) -> tuple[DeadLetter, DispatchPointer]:
    pointer = dispatch_pointer(letter)
    assert pointer is not None
    return letter, pointer


async def test_the_schema_says_which_dispatch(subject: Subject, outbox_subject: Subject) -> None:
    assert (await subject.store.database_facts()).outbox_schema is False
    assert (await outbox_subject.store.database_facts()).outbox_schema is True


async def test_a_requeue_starts_a_new_dispatch_episode_and_a_park_none(
    outbox_subject: Subject,
) -> None:
    project = uuid.uuid4()
    expired = replace(leased(project), dispatch_seq=3, kind="render.thumbnail")
    poison = replace(leased(project, attempts=7, max_attempts=7), dispatch_seq=5)
    await outbox_subject.add(expired, poison)
    store = outbox_subject.store

    moves = await reap_page(store, dispatch=Dispatch.OUTBOX)

    assert (moves.requeued, moves.parked) == ((expired.id,), (poison.id,))
    assert await outbox_subject.generation(expired.id) == 4
    assert await outbox_subject.generation(poison.id) == 5  # a park dispatches nothing
    [row] = await outbox_subject.outbox()
    assert (row.key, row.job_id, row.sent) == (f"dispatch:{expired.id}:4", expired.id, False)
    assert row.payload == {
        "schema": DISPATCH_SCHEMA,
        "job_id": str(expired.id),
        "project_id": str(project),
        "dispatch_seq": 4,
        "kind": "render.thumbnail",
        "not_before": row.payload["not_before"],
    }
    due = datetime.fromisoformat(str(row.payload["not_before"]))
    assert due == NOW  # due at the job's run_after: now, as the requeue set it


async def test_polling_dispatch_writes_no_outbox_row_even_where_the_schema_has_one(
    outbox_subject: Subject,
) -> None:
    project = uuid.uuid4()
    await outbox_subject.add(leased(project))
    store = outbox_subject.store
    await reap_page(store, dispatch=Dispatch.POLLING)
    assert await outbox_subject.outbox() == []


async def test_a_retry_answer_dispatches_the_job_at_a_new_generation(
    outbox_subject: Subject,
) -> None:
    project = uuid.uuid4()
    poison = replace(leased(project, attempts=7, max_attempts=7), dispatch_seq=2)
    await outbox_subject.add(poison)
    store = outbox_subject.store
    await reap_page(store, dispatch=Dispatch.OUTBOX)
    [gate] = await store.list_gates()
    later = NOW + timedelta(minutes=5)

    await outbox_subject.store.answer_gate(gate.id, "retry", later, dispatch=Dispatch.OUTBOX)

    assert await outbox_subject.generation(poison.id) == 3
    assert [r.key for r in await outbox_subject.outbox()] == [f"dispatch:{poison.id}:3"]
    assert [(u.job_id, u.dispatch_seq) for u in await store.unsent_dispatches()] == [(poison.id, 3)]


async def test_a_dead_lettered_dispatch_parks_its_job_once_while_it_is_current(
    outbox_subject: Subject,
) -> None:
    project = uuid.uuid4()
    ready = Job(project_id=project, dispatch_seq=2)
    moved_on = Job(project_id=project, dispatch_seq=5)
    await outbox_subject.add(ready, moved_on)
    store = outbox_subject.store
    current = pointer_letter(ready, 2, "current")
    stale = pointer_letter(moved_on, 4, "stale")
    missing = Job(project_id=project)
    nowhere = pointer_letter(missing, 1, "nowhere")

    first = await store.park_dispatch_pointers(
        [pointed(current), pointed(stale), pointed(nowhere)], now=NOW, rules=RULES
    )
    again = await store.park_dispatch_pointers(
        [pointed(current), pointed(stale)], now=NOW, rules=RULES
    )

    assert [(v.object, v.action) for v in first.parked] == [(str(ready.id), Action.PARK)]
    assert [(v.object, v.action) for v in first.stale] == [
        (str(moved_on.id), Action.NONE),
        (str(missing.id), Action.NONE),
    ]
    assert "is ready at generation 5" in first.stale[0].detail
    assert "does not exist" in first.stale[1].detail
    assert again.already_parked == (current.identity, stale.identity)
    assert (await outbox_subject.row(ready.id)).state == "awaiting_human"
    assert (await outbox_subject.row(moved_on.id)).state == "ready"
    [gate] = await store.list_gates()
    assert (gate.kind, gate.job_id, gate.choices) == (
        "delivery_exhausted",
        ready.id,
        ("retry", "cancel"),
    )
    handled = await store.parked_identities([current.identity, stale.identity, "msg:other"])
    assert handled == {current.identity, stale.identity}
    assert await store.count_parked_dead_letters("vibey.jobs.dead") == 3
    assert await outbox_subject.outbox() == []  # a park dispatches nothing
    await outbox_subject.store.answer_gate(gate.id, "retry", NOW, dispatch=Dispatch.OUTBOX)
    assert [r.key for r in await outbox_subject.outbox()] == [f"dispatch:{ready.id}:3"]


async def test_a_dead_lettered_dispatch_leaves_a_lease_inside_its_grace_alone(
    outbox_subject: Subject,
) -> None:
    # The lease reap would leave this holder alone for the grace: so does its pointer.
    project = uuid.uuid4()
    holding = replace(leased(project, expired_seconds_ago=60), dispatch_seq=2)
    gone = replace(leased(project, expired_seconds_ago=600), dispatch_seq=3)
    await outbox_subject.add(holding, gone)
    graced = replace(RULES, lease_grace_seconds=300)

    parks = await outbox_subject.store.park_dispatch_pointers(
        [pointed(pointer_letter(holding, 2, "holding")), pointed(pointer_letter(gone, 3, "gone"))],
        now=NOW,
        rules=graced,
    )

    assert [v.object for v in parks.parked] == [str(gone.id)]
    assert [v.object for v in parks.stale] == [str(holding.id)]
    assert "is leased at generation 2" in parks.stale[0].detail
    assert (await outbox_subject.row(holding.id)).state == "leased"
    assert (await outbox_subject.row(gone.id)).state == "awaiting_human"
