"""Quiet passes (SPEC §10 "Quiet is cheap"), the pure half and the pass over the fakes: a letter
known from its headers (its message id, or its envelope, counted), twins told apart, and the
unread remainder recorded again only when it reaches a higher power of ten."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from reaper.config import Settings
from reaper.core.dead_letters import (
    VOLATILE_HEADERS,
    decode,
    decode_read,
    envelope,
    header_identity,
    header_read,
    quiet_read,
    remainder_bucket,
)
from reaper.core.domain import (
    FLEET_PROJECT_ID,
    Action,
    Condition,
    QueueStats,
    Source,
    Verdict,
    sighting_scope,
)
from reaper.core.sightings import records_to_write, ref_of, verdict_from_record
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources
from reaper.testing.memory import MemoryJobQueue
from tests.support.fake_broker import FakeBroker
from tests.support.verdicts import broker_finding

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DLQ = "vibey.jobs.dead"
BROKER_ONLY = frozenset({Source.BROKER})


def message(
    body: str = '{"job": 1}',
    *,
    message_id: str | None = None,
    time: int | None = 1_760_000_000,
    extra_headers: dict[str, Any] | None = None,
    **properties: Any,
) -> dict[str, Any]:
    """A message as RabbitMQ's get answers it (shapes measured on 3.10, 4.0 and 4.3)."""
    headers: dict[str, Any] = {
        "x-first-death-queue": "vibey.jobs.p1",
        "x-first-death-reason": "rejected",
        "x-first-death-exchange": "",
        **(extra_headers or {}),
    }
    if time is not None:
        headers["x-death"] = [
            {
                "count": 1,
                "exchange": "",
                "queue": "vibey.jobs.p1",
                "reason": "rejected",
                "routing-keys": ["vibey.jobs.p1"],
                "time": time,
            }
        ]
    props: dict[str, Any] = {"headers": headers, **properties}
    if message_id is not None:
        props["message_id"] = message_id
    return {
        "exchange": "",
        "routing_key": DLQ,
        "message_count": 0,
        "payload": body,
        "payload_bytes": len(body.encode()),
        "payload_encoding": "string",
        "properties": props,
        "redelivered": False,
    }


def headers_only(raw: dict[str, Any]) -> dict[str, Any]:
    """The same message read with ``truncate`` 0."""
    return {**raw, "payload": ""}


# --------------------------------------------------------------------------- envelopes


def test_an_envelope_is_the_same_whether_the_body_came_back_or_not() -> None:
    raw = message(correlation_id="c1", timestamp=1_760_000_000)
    assert envelope(raw) == envelope(headers_only(raw)) == decode(raw, queue=DLQ).envelope
    assert str(envelope(raw)).startswith("env-sha256:")


def test_what_a_read_changes_is_not_part_of_an_envelope() -> None:
    raw = message()
    read_again = {
        **raw,
        "redelivered": True,
        "message_count": 7,
        "properties": {
            **raw["properties"],
            "headers": {
                **raw["properties"]["headers"],
                "x-delivery-count": 3,
                "x-acquired-count": 2,
            },
        },
    }
    assert {"x-delivery-count", "x-acquired-count"} == VOLATILE_HEADERS
    assert envelope(read_again) == envelope(raw)


@pytest.mark.parametrize(
    "other",
    [
        message('{"job": 12}'),  # another size
        message(time=1_760_000_001),  # died another second
        message(correlation_id="c2"),
        message(timestamp=1_760_000_000),
        message(extra_headers={"tenant": "b"}),
        message(extra_headers={"x-first-death-reason": "expired"}),
        {**message(), "routing_key": "vibey.other.dead"},
    ],
)
def test_an_envelope_covers_size_properties_headers_and_route(other: dict[str, Any]) -> None:
    assert envelope(other) != envelope(message())


def test_no_envelope_without_a_time_or_a_size() -> None:
    assert envelope(message(time=None)) is None  # nothing tells such letters apart
    assert envelope(message(time=None, timestamp=1_760_000_000)) is not None
    assert envelope({**message(), "payload_bytes": None}) is None
    assert envelope({}) is None and envelope({"properties": []}) is None


def test_a_message_id_is_known_from_the_headers_exactly_as_from_the_whole_letter() -> None:
    for message_id in ("job-42", "x" * 500, "bad\nid"):
        raw = message(message_id=message_id)
        assert header_identity(headers_only(raw)) == decode(raw, queue=DLQ).identity
    assert header_identity(message()) is None


# --------------------------------------------------------------------------- twins


def test_twins_with_no_message_id_are_numbered_not_collapsed() -> None:
    twin = message()
    letters = decode_read([twin, message('{"job": 2}'), twin, twin], queue=DLQ)
    first = decode(twin, queue=DLQ).identity
    assert [x.identity for x in letters] == [
        first,
        decode(message('{"job": 2}'), queue=DLQ).identity,
        f"{first}#2",
        f"{first}#3",
    ]
    # a message id names one letter: read twice, it is one letter
    named = message(message_id="m-1")
    assert [x.identity for x in decode_read([named, named], queue=DLQ)] == ["msg:m-1"] * 2


# --------------------------------------------------------------------------- quiet reads


def test_a_read_whose_letters_are_all_parked_is_quiet() -> None:
    a, b = message('{"a": 1}'), message('{"b": 22}')
    seen = header_read([headers_only(x) for x in (a, b, message(message_id="m-1"))])
    parked = {str(envelope(a)): 1, str(envelope(b)): 1}
    result = quiet_read(seen, {"msg:m-1"}, parked)
    assert (result.quiet, result.parked, result.covered) == (True, 3, 3)


def test_a_twin_of_a_parked_letter_is_never_taken_for_it() -> None:
    twin = headers_only(message())
    seen = header_read([twin, twin])
    assert seen.envelopes[0] == seen.envelopes[1]
    one_parked = quiet_read(seen, set(), {seen.envelopes[0]: 1})
    assert (one_parked.quiet, one_parked.parked, one_parked.covered) == (False, 1, 1)
    assert quiet_read(seen, set(), {seen.envelopes[0]: 2}).quiet


def test_a_new_letter_or_one_with_nothing_to_go_on_is_not_quiet() -> None:
    new_id = header_read([headers_only(message(message_id="m-2"))])
    assert not quiet_read(new_id, {"msg:m-1"}, {}).quiet
    bare = header_read([headers_only(message(time=None))])
    assert bare.unknown == 1 and not quiet_read(bare, set(), {}).quiet
    assert quiet_read(header_read([]), set(), {}).quiet  # an empty read saw nothing new


# --------------------------------------------------------------------------- buckets


@pytest.mark.parametrize(
    ("unread", "bucket"),
    [(-1, 0), (0, 0), (1, 1), (9, 1), (10, 10), (99, 10), (100, 100), (999, 100), (10**6, 10**6)],
)
def test_the_remainder_is_bucketed_by_power_of_ten(unread: int, bucket: int) -> None:
    assert remainder_bucket(unread) == bucket


def remainder(unread: int, queue: str = DLQ) -> Verdict:
    detail, bucket = f"{unread} not parked", remainder_bucket(unread)
    return broker_finding(
        queue, Condition.DEAD_LETTER, unread, trusted=True, detail=detail, bucket=bucket
    )


def test_a_bucketed_sighting_is_scoped_by_its_bucket_and_stored_with_it() -> None:
    verdict = remainder(12)
    assert verdict.sighting_key.scope == f"{DLQ}#10"
    assert sighting_scope(Source.BROKER, FLEET_PROJECT_ID, DLQ, DLQ) == DLQ
    assert verdict.payload()["bucket"] == 10
    assert "bucket" not in replace_bucket(verdict).payload()
    back = verdict_from_record(FLEET_PROJECT_ID, verdict.payload(), True)
    assert back.bucket == 10 and ref_of(back) == ref_of(verdict)


def replace_bucket(verdict: Verdict) -> Verdict:
    return replace(verdict, bucket=None)


def open_as(*verdicts: Verdict) -> dict[Any, Verdict]:
    return {ref_of(v): v for v in verdicts}


def test_the_remainder_is_recorded_again_only_in_a_higher_bucket() -> None:
    one, twelve = remainder(3), remainder(12)
    # first seen: recorded
    assert records_to_write(open_as(one), {}, BROKER_ONLY) == [one]
    # grows within its bucket: nothing
    assert records_to_write(open_as(remainder(9)), open_as(one), BROKER_ONLY) == []
    # crosses 10: the new bucket opens, the lower one closes
    crossed = records_to_write(open_as(twelve), open_as(one), BROKER_ONLY)
    assert [(r.action, r.bucket) for r in crossed] == [(Action.SURFACE, 10), (Action.CLEARED, 1)]
    # grows within 10-99, or falls back below 10: nothing, the highest bucket stays open
    assert records_to_write(open_as(remainder(50)), open_as(twelve), BROKER_ONLY) == []
    assert records_to_write(open_as(remainder(4)), open_as(twelve), BROKER_ONLY) == []
    # gone: closed
    gone = records_to_write({}, open_as(twelve), BROKER_ONLY)
    assert [(r.action, r.bucket) for r in gone] == [(Action.CLEARED, 10)]
    # another queue's buckets are its own
    other = remainder(40, "vibey.other.dead")
    both = records_to_write(open_as(other), open_as(twelve), BROKER_ONLY)
    assert [(r.queue, r.action) for r in both] == [
        ("vibey.other.dead", Action.SURFACE),
        (DLQ, Action.CLEARED),
    ]


def test_an_unread_queue_clears_none_of_its_buckets() -> None:
    twelve = remainder(12)
    assert records_to_write({}, open_as(twelve), BROKER_ONLY, unread_queues=frozenset({DLQ})) == []


# --------------------------------------------------------------------------- the pass


def settings(peek: int = 100) -> Settings:
    return Settings.model_validate(
        {"queue": {"reap": {"policy_verify_wait_seconds": 0, "dead_letter_peek_limit": peek}}}
    )


async def test_a_quiet_pass_reads_no_body_and_a_new_letter_is_found() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker()
    broker.declare(DLQ, "classic")
    twin = message()
    letters = [twin, twin, message(message_id="m-1"), message('{"job": 333}')]
    broker.put_letters(DLQ, letters)

    first = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert [(d.parked_new, d.bodies_read) for d in first.dead_letters.queues] == [(4, 4)]
    read = broker.bodies_read

    second = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert [
        (d.parked_new, d.already_parked, d.bodies_read) for d in second.dead_letters.queues
    ] == [(0, 4, 0)]
    assert broker.bodies_read == read

    broker.put_letters(DLQ, [*letters, twin])  # a third twin arrives
    third = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert [(d.parked_new, d.already_parked, d.bodies_read) for d in third.dead_letters.queues] == [
        (1, 4, 5)
    ]
    fourth = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert [(d.parked_new, d.bodies_read) for d in fourth.dead_letters.queues] == [(0, 0)]
    assert len(await store.list_gates()) == 5


async def test_letters_parked_without_an_envelope_get_one_on_their_next_whole_read() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker()
    broker.declare(DLQ, "classic")
    broker.put_letters(DLQ, [message()])
    await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    # as a row parked before envelopes were kept
    await store.keep_envelopes([(i, "env-sha256:old") for i in store.letters])
    again = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert [(d.parked_new, d.bodies_read) for d in again.dead_letters.queues] == [(0, 1)]
    quiet = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert [(d.parked_new, d.bodies_read) for d in quiet.dead_letters.queues] == [(0, 0)]


class EmptiedBroker(FakeBroker):
    """Lists the queue with letters, then shows it empty when the pass looks again."""

    async def queue(self, name: str, vhost: str | None = None) -> QueueStats:
        return replace(await super().queue(name, vhost), messages_ready=0)


async def test_no_get_is_sent_for_a_queue_found_empty() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = EmptiedBroker()
    broker.declare(DLQ, "classic")
    broker.put_letters(DLQ, [message()])
    result = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert broker.reads == []
    assert [(d.depth, d.bodies_read, d.read_blocked) for d in result.dead_letters.queues] == [
        (0, 0, None)
    ]


async def test_the_remainder_sighting_is_recorded_by_bucket_across_passes() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker()
    broker.declare(DLQ, "classic")

    def letters(n: int) -> list[dict[str, Any]]:
        return [message(json.dumps({"n": i}), message_id=f"m-{i}") for i in range(n)]

    recorded: list[tuple[str, object]] = []
    for total in (3, 5, 9, 12, 14, 30):  # peek 1: one parked per pass, the rest unread
        broker.put_letters(DLQ, letters(total))
        result = await run_pass(
            settings(peek=1), Sources(store=store, broker=broker), clock=lambda: NOW
        )
        recorded += [
            (r.verdict.action.value, r.verdict.bucket)
            for r in result.verdicts
            if r.recorded and r.verdict.action is Action.SURFACE
        ]
    events = [
        (e.payload["action"], e.payload.get("bucket"))
        for e in await store.events(FLEET_PROJECT_ID)
        if e.payload["action"] in ("surface", "cleared")
    ]
    # unread 2, 3, 6, 8, 9, 24: opened at 1, again at 10 (the 1 closed), nothing else
    assert events == [("surface", 1), ("surface", 10), ("cleared", 1)]
    assert recorded == [("surface", 1), ("surface", 10)]
