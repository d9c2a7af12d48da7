"""Dead letters in the store (SPEC §1 (e), §3), against a real PostgreSQL: parked once by
identity (repeated calls, two reapers at once), one untrusted event per park on the fleet
stream, hostile letters parked safely, and the gate's answers: dismiss settles, replay is
refused unless the letter may be replayed, and nothing is answered twice."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import uuid
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest

from reaper.config import Settings, load_config
from reaper.core import dead_letters
from reaper.core.canonical import canonical_json, digest_of
from reaper.core.dead_letters.decode import decode, decoded_body
from reaper.core.dead_letters.parking import park_verdict
from reaper.core.domain import (
    DEAD_LETTER_JOB_KIND,
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    DeadLetter,
)
from reaper.core.records import Gate
from reaper.errors import GateError
from reaper.gates.answering import answer_gate
from reaper.gates.wording import answered_line
from reaper.jobqueue.port import DeadLetterParks, GateChoice, GateFilter, ParkRules
from reaper.jobqueue.postgres import PostgresStore
from tests.support.store import NOW, insert_jobs, leased, query, reap_page

pytestmark = pytest.mark.postgres

DLQ = "vibey.jobs.dead"
ORIGIN = "vibey.jobs"
OWNED = r"^vibey\."
DEAD = r"(\.dlq|\.dead)$"
LATER = NOW + timedelta(minutes=10)


@pytest.fixture
def settings(pg_dsn: str) -> Settings:
    return load_config(None, environ={"REAPER_DATABASE__DSN": pg_dsn}).settings


def raw_message(
    body: str | bytes = '{"task": 1}',
    *,
    message_id: str | None = None,
    origin: str | None = ORIGIN,
    reason: str = "rejected",
    headers: dict[str, Any] | None = None,
    payload_bytes: int | None = None,
) -> dict[str, Any]:
    """A message as the management API's ``get`` returns it."""
    if isinstance(body, bytes):
        payload, encoding, size = base64.b64encode(body).decode(), "base64", len(body)
    else:
        payload, encoding, size = body, "string", len(body.encode("utf-8", "surrogatepass"))
    all_headers: dict[str, Any] = dict(headers or {})
    if origin is not None:
        all_headers["x-first-death-queue"] = origin
        all_headers["x-first-death-reason"] = reason
    properties: dict[str, Any] = {"headers": all_headers}
    if message_id is not None:
        properties["message_id"] = message_id
    return {
        "payload": payload,
        "payload_encoding": encoding,
        "payload_bytes": size if payload_bytes is None else payload_bytes,
        "properties": properties,
        "redelivered": False,
    }


def letter(body: str | bytes = '{"task": 1}', **kwargs: Any) -> DeadLetter:
    return decode(raw_message(body, **kwargs), queue=DLQ)


def letters(n: int) -> list[DeadLetter]:
    return [letter(json.dumps({"task": i}), message_id=f"m-{i}") for i in range(n)]


async def park(store: PostgresStore, batch: list[DeadLetter], depth: int = 5) -> DeadLetterParks:
    return await store.park_dead_letters(
        batch,
        now=NOW,
        rules=ParkRules(
            depth=depth, min_depth=1, owned_queue_pattern=OWNED, dead_letter_queue_pattern=DEAD
        ),
    )


async def dead_letter_gates(store: PostgresStore) -> list[Gate]:
    return await store.list_gates(GateFilter(open_only=False, kind=GATE_BUS_DEAD_LETTERED))


async def gate_of(store: PostgresStore, identity: str) -> Gate:
    [gate] = [g for g in await dead_letter_gates(store) if g.identity == f"dead_letter:{identity}"]
    return gate


async def parked_gate(store: PostgresStore, message_id: str) -> tuple[DeadLetter, Gate]:
    """A letter with ``message_id`` parked alone: the letter and its gate."""
    one = letter(message_id=message_id)
    await park(store, [one])
    return one, await gate_of(store, one.identity)


# --------------------------------------------------------------------------- parking


async def test_a_park_writes_a_job_its_letter_a_gate_and_one_untrusted_fleet_event(
    pg_dsn: str, store: PostgresStore
) -> None:
    one = letter('{"task": 7}', message_id="m-7")
    parks = await park(store, [one], depth=3)

    [verdict] = parks.parked
    [job] = await query(pg_dsn, "SELECT * FROM job")
    assert (job["project_id"], job["kind"], job["state"]) == (
        FLEET_PROJECT_ID,
        DEAD_LETTER_JOB_KIND,
        "awaiting_human",
    )
    assert job["idempotency_key"] == "dead_letter:msg:m-7"
    assert (job["created_at"], job["finished_at"]) == (NOW, None)
    assert verdict == park_verdict(one, depth=3, min_depth=1, job_id=job["id"])
    assert verdict.trusted is False

    [gate] = await dead_letter_gates(store)
    assert (gate.project_id, gate.job_id, gate.identity) == (
        FLEET_PROJECT_ID,
        job["id"],
        "dead_letter:msg:m-7",
    )
    assert gate.choices == ("replay", "dismiss") and gate.is_open
    assert gate.prompt == dead_letters.gate_prompt(
        one, owned_queue_pattern=OWNED, dead_letter_queue_pattern=DEAD
    )

    [kept] = await query(pg_dsn, "SELECT * FROM dead_letter")
    assert dict(kept) == {
        "identity": "msg:m-7",
        "job_id": job["id"],
        "queue": DLQ,
        "message_id": "m-7",
        "origin_queue": ORIGIN,
        "reason": "rejected",
        "body": '{"task": 7}',
        "body_encoding": "string",
        "body_bytes": 11,
        "body_truncated": False,
        "is_json_object": True,
        "disposition": "parked",
        "parked_at": NOW,
        "envelope": one.envelope,
    }
    # no time in its headers: no envelope; one noted later, when it is read whole again
    assert one.envelope is None
    assert await store.parked_envelopes(["env-sha256:later"]) == {}
    assert await store.keep_envelopes([("msg:m-7", "env-sha256:later")]) == 1
    assert await store.keep_envelopes([("msg:m-7", "env-sha256:later")]) == 0
    assert await store.parked_envelopes(["env-sha256:later"]) == {"env-sha256:later": 1}

    [event] = await store.events(FLEET_PROJECT_ID)
    assert event.trusted is False and event.kind == "QueueReaped"
    assert event.payload == verdict.payload()
    assert event.payload["object"] == str(job["id"]) and event.payload["action"] == "park"
    assert event.digest == digest_of(canonical_json(verdict.payload()))
    assert event.created_at == NOW


async def test_parking_again_writes_nothing_and_names_what_was_parked(
    pg_dsn: str, store: PostgresStore
) -> None:
    batch = letters(4)
    first = await park(store, batch)
    assert len(first.parked) == 4 and first.failed == () and first.already_parked == ()

    for _ in range(3):
        again = await park(store, list(reversed(batch)))
        assert again.parked == () and again.failed == ()
        assert again.already_parked == tuple(x.identity for x in reversed(batch))
    # the same identity twice in one call parks once
    doubled = await park(store, [letter('{"new": 1}', message_id="dup")] * 2)
    assert len(doubled.parked) == 1 and doubled.already_parked == ("msg:dup",)

    assert len(await dead_letter_gates(store)) == 5
    assert len(await store.events(FLEET_PROJECT_ID)) == 5
    [(jobs, letters_kept)] = await query(
        pg_dsn, "SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM dead_letter)"
    )
    assert (jobs, letters_kept) == (5, 5)

    identities = [x.identity for x in batch]
    assert await store.parked_identities([*identities, "msg:never-seen"]) == set(identities)
    assert await store.parked_identities([]) == set()
    assert await store.count_parked_dead_letters(DLQ) == 5
    assert await store.count_parked_dead_letters("vibey.other.dead") == 0


async def test_identities_are_global_whatever_queue_or_project(
    pg_dsn: str, store: PostgresStore
) -> None:
    await park(store, [letter(message_id="same")])
    # the same message read from another dead-letter queue is the same dead letter
    elsewhere = dataclasses.replace(letter(message_id="same"), queue="vibey.other.dead")
    assert (await park(store, [elsewhere])).parked == ()
    assert await store.count_parked_dead_letters("vibey.other.dead") == 0
    # a gate with that identity on any project counts as parked
    project = uuid.uuid4()
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "INSERT INTO human_gate (project_id, kind, prompt, identity)"
            " VALUES ($1, 'bus_dead_lettered', 'x', 'dead_letter:msg:other')",
            project,
        )
    finally:
        await conn.close()
    assert await store.parked_identities(["msg:other", "msg:same"]) == {"msg:other", "msg:same"}


async def test_two_reapers_parking_the_same_letters_at_once_park_each_once(
    pg_dsn: str,
) -> None:
    stores = [await PostgresStore.connect(pg_dsn, pool_size=2) for _ in range(2)]
    try:
        batch = letters(30)
        for _ in range(5):
            results = await asyncio.gather(
                park(stores[0], batch), park(stores[1], list(reversed(batch)))
            )
            assert all(r.failed == () for r in results)
        assert [r.parked for r in results] == [(), ()]  # the last round found all parked
        events = await stores[0].events(FLEET_PROJECT_ID)
        assert len(events) == 30
        assert [e.seq for e in events] == list(range(1, 31))  # gapless
        assert all(e.trusted is False for e in events)
        assert len({e.payload["object"] for e in events}) == 30
        gates = await dead_letter_gates(stores[0])
        assert sorted(g.identity or "" for g in gates) == sorted(
            f"dead_letter:{x.identity}" for x in batch
        )
        [(jobs,)] = await query(pg_dsn, "SELECT count(*) FROM job")
        assert jobs == 30
    finally:
        for s in stores:
            await s.close()


async def test_the_first_round_of_two_concurrent_reapers_splits_the_parks(pg_dsn: str) -> None:
    stores = [await PostgresStore.connect(pg_dsn, pool_size=2) for _ in range(2)]
    try:
        batch = letters(40)
        a, b = await asyncio.gather(park(stores[0], batch), park(stores[1], batch[::-1]))
        recorded = [v.object for v in [*a.parked, *b.parked]]
        assert len(recorded) == len(set(recorded)) == 40  # each letter parked by one of them
        assert len(a.already_parked) + len(b.already_parked) == 40  # and seen parked by the other
        assert len(await stores[0].events(FLEET_PROJECT_ID)) == 40
    finally:
        for s in stores:
            await s.close()


async def test_hostile_letters_are_parked_safely(pg_dsn: str, store: PostgresStore) -> None:
    nul_body = letter('{"a": 1}\x00tail', message_id="nul-body")
    binary = letter(bytes(range(256)), message_id="binary")
    invalid_utf8 = letter(b'{"a": "\xff\xfe"}')
    huge_headers = letter(
        '{"ok": true}',
        message_id="big-headers",
        headers={f"h{i}": "x" * 1000 for i in range(100)},
    )
    nul_headers = letter(
        '{"ok": 1}', message_id="id\x00with-nul", origin="vibey.jobs\x00", reason="r\x00"
    )
    truncated = letter('{"cut": "', message_id="cut", payload_bytes=90_000)
    surrogate = decode(
        {**raw_message('{"s": 1}', message_id="sur"), "payload": '{"s": "\udc80"}'}, queue=DLQ
    )
    hostile = [nul_body, binary, invalid_utf8, huge_headers, nul_headers, truncated, surrogate]

    parks = await park(store, hostile)

    assert parks.failed == ()
    assert len(parks.parked) == len(hostile)
    kept = {
        r["identity"]: r
        for r in await query(
            pg_dsn,
            "SELECT identity, body, body_encoding, origin_queue, "
            "reason, message_id FROM dead_letter",
        )
    }
    assert set(kept) == {x.identity for x in hostile}
    for x in hostile:  # every body comes back byte for byte
        row = kept[x.identity]
        assert decoded_body(SimpleNamespace(**row)) == decoded_body(x)
    assert kept[nul_body.identity]["body_encoding"] == "base64"
    assert kept[binary.identity]["body_encoding"] == "base64"
    assert nul_headers.identity.startswith("msg-sha256:")
    assert (
        kept[nul_headers.identity]["origin_queue"],
        kept[nul_headers.identity]["reason"],
        kept[nul_headers.identity]["message_id"],
    ) == (None, None, None)
    gates = {g.identity: g for g in await dead_letter_gates(store)}
    for x in hostile:
        prompt = gates[f"dead_letter:{x.identity}"].prompt
        assert "\x00" not in prompt and "\x1b" not in prompt
        assert all(len(line) < 1000 for line in prompt.splitlines())
    events = await store.events(FLEET_PROJECT_ID)
    assert len(events) == len(hostile) and not any(e.trusted for e in events)


async def test_a_letter_the_database_refuses_is_named_and_the_rest_are_parked(
    pg_dsn: str, store: PostgresStore
) -> None:
    good = letters(3)
    # values no code path gives: a negative size (a CHECK refuses it), and an identity the
    # driver cannot send (a lone surrogate; a real identity is a digest where one would be)
    bad = dataclasses.replace(letter(message_id="bad"), body_bytes=-1)
    lone = dataclasses.replace(letter(message_id="lone"), identity="msg:lone\udc80")

    parks = await park(store, [good[0], bad, good[1], lone, good[2]])

    assert [v.detail for v in parks.parked] == [
        park_verdict(x, depth=5, min_depth=1).detail for x in good
    ]
    assert [identity for identity, _ in parks.failed] == ["msg:bad", "msg:lone\udc80"]
    assert all(reason for _, reason in parks.failed)
    assert await store.parked_identities(["msg:bad"]) == set()
    [(jobs, kept, gates)] = await query(
        pg_dsn,
        "SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM dead_letter),"
        " (SELECT count(*) FROM human_gate)",
    )
    assert (jobs, kept, gates) == (3, 3, 3)  # the refused ones left nothing behind
    assert [e.seq for e in await store.events(FLEET_PROJECT_ID)] == [1, 2, 3]


async def test_a_queue_name_postgresql_cannot_hold_is_parked_escaped_and_read_back_exactly(
    pg_dsn: str, store: PostgresStore
) -> None:
    nul = dataclasses.replace(letter(message_id="nul"), queue="vibey.x\x00.dead")
    lone = dataclasses.replace(letter(message_id="lone"), queue="vibey.\udc80.dead")

    parks = await park(store, [nul, lone])

    assert (len(parks.parked), parks.failed) == (2, ())
    rows = await query(pg_dsn, "SELECT queue FROM dead_letter ORDER BY queue")
    assert [r["queue"] for r in rows] == ["vibey.\\udc80.dead", "vibey.x\\x00.dead"]
    assert await store.count_parked_dead_letters("vibey.x\x00.dead") == 1
    jobs = [v.object for v in parks.parked]
    kept = await store.parked_dead_letters([uuid.UUID(j) for j in jobs])
    assert sorted(p.letter.queue for p in kept.values()) == sorted([nul.queue, lone.queue])


async def test_an_identity_half_taken_is_refused_and_rolled_back(
    pg_dsn: str, store: PostgresStore
) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:  # a gate holding the identity, without its job (not the reaper's doing)
        await conn.execute(
            "INSERT INTO human_gate (project_id, kind, prompt, identity)"
            " VALUES ($1, 'other', 'x', 'dead_letter:msg:taken')",
            uuid.uuid4(),
        )
    finally:
        await conn.close()
    parks = await park(store, [letter(message_id="taken"), letter(message_id="free")])
    assert len(parks.parked) == 1
    [(identity, reason)] = parks.failed
    assert identity == "msg:taken" and "without its bus.dead_letter job" in reason
    [(jobs,)] = await query(pg_dsn, "SELECT count(*) FROM job")
    assert jobs == 1


# --------------------------------------------------------------------------- answers


def sources(store: PostgresStore, broker: Any = None) -> SimpleNamespace:
    return SimpleNamespace(store=store, broker=broker, store_error=None)


async def test_dismiss_settles_the_job_and_keeps_the_letter(
    pg_dsn: str, store: PostgresStore, settings: Settings
) -> None:
    one = letter(message_id="dismiss-me")
    [verdict] = (await park(store, [one])).parked
    gate = await gate_of(store, one.identity)

    outcome = answered_line(
        await answer_gate(sources(store), settings, gate.id, "dismiss", clock=lambda: LATER)
    )

    assert outcome.startswith(f"gate {gate.id} (bus_dead_lettered) answered 'dismiss'")
    assert "nothing was sent" in outcome and '"vibey.jobs.dead"' in outcome
    answered = await gate_of(store, one.identity)
    assert (answered.answer, answered.answered_at) == ("dismiss", LATER)
    [job] = await query(pg_dsn, "SELECT * FROM job WHERE id = $1", uuid.UUID(verdict.object))
    assert (job["state"], job["finished_at"], job["updated_at"]) == ("cancelled", LATER, LATER)
    assert await store.parked_identities([one.identity]) == {one.identity}  # still parked
    assert await store.count_parked_dead_letters(DLQ) == 1
    assert (await park(store, [one])).parked == ()  # an answered letter is never parked again


async def test_the_store_alone_dismisses_and_refuses_replay(
    pg_dsn: str, store: PostgresStore
) -> None:
    one, two = letter(message_id="s-1"), letter(message_id="s-2")
    await park(store, [one, two])
    with pytest.raises(GateError, match="replay publishes the body to the broker"):
        await store.answer_gate(
            GateChoice((await gate_of(store, one.identity)).id, "replay", LATER)
        )
    assert (await gate_of(store, one.identity)).is_open
    with pytest.raises(GateError, match="replay publishes the body to the broker"):
        await store.answer_dead_letter_gate(
            GateChoice((await gate_of(store, one.identity)).id, "replay", LATER)
        )

    answered = await store.answer_gate(
        GateChoice((await gate_of(store, two.identity)).id, "dismiss", LATER)
    )
    assert answered.answer == "dismiss"
    [(state,)] = await query(pg_dsn, "SELECT state FROM job WHERE id = $1", answered.job_id)
    assert state == "cancelled"


async def test_answering_twice_is_refused(store: PostgresStore, settings: Settings) -> None:
    one, gate = await parked_gate(store, "twice")
    await answer_gate(sources(store), settings, gate.id, "dismiss", clock=lambda: LATER)
    for choice in ("dismiss", "replay"):
        with pytest.raises(GateError, match=f"gate {gate.id} was already answered at"):
            await answer_gate(sources(store), settings, gate.id, choice)
    assert (await gate_of(store, one.identity)).answer == "dismiss"


async def test_unknown_gates_and_choices_are_refused(
    store: PostgresStore, settings: Settings
) -> None:
    one, gate = await parked_gate(store, "choices")
    missing = uuid.uuid4()
    with pytest.raises(GateError, match=f"gate {missing} does not exist"):
        await answer_gate(sources(store), settings, missing, "dismiss")
    with pytest.raises(GateError, match=r"'retry' is not an answer .* choose 'replay', 'dismiss'"):
        await answer_gate(sources(store), settings, gate.id, "retry")
    assert (await gate_of(store, one.identity)).is_open


REFUSED = [
    ("not JSON", letter("plain text", message_id="text"), "its body is not a JSON object"),
    ("a JSON array", letter("[1, 2]", message_id="array"), "its body is not a JSON object"),
    ("binary", letter(b"\x00\x01\xff", message_id="bin"), "its body is not a JSON object"),
    (
        "truncated",
        letter('{"a": 1}', message_id="cut", payload_bytes=100_000),
        "its body is not whole",
    ),
    (
        "foreign origin",
        letter(message_id="foreign", origin="celery"),
        'its origin "celery" is not a queue we own',
    ),
    (
        "a dead-letter origin",
        letter(message_id="dlq", origin="vibey.other.dlq"),
        'its origin "vibey.other.dlq" is a dead-letter queue',
    ),
    (
        "its own queue",
        letter(message_id="self", origin=DLQ),
        'its origin "vibey.jobs.dead" is the dead-letter queue it was read from',
    ),
    ("no origin", letter(message_id="orphan", origin=None), "its origin queue is unknown"),
]


@pytest.mark.parametrize(("what", "refused", "why"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_replay_is_refused_unless_allowed_and_nothing_is_recorded(
    pg_dsn: str,
    store: PostgresStore,
    settings: Settings,
    what: str,
    refused: DeadLetter,
    why: str,
) -> None:
    [verdict] = (await park(store, [refused])).parked
    gate = await gate_of(store, refused.identity)
    publisher = Unreachable()

    with pytest.raises(GateError) as caught:
        await answer_gate(sources(store, publisher), settings, gate.id, "replay")

    assert f"gate {gate.id}: replay refused, {why}" in str(caught.value)
    assert "nothing was sent or recorded" in str(caught.value)
    assert publisher.calls == 0
    assert (await gate_of(store, refused.identity)).is_open
    [(state,)] = await query(
        pg_dsn, "SELECT state FROM job WHERE id = $1", uuid.UUID(verdict.object)
    )
    assert state == "awaiting_human"
    # and dismiss still settles it
    await answer_gate(sources(store), settings, gate.id, "dismiss")
    assert (await gate_of(store, refused.identity)).answer == "dismiss"


async def test_an_allowed_replay_without_a_broker_records_nothing(
    store: PostgresStore, settings: Settings
) -> None:
    one, gate = await parked_gate(store, "no-broker")
    with pytest.raises(GateError, match="replay needs the broker"):
        await answer_gate(sources(store, None), settings, gate.id, "replay")
    assert (await gate_of(store, one.identity)).is_open


async def test_delivery_exhausted_gates_are_answered_by_the_store(
    pg_dsn: str, store: PostgresStore, settings: Settings
) -> None:
    job = leased(uuid.uuid4(), attempts=7, max_attempts=7)
    await insert_jobs(pg_dsn, [job])
    await reap_page(store)
    [gate] = await store.list_gates(GateFilter(kind="delivery_exhausted"))
    with pytest.raises(GateError, match="'dismiss' is not an answer"):
        await answer_gate(sources(store), settings, gate.id, "dismiss")

    outcome = answered_line(
        await answer_gate(sources(store), settings, gate.id, "retry", clock=lambda: LATER)
    )

    assert outcome == (
        f"gate {gate.id} (delivery_exhausted) answered 'retry': job {job.id} is ready for "
        "exactly one more delivery"
    )
    [(state,)] = await query(pg_dsn, "SELECT state FROM job WHERE id = $1", job.id)
    assert state == "ready"


class Unreachable:
    """Stands where the broker would: a refused replay must never reach it."""

    calls = 0

    async def publish(self, *args: Any, **kwargs: Any) -> bool:
        self.calls += 1
        raise AssertionError("a refused replay reached the broker")


def test_replay_message_ids_fit_amqp() -> None:
    from reaper.gates.answering import replay_message_id

    gate = uuid.UUID(int=1)
    assert replay_message_id("msg:m-1", gate) == f"replay:msg:m-1:{gate}"
    long_identity = "msg:" + "é" * 200
    expected = hashlib.sha256(long_identity.encode()).hexdigest()
    assert replay_message_id(long_identity, gate) == f"replay:sha256:{expected}:{gate}"
    assert len(replay_message_id(long_identity, gate).encode()) <= 255
