"""Gates a person works through, held by both stores: every answer is a ``GateAnswered`` event
on the gate's project stream, committed with the job's move; a poison job can be given up; a
gate is found by a prefix of its id; the open gates are counted; the ledger is read by filter."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from reaper.core.domain import (
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
    Dispatch,
)
from reaper.errors import GateError
from reaper.gates.ids import gate_id_range
from reaper.jobqueue.port import EventFilter, GateChoice, GateCount, GateFilter, ParkedDeadLetter
from tests.contract.conftest import Subject, park_poison
from tests.contract.test_job_queue_contract import RULES, dead_letter
from tests.support.store import NOW, reap_page

pytestmark = pytest.mark.postgres

LATER = NOW + timedelta(minutes=5)


async def test_a_retry_answer_is_one_event_on_the_gates_stream(subject: Subject) -> None:
    project = uuid.uuid4()
    gate = await park_poison(subject, project)
    store = subject.store

    answered = await subject.store.answer_gate(
        GateChoice(gate.id, "retry", LATER, answered_by="ana@ops", reason="the API is back")
    )

    assert (answered.answer, answered.answered_by) == ("retry", "ana@ops")
    park, answer = await store.events(project)
    assert (park.seq, answer.seq) == (1, 2)  # gapless, after the park
    assert (answer.kind, answer.created_at, answer.trusted) == ("GateAnswered", LATER, True)
    assert answer.payload == {
        "object": str(gate.job_id),
        "gate": str(gate.id),
        "gate_kind": GATE_DELIVERY_EXHAUSTED,
        "job": str(gate.job_id),
        "condition": "poison",
        "choice": "retry",
        "by": "ana@ops",
        "reason": "the API is back",
        "queue": None,
        "message_id": None,
    }
    assert gate.job_id is not None
    assert (await subject.row(gate.job_id)).state == "ready"


async def test_a_cancel_answer_gives_the_job_up_for_good(subject: Subject) -> None:
    project = uuid.uuid4()
    gate = await park_poison(subject, project)
    store = subject.store
    assert gate.job_id is not None

    await subject.store.answer_gate(GateChoice(gate.id, "cancel", LATER, answered_by="ana@ops"))

    row = await subject.row(gate.job_id)
    assert (row.state, row.finished_at, row.attempts) == ("cancelled", LATER, 6)
    [_, answer] = await store.events(project)
    assert (answer.kind, answer.payload["choice"]) == ("GateAnswered", "cancel")
    later = LATER + timedelta(hours=1)
    assert await store.count_expired_leases(later, 0) == 0  # never requeued
    with pytest.raises(GateError, match="already answered"):
        await subject.store.answer_gate(GateChoice(gate.id, "retry", later))
    assert len(await store.events(project)) == 2  # a refused answer writes nothing


async def test_a_cancel_writes_no_outbox_row(outbox_subject: Subject) -> None:
    project = uuid.uuid4()
    gate = await park_poison(outbox_subject, project, dispatch_seq=2)
    assert gate.job_id is not None

    await outbox_subject.store.answer_gate(
        GateChoice(gate.id, "cancel", LATER), dispatch=Dispatch.OUTBOX
    )

    assert await outbox_subject.outbox() == []
    assert await outbox_subject.generation(gate.job_id) == 2
    assert (await outbox_subject.row(gate.job_id)).state == "cancelled"


async def test_a_stale_answer_is_refused_and_writes_no_event(subject: Subject) -> None:
    project = uuid.uuid4()
    first = await park_poison(subject, project)
    store = subject.store
    assert first.job_id is not None
    again = NOW + timedelta(minutes=10)
    await subject.update(
        first.job_id,
        state="leased",
        attempts=7,
        lease_owner="worker-2",
        lease_expires_at=again - timedelta(minutes=1),
    )
    await reap_page(store, again)
    listed = {g.id: g for g in await store.list_gates(GateFilter(project_id=project))}
    [second] = [g for g in listed.values() if g.id != first.id]
    assert (listed[first.id].superseded_by, second.superseded_by) == (second.id, None)

    for choice in ("retry", "cancel"):
        with pytest.raises(GateError, match="the job waits behind"):
            await subject.store.answer_gate(GateChoice(first.id, choice, again))

    assert [e.kind for e in await store.events(project)] == ["QueueReaped", "QueueReaped"]
    await subject.store.answer_gate(GateChoice(second.id, "cancel", again))
    assert [e.kind for e in await store.events(project)][-1] == "GateAnswered"


async def test_dead_letter_answers_are_on_the_fleet_stream(subject: Subject) -> None:
    store = subject.store
    kept, replayed = dead_letter("keep"), dead_letter("again")
    await store.park_dead_letters([kept, replayed], now=NOW, rules=RULES)
    gates = {g.identity: g for g in await store.list_gates(GateFilter(kind=GATE_BUS_DEAD_LETTERED))}
    before = len(await store.events(FLEET_PROJECT_ID))

    async def send(gate: object, parked: ParkedDeadLetter) -> str:
        return f"replay:{parked.letter.identity}"

    await subject.store.answer_dead_letter_gate(
        GateChoice(
            gates[f"dead_letter:{kept.identity}"].id,
            "dismiss",
            NOW,
            answered_by="ana",
            reason="dup",
        )
    )
    await subject.store.answer_dead_letter_gate(
        GateChoice(gates[f"dead_letter:{replayed.identity}"].id, "replay", NOW, answered_by="bo"),
        replay=send,
    )

    dismissal, replay = (await store.events(FLEET_PROJECT_ID))[before:]
    assert (dismissal.kind, dismissal.trusted) == ("GateAnswered", True)
    assert (dismissal.payload["choice"], dismissal.payload["by"]) == ("dismiss", "ana")
    assert (dismissal.payload["reason"], dismissal.payload["queue"]) == ("dup", None)
    assert dismissal.payload["condition"] == "dead_letter"
    # the queue a replay published to came from the letter's headers: untrusted
    assert (replay.kind, replay.trusted) == ("GateAnswered", False)
    assert (replay.payload["queue"], replay.payload["message_id"]) == (
        "vibey.jobs",
        f"replay:{replayed.identity}",
    )
    assert replay.seq == dismissal.seq + 1


async def test_a_refused_replay_writes_no_event(subject: Subject) -> None:
    store = subject.store
    one = dead_letter("refused")
    await store.park_dead_letters([one], now=NOW, rules=RULES)
    [gate] = await store.list_gates(GateFilter(kind=GATE_BUS_DEAD_LETTERED))
    before = await store.events(FLEET_PROJECT_ID)

    async def refuse(gate: object, parked: ParkedDeadLetter) -> str:
        raise GateError("refused by the test")

    with pytest.raises(GateError, match="refused by the test"):
        await subject.store.answer_dead_letter_gate(
            GateChoice(gate.id, "replay", NOW), replay=refuse
        )
    assert await store.events(FLEET_PROJECT_ID) == before


async def test_a_gate_is_found_by_a_prefix_of_its_id(subject: Subject) -> None:
    gate = await park_poison(subject, uuid.uuid4())
    store = subject.store

    for prefix in (gate.id.hex[:8], str(gate.id)[:13], gate.id.hex):
        [found] = await store.gates_between(*gate_id_range(prefix), 2)
        assert found.id == gate.id
    other = uuid.UUID(int=gate.id.int ^ 1)  # shares every digit but the last
    assert await store.gates_between(other, other, 2) == []
    with pytest.raises(GateError, match="not a gate id or a prefix"):
        gate_id_range("c1ce-zz")


async def test_gates_are_listed_by_project_age_and_kind(subject: Subject) -> None:
    project, other = uuid.uuid4(), uuid.uuid4()
    mine = await park_poison(subject, project)
    theirs = await park_poison(subject, other)
    await subject.store.park_dead_letters([dead_letter("listed")], now=LATER, rules=RULES)
    store = subject.store

    assert [g.id for g in await store.list_gates(GateFilter(project_id=project))] == [mine.id]
    assert mine.job_kind == "build"
    assert [
        g.id for g in await store.list_gates(GateFilter(kind=GATE_DELIVERY_EXHAUSTED))
    ] == sorted([mine.id, theirs.id], key=str)
    assert len(await store.list_gates(GateFilter(raised_before=LATER))) == 2
    assert len(await store.list_gates(GateFilter(raised_before=LATER + timedelta(seconds=1)))) == 3
    # what a pass parked at LATER, and no older gate; and the oldest first, at most as many
    # as asked for
    [letter] = await store.list_gates(GateFilter(kind=GATE_BUS_DEAD_LETTERED))
    assert [g.id for g in await store.list_gates(GateFilter(raised_since=LATER))] == [letter.id]
    assert len(await store.list_gates(GateFilter(raised_since=NOW))) == 3
    oldest = sorted([mine.id, theirs.id], key=str)
    assert [g.id for g in await store.list_gates(GateFilter(limit=1))] == oldest[:1]
    assert [g.id for g in await store.list_gates(GateFilter(limit=5))] == [*oldest, letter.id]
    assert await store.open_gate_counts() == [
        GateCount(GATE_BUS_DEAD_LETTERED, 1, LATER),
        GateCount(GATE_DELIVERY_EXHAUSTED, 2, NOW),
    ]
    assert await store.open_dead_letter_gates() == {"vibey.jobs.dead": 1}
    [letter_gate] = await store.list_gates(GateFilter(kind=GATE_BUS_DEAD_LETTERED))
    await subject.store.answer_dead_letter_gate(GateChoice(letter_gate.id, "dismiss", LATER))
    assert await store.open_dead_letter_gates() == {}
    assert [c.kind for c in await store.open_gate_counts()] == [GATE_DELIVERY_EXHAUSTED]
    assert letter_gate.job_id is not None
    kept = await store.parked_dead_letters([letter_gate.job_id, uuid.uuid4()])
    assert list(kept) == [letter_gate.job_id]
    assert kept[letter_gate.job_id].letter.origin_queue == "vibey.jobs"


async def test_the_ledger_is_read_newest_last_by_filter(subject: Subject) -> None:
    project, other = uuid.uuid4(), uuid.uuid4()
    mine = await park_poison(subject, project)
    await park_poison(subject, other)
    store = subject.store
    await subject.store.answer_gate(GateChoice(mine.id, "retry", LATER, answered_by="ana"))

    everything = await store.read_events(EventFilter())
    assert [e.created_at for e in everything] == [NOW, NOW, LATER]
    assert everything[-1].kind == "GateAnswered"
    [newest] = await store.read_events(EventFilter(limit=1))
    assert newest == everything[-1]
    assert [e.kind for e in await store.read_events(EventFilter(project_id=project))] == [
        "QueueReaped",
        "GateAnswered",
    ]
    assert [e.project_id for e in await store.read_events(EventFilter(kind="GateAnswered"))] == [
        project
    ]
    assert len(await store.read_events(EventFilter(condition="poison"))) == 3
    assert len(await store.read_events(EventFilter(since=LATER))) == 1
    by_object = await store.read_events(EventFilter(object=str(mine.job_id)))
    assert [e.kind for e in by_object] == ["QueueReaped", "GateAnswered"]
