"""Quiet passes on every supported RabbitMQ version and a real PostgreSQL (SPEC §10 "Quiet is
cheap"): real dead letters (published and rejected by a real AMQP client, so the broker writes
their ``x-death`` headers) are parked once; a pass that finds nothing new reads no body; a new
letter among parked ones is found; twins with no message id are each parked; the unread
remainder is recorded again only in a higher power of ten; and no letter ever leaves the queue.
"""

from __future__ import annotations

import time
from pathlib import Path

import pika
import pytest

from reaper.config import Settings
from reaper.core.dead_letters import envelope
from reaper.core.domain import FLEET_PROJECT_ID, Source, sighting_scope
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.run import reap_once
from tests.conftest import BrokerUnderTest
from tests.integration.test_dead_letters_live import (
    outcome_of,
    read_all,
    settings_for,
    wait_for_depth,
)

pytestmark = [pytest.mark.broker, pytest.mark.postgres]

ORIGIN = "vibey.quiet.work"
DLQ = "vibey.quiet.dead"


@pytest.fixture
def settings(broker: BrokerUnderTest, pg_dsn: str, tmp_path: Path) -> Settings:
    return settings_for(broker, pg_dsn, tmp_path)


def amqp(broker: BrokerUnderTest) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            broker.amqp_port,
            broker.vhost,
            pika.PlainCredentials(broker.username, broker.password),
        )
    )


def declare(broker: BrokerUnderTest, origin: str = ORIGIN, dlq: str = DLQ) -> None:
    broker.declare_queue(dlq)
    broker.declare_queue(
        origin, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
    )


def dead_letter(
    broker: BrokerUnderTest, bodies: list[bytes], *, ids: bool, origin: str = ORIGIN
) -> None:
    """Publish ``bodies`` to ``origin`` over AMQP (with message ids, or with no properties at
    all) and reject each without requeueing: the broker dead-letters them to the DLQ."""
    connection = amqp(broker)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for body in bodies:
            props = pika.BasicProperties(message_id=body.decode()) if ids else None
            channel.basic_publish("", origin, body, props)
        for _ in bodies:
            method, _props, _body = channel.basic_get(origin)
            assert method is not None
            channel.basic_reject(method.delivery_tag, requeue=False)
    finally:
        connection.close()


def on_queue(broker: BrokerUnderTest, queue: str = DLQ) -> list[str]:
    """Every body on the queue, each put back: the broker's own count of what it holds."""
    return sorted(m["payload"] for m in read_all(broker, queue, 1000))


async def test_a_quiet_pass_reads_no_body_and_a_new_letter_is_found(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore
) -> None:
    declare(broker)
    dead_letter(broker, [b"named-1", b"named-2", b"named-3"], ids=True)
    dead_letter(broker, [b'{"plain": 1}', b'{"plain": 22}'], ids=False)
    await wait_for_depth(broker, DLQ, 5)
    before = on_queue(broker)
    assert len(before) == 5

    first = outcome_of(await reap_once(settings), DLQ)
    assert (first.parked_new, first.already_parked, first.unread, first.bodies_read) == (
        5,
        0,
        0,
        5,
    ), first
    started = time.monotonic()
    quiet = [outcome_of(await reap_once(settings), DLQ) for _ in range(3)]
    took = time.monotonic() - started
    assert [(q.parked_new, q.already_parked, q.unread, q.bodies_read) for q in quiet] == [
        (0, 5, 0, 0)
    ] * 3

    # a new letter with no message id arrives among the parked ones
    dead_letter(broker, [b'{"plain": 333}'], ids=False)
    await wait_for_depth(broker, DLQ, 6)
    found = outcome_of(await reap_once(settings), DLQ)
    assert (found.parked_new, found.already_parked, found.bodies_read) == (1, 5, 6), found
    again = outcome_of(await reap_once(settings), DLQ)
    assert (again.parked_new, again.already_parked, again.bodies_read) == (0, 6, 0), again

    assert on_queue(broker) == sorted([*before, '{"plain": 333}'])  # nothing ever removed
    assert len(await store.list_gates(open_only=False)) == 6
    print(f"\nRabbitMQ {broker.version}: 3 quiet passes in {took:.2f} s, 0 bodies read")


async def test_twins_with_no_message_id_are_each_parked_and_then_quiet(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore
) -> None:
    """Two id-less letters with the same body, dead-lettered in the same second: the same
    envelope and the same digest, yet two letters, each parked; a third twin is found."""
    for attempt in range(5):  # the two must die within one second (x-death time)
        origin, dlq = f"vibey.twins{attempt}.work", f"vibey.twins{attempt}.dead"
        declare(broker, origin, dlq)
        dead_letter(broker, [b'{"same": 1}', b'{"same": 1}'], ids=False, origin=origin)
        await wait_for_depth(broker, dlq, 2)
        messages = read_all(broker, dlq)
        if envelope(messages[0]) == envelope(messages[1]) is not None:
            break
    else:
        pytest.fail("no two twins died within one second in five attempts")

    first = outcome_of(await reap_once(settings), dlq)
    assert (first.parked_new, first.bodies_read) == (2, 2), first
    second = outcome_of(await reap_once(settings), dlq)
    assert (second.parked_new, second.already_parked, second.bodies_read) == (0, 2, 0), second

    identities = sorted(g.identity or "" for g in await store.list_gates(open_only=False))
    assert len(identities) == 2 and identities[1] == identities[0] + "#2"
    assert on_queue(broker, dlq) == ['{"same": 1}'] * 2


async def test_the_unread_remainder_is_recorded_again_when_it_crosses_ten(
    broker: BrokerUnderTest, pg_dsn: str, tmp_path: Path, store: PostgresStore
) -> None:
    """One letter parked per pass (peek limit 1): the remainder's sighting opens at bucket 1,
    again at 10 (closing the 1), and not on the passes in between."""
    base = settings_for(broker, pg_dsn, tmp_path)
    reap = base.queue.reap.model_copy(update={"dead_letter_peek_limit": 1})
    settings = base.model_copy(update={"queue": base.queue.model_copy(update={"reap": reap})})
    declare(broker)
    dead_letter(broker, [f"a-{i}".encode() for i in range(5)], ids=True)
    await wait_for_depth(broker, DLQ, 5)

    unread: list[int] = []
    for more in (0, 0, 9, 0, 0):
        if more:
            dead_letter(broker, [f"b-{i}".encode() for i in range(more)], ids=True)
            await wait_for_depth(broker, DLQ, 5 + more)
        outcome = outcome_of(await reap_once(settings), DLQ)
        unread.append(outcome.unread)
    assert unread == [4, 3, 11, 10, 9]

    records = [
        (e.payload["action"], e.payload.get("bucket"))
        for e in await store.events(FLEET_PROJECT_ID)
        if e.payload["queue"] == DLQ and e.payload["action"] in ("surface", "cleared")
    ]
    assert records == [("surface", 1), ("surface", 10), ("cleared", 1)]

    async with store.database.session("reading the open sightings") as conn:
        open_now = await conn.fetch(
            "SELECT scope, reaper_sighting_scope_v2(stream, payload) AS computed "
            "FROM reaper_open_sighting WHERE source = 'broker' AND condition = 'dead_letter'"
        )
    assert [(r["scope"], r["computed"]) for r in open_now] == [(f"{DLQ}#10", f"{DLQ}#10")]
    assert sighting_scope(Source.BROKER, FLEET_PROJECT_ID, DLQ, DLQ, 10) == f"{DLQ}#10"
    assert len(on_queue(broker)) == 14  # nothing ever removed
