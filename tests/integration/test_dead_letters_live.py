"""Dead letters end to end, on every supported RabbitMQ version and a real PostgreSQL: real
passes (``reaper.reap.run.reap_once``) park what an owned dead-letter queue holds and never cost
the broker a message; a foreign dead-letter queue is never read; replay publishes the body
back to its owned origin queue and leaves the dead letter where it is (SPEC §1, §4)."""

from __future__ import annotations

import json
import time

import pytest

from reaper.config import Settings
from reaper.core.domain import FLEET_PROJECT_ID
from reaper.errors import GateError
from reaper.gates.answering import answer_gate, preview_answer
from reaper.gates.ids import short_id
from reaper.gates.wording import answered_line, would_line
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.run import reap_once
from reaper.reap.sources import open_sources
from tests.support.dead_letters import (
    DLQ,
    ORIGIN,
    dead_letter_gates,
    dead_letter_through,
    depth,
    gate_by_id,
    outcome_of,
    parked_after_passes,
    wait_for_depth,
)
from tests.support.invariants import read_bodies
from tests.support.services import BrokerUnderTest

pytestmark = [pytest.mark.broker, pytest.mark.postgres]

PASSES = 50


# --------------------------------------------------------------------------- never deleted


async def test_an_owned_quorum_dead_letter_queue_survives_fifty_passes(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore
) -> None:
    """An owned quorum dead-letter queue holding 5 dead letters survives 50 consecutive real
    passes with every message still on the broker, and exactly 5 gates exist."""
    broker.declare_queue(DLQ, queue_type="quorum")
    bodies = [json.dumps({"task": i, "version": broker.version}) for i in range(5)]
    dead_letter_through(broker, DLQ, bodies)
    await wait_for_depth(broker, DLQ, 5)

    blocked: list[tuple[int, str]] = []
    parked_by_pass: list[int] = []
    started = time.monotonic()
    for n in range(1, PASSES + 1):
        result = await reap_once(settings)
        assert not [u for u in result.unreadable], result.unreadable
        assert not result.not_moved, result.not_moved
        outcome = outcome_of(result, DLQ)
        assert outcome is not None, f"pass {n}: {DLQ} not judged: {result.notes}"
        assert outcome.depth == 5, f"pass {n}: {outcome}"
        if outcome.read_blocked is not None:
            # the safety working: not read, not parked, every message still counted
            assert outcome.parked_new == 0 and outcome.unread == 5
            assert "delivery limit" in outcome.read_blocked
            blocked.append((n, outcome.read_blocked))
        else:
            assert outcome.parked_new + outcome.already_parked == 5, f"pass {n}: {outcome}"
            assert outcome.unread == 0
        parked_by_pass.append(outcome.parked_new)
        gates = await dead_letter_gates(store)
        assert len(gates) == sum(parked_by_pass) <= 5
        if n % 10 == 0:  # sampled: the statistics lag, the final read below is exact
            assert depth(broker, DLQ) == 5
    elapsed = time.monotonic() - started

    # every pass after the first safe read found all five parked
    first_read = next(i for i, outcome in enumerate(parked_by_pass) if outcome)
    assert parked_by_pass[first_read] == 5 and sum(parked_by_pass) == 5
    assert len(blocked) < PASSES, "no pass ever proved the read safe"
    # on 4.0 a pass can only read once the dead-letter policy (delivery-limit -1) is in force
    assert all(n < first_read + 1 for n, _ in blocked)

    messages = read_bodies(broker, DLQ)
    assert sorted(m["payload"] for m in messages) == sorted(bodies)
    gates = await dead_letter_gates(store)
    assert len(gates) == 5 and all(g.is_open for g in gates)
    assert sorted(g.identity or "" for g in gates) == sorted(
        f"dead_letter:msg:{ORIGIN}-{i}" for i in range(5)
    )
    parks = [e for e in await store.events(FLEET_PROJECT_ID) if e.payload["action"] == "park"]
    assert len(parks) == 5 and not any(e.trusted for e in parks)
    queue = broker.queue(DLQ)
    counts = [m["properties"].get("headers", {}).get("x-delivery-count") for m in messages]
    print(
        f"\nRabbitMQ {broker.version}: {PASSES} passes in {elapsed:.1f} s; "
        f"blocked passes {[n for n, _ in blocked]}; first read at pass {first_read + 1}; "
        f"policy {queue.get('policy')!r}, delivery_limit {queue.get('delivery_limit')!r}; "
        f"x-delivery-count at the end {counts}"
        + (f"; blocked because: {blocked[0][1]}" if blocked else "")
    )


async def test_a_quorum_dead_letter_queue_with_a_finite_limit_is_never_read(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore
) -> None:
    """A finite limit the reconciled policy does not lift (an ``x-delivery-limit`` argument):
    every pass declines to read, says why, and the pass is not ok."""
    broker.declare_queue(DLQ, queue_type="quorum", arguments={"x-delivery-limit": 3})
    bodies = [json.dumps({"task": i}) for i in range(3)]
    dead_letter_through(broker, DLQ, bodies)
    await wait_for_depth(broker, DLQ, 3)

    for _ in range(10):
        result = await reap_once(settings)
        outcome = outcome_of(result, DLQ)
        assert outcome is not None and outcome.read_blocked is not None, outcome
        assert outcome.parked_new == 0 and not result.ok

    messages = read_bodies(broker, DLQ)
    assert sorted(m["payload"] for m in messages) == sorted(bodies)
    # the passes never read it: this is each letter's first read from the dead-letter queue.
    # 4.3 counts the delivery on the origin queue that dead-lettered it (measured: redelivered,
    # x-delivery-count 1 on the first read); 3.10 and 4.0 start afresh
    first = (True, 1) if broker.at_least(4, 3) else (False, 0)
    shown = [
        (m["redelivered"], (m["properties"] or {}).get("headers", {}).get("x-delivery-count", 0))
        for m in messages
    ]
    assert shown == [first] * len(bodies)
    assert await dead_letter_gates(store) == []


# --------------------------------------------------------------------------- foreign


@pytest.mark.parametrize("foreign", ["celery.dead", "other.dlq"])
async def test_a_foreign_dead_letter_queue_is_surfaced_and_never_read(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore, foreign: str
) -> None:
    broker.declare_queue(foreign, queue_type="quorum")
    broker.declare_queue("celery.classic.dlq")
    for queue in (foreign, "celery.classic.dlq"):
        for i in range(3):
            broker.publish(queue, json.dumps({"theirs": i}), properties={"message_id": f"t{i}"})
        await wait_for_depth(broker, queue, 3)

    for _ in range(3):
        result = await reap_once(settings)
        assert outcome_of(result, foreign) is None  # never read, so no read outcome
        surfaced = [
            r.verdict
            for r in result.verdicts
            if r.verdict.queue == foreign and r.verdict.condition.value == "dead_letter"
        ]
        assert [v.action.value for v in surfaced] == ["surface"]

    for queue in (foreign, "celery.classic.dlq"):
        messages = read_bodies(broker, queue)
        assert len(messages) == 3
        assert [m["redelivered"] for m in messages] == [False, False, False], queue
    assert await dead_letter_gates(store) == []
    sightings = [
        e.payload
        for e in await store.events(FLEET_PROJECT_ID)
        if e.payload["queue"] == foreign and e.payload["condition"] == "dead_letter"
    ]
    assert [p["action"] for p in sightings] == ["surface"]  # recorded once, not per pass


# --------------------------------------------------------------------------- replay


async def test_replay_publishes_the_body_back_and_the_dead_letter_stays(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore
) -> None:
    broker.declare_queue(DLQ, queue_type="quorum")
    bodies = [json.dumps({"task": "replay me"}), json.dumps({"task": "dismiss me"})]
    dead_letter_through(broker, DLQ, bodies)
    await wait_for_depth(broker, DLQ, 2)
    await parked_after_passes(settings, DLQ, 2)
    gates = {g.identity: g for g in await dead_letter_gates(store)}
    replayed = gates[f"dead_letter:msg:{ORIGIN}-0"]
    dismissed = gates[f"dead_letter:msg:{ORIGIN}-1"]
    assert depth(broker, ORIGIN) == 0

    sources = await open_sources(settings)
    try:
        would = would_line(await preview_answer(sources, settings, short_id(replayed.id), "replay"))
        assert depth(broker, ORIGIN) == 0 and (await gate_by_id(store, replayed.id)).is_open
        outcome = answered_line(
            await answer_gate(
                sources,
                settings,
                short_id(replayed.id),
                "replay",
                answered_by="ana@ops",
                reason="consumer fixed",
            )
        )
        with pytest.raises(GateError, match="already answered"):
            await answer_gate(sources, settings, replayed.id, "replay")
        dismissal = answered_line(await answer_gate(sources, settings, dismissed.id, "dismiss"))
    finally:
        await sources.close()

    message_id = f"replay:msg:{ORIGIN}-0:{replayed.id}"
    assert f"would be published to \"{ORIGIN}\" as message '{message_id}'" in would
    assert f"published to \"{ORIGIN}\" as message '{message_id}'" in outcome
    answers = [e for e in await store.events(FLEET_PROJECT_ID) if e.kind == "GateAnswered"]
    assert [(e.payload["gate"], e.payload["choice"]) for e in answers] == [
        (str(replayed.id), "replay"),
        (str(dismissed.id), "dismiss"),
    ]
    assert answers[0].payload["queue"] == ORIGIN and answers[0].trusted is False
    assert answers[0].payload["message_id"] == message_id
    assert (answers[0].payload["by"], answers[0].payload["reason"]) == ("ana@ops", "consumer fixed")
    assert answers[1].payload["message_id"] is None
    assert "nothing was sent" in dismissal
    [back] = read_bodies(broker, ORIGIN)  # exactly one replay, for two answers
    assert back["payload"] == bodies[0]
    assert back["properties"]["message_id"] == message_id
    assert back["properties"]["content_type"] == "application/json"
    # the broker's copies stay on the dead-letter queue, whatever the answers
    assert sorted(m["payload"] for m in read_bodies(broker, DLQ)) == sorted(bodies)
    answered = {g.identity: g for g in await dead_letter_gates(store)}
    assert answered[replayed.identity].answer == "replay"
    assert answered[dismissed.identity].answer == "dismiss"


async def test_an_unrouted_replay_records_nothing(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore
) -> None:
    """An owned origin that no longer exists: the broker routes the replay nowhere."""
    dlq = "vibey.gone.dead"
    broker.declare_queue(dlq)
    broker.publish(
        dlq,
        json.dumps({"task": "lost"}),
        properties={
            "message_id": "gone-1",
            "headers": {"x-first-death-queue": "vibey.gone", "x-first-death-reason": "expired"},
        },
    )
    await wait_for_depth(broker, dlq, 1)
    await parked_after_passes(settings, dlq, 1)
    [gate] = await dead_letter_gates(store)

    sources = await open_sources(settings)
    try:
        with pytest.raises(GateError, match=r'replay to "vibey.gone" was not routed'):
            await answer_gate(sources, settings, gate.id, "replay")
    finally:
        await sources.close()
    [still] = await dead_letter_gates(store)
    assert still.is_open
    assert len(read_bodies(broker, dlq)) == 1


# --------------------------------------------------------------------------- hostile


async def test_hostile_dead_letters_are_parked_without_crashing_the_pass(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore
) -> None:
    dlq = "vibey.hostile.dead"
    broker.declare_queue(dlq, queue_type="quorum")
    big_headers = {f"x-junk-{i}": "\u202e\x1b[31m" + "h" * 1000 for i in range(100)}
    broker.publish(
        dlq,
        b'{"ok": true}',
        properties={
            "message_id": "big-headers",
            "headers": {
                **big_headers,
                "x-first-death-queue": "vibey.jobs\n\x1b[2J" + "q" * 500,
                "x-first-death-reason": "rejected",
            },
        },
    )
    broker.publish(dlq, bytes(range(256)) * 4, properties={"message_id": "binary"})
    broker.publish(dlq, b'{"bad": "\xff\xfe\xc3"}', properties={"message_id": "utf8"})
    broker.publish(dlq, b"", properties={})  # no id, no body, no headers
    await wait_for_depth(broker, dlq, 4)

    await parked_after_passes(settings, dlq, 4)
    result = await reap_once(settings)  # and a pass after: all known, nothing new
    outcome = outcome_of(result, dlq)
    assert outcome is not None and outcome.read_blocked is None
    assert (outcome.parked_new, outcome.already_parked, outcome.unread) == (0, 4, 0)
    assert not result.not_moved

    gates = await dead_letter_gates(store)
    assert len(gates) == 4
    for gate in gates:
        assert "\x1b" not in gate.prompt and "\u202e" not in gate.prompt
        assert all(len(line) < 400 for line in gate.prompt.splitlines())
    assert len(read_bodies(broker, dlq)) == 4
    # none of them may be replayed: refused with the reason, nothing sent
    sources = await open_sources(settings)
    try:
        for gate in gates:
            with pytest.raises(GateError, match="replay refused"):
                await answer_gate(sources, settings, gate.id, "replay")
    finally:
        await sources.close()
