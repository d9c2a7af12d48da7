"""Held deliveries and wedged queues, measured by observation across passes, on every broker
with real AMQP consumers (pika): a consumer that stops acknowledging is a ``hung_handler`` once
it has held its delivery past ``longest_lease_seconds`` (the one guard a classic queue has on
RabbitMQ 4.3, which enforces no consumer timeout there); a queue whose consumers hold their
whole prefetch while messages wait is wedged (``stale_ready``); a quorum queue, which reports no
head timestamp, gets a lower bound for its head's age. Each clears when the consumer recovers.

The broker refreshes its statistics every ``STATS_INTERVAL_SECONDS``, so each step waits for the
management API to show the state before the pass that is to see it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from reaper.config import Settings, load_config
from reaper.core.domain import Action, Condition
from reaper.reap.result import PassResult
from reaper.reap.run import reap_once
from tests.support.holders import connect
from tests.support.services import STATS_SETTLE_SECONDS, BrokerUnderTest, poll_until

pytestmark = [pytest.mark.broker, pytest.mark.postgres]

#: Short thresholds, so a test waits seconds, not hours.
LONGEST_LEASE = 3
STALE_READY = 3


def settings_for(pg_dsn: str, broker: BrokerUnderTest) -> Settings:
    env = {
        "REAPER_DATABASE__DSN": pg_dsn,
        "REAPER_BUS__MANAGEMENT_URL": broker.management_url,
        "REAPER_BUS__VHOST": broker.vhost,
        "REAPER_QUEUE__REAP__LONGEST_LEASE_SECONDS": str(LONGEST_LEASE),
        "REAPER_QUEUE__REAP__STALE_READY_SECONDS": str(STALE_READY),
        "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "0",
    }
    return load_config(None, env).settings


class Consumer:
    """One pika consumer, manual ack, prefetch 1, that holds what it gets until told."""

    def __init__(self, broker: BrokerUnderTest, queue: str) -> None:
        self.connection = connect(broker)
        self.channel = self.connection.channel()
        self.channel.basic_qos(prefetch_count=1)
        self.held: list[Any] = []
        self.channel.basic_consume(queue, lambda ch, method, props, body: self.held.append(method))

    def service(self, seconds: float = 0.2) -> None:
        self.connection.process_data_events(time_limit=seconds)

    def ack_all(self) -> None:
        """Recover: acknowledge what it holds, and keep acknowledging until nothing comes."""
        for _ in range(20):
            self.service()
            while self.held:
                self.channel.basic_ack(self.held.pop().delivery_tag)
        self.service()

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    opened: list[Consumer] = []
    yield opened
    for consumer in opened:
        consumer.close()


async def a_pass(settings: Settings) -> PassResult:
    result = await reap_once(settings)
    assert not result.unreadable, result.unreadable
    return result


def found(result: PassResult, queue: str, condition: Condition) -> list[Any]:
    """The surfaced verdicts of ``condition`` on ``queue`` (not the records that clear one)."""
    return [
        r
        for r in result.verdicts
        if r.verdict.queue == queue
        and r.verdict.condition is condition
        and r.verdict.action is Action.SURFACE
    ]


def publish(broker: BrokerUnderTest, queue: str, count: int) -> None:
    for n in range(count):
        broker.publish(queue, f"job {n}", properties={"delivery_mode": 2})


async def shows(broker: BrokerUnderTest, queue: str, **expected: int) -> None:
    """Until the management API shows ``queue`` with the expected counts."""

    def probe() -> bool:
        q = broker.queue(queue)
        return all(q.get(key) == value for key, value in expected.items())

    await poll_until(probe, f"{queue} showing {expected}", 30)


async def holding_shown(broker: BrokerUnderTest) -> None:
    """Until the management API's channel listing shows a channel holding a delivery (its
    statistics refresh apart from the queue's)."""

    def probe() -> bool:
        with broker.admin() as client:
            channels = client.get(
                f"/api/vhosts/{broker.vhost_path}/channels",
                params={"columns": "name,messages_unacknowledged"},
            ).json()
        return any(c.get("messages_unacknowledged") for c in channels)

    await poll_until(probe, "a channel holding a delivery", 30)


async def test_a_consumer_that_stops_acknowledging_is_a_hung_handler_until_it_recovers(
    pg_dsn: str, broker: BrokerUnderTest, consumers: list[Consumer]
) -> None:
    queue = f"vibey.jobs.held.{uuid.uuid4().hex[:6]}"
    broker.declare_queue(queue)  # classic: on 4.3 nothing else bounds it
    publish(broker, queue, 1)
    consumer = Consumer(broker, queue)
    consumers.append(consumer)
    consumer.service(1)
    assert len(consumer.held) == 1
    await shows(broker, queue, messages_unacknowledged=1, consumers=1)
    await holding_shown(broker)
    settings = settings_for(pg_dsn, broker)

    first = await a_pass(settings)
    assert found(first, queue, Condition.HUNG_HANDLER) == []  # watched from now, not guessed
    await asyncio.sleep(LONGEST_LEASE + 1)
    consumer.service()

    second = await a_pass(settings)
    (hung,) = found(second, queue, Condition.HUNG_HANDLER)
    assert hung.recorded and hung.verdict.action is Action.SURFACE
    assert hung.verdict.measured > LONGEST_LEASE
    assert "without acknowledging anything for at least" in hung.verdict.detail

    consumer.ack_all()
    await shows(broker, queue, messages_unacknowledged=0)
    await asyncio.sleep(STATS_SETTLE_SECONDS)  # the channel's counters refresh too

    third = await a_pass(settings)
    assert found(third, queue, Condition.HUNG_HANDLER) == []
    cleared = [
        v for v in third.verdicts if v.verdict.action is Action.CLEARED and v.verdict.queue == queue
    ]
    assert Condition.HUNG_HANDLER in [v.verdict.condition for v in cleared]


async def test_a_queue_whose_consumers_hold_their_prefetch_is_wedged_until_they_recover(
    pg_dsn: str, broker: BrokerUnderTest, consumers: list[Consumer]
) -> None:
    queue = f"vibey.jobs.wedged.{uuid.uuid4().hex[:6]}"
    broker.declare_queue(queue, queue_type="quorum")
    publish(broker, queue, 4)
    consumer = Consumer(broker, queue)
    consumers.append(consumer)
    consumer.service(1)
    await shows(broker, queue, messages_ready=3, messages_unacknowledged=1, consumers=1)
    settings = settings_for(pg_dsn, broker)

    first = await a_pass(settings)
    assert found(first, queue, Condition.STALE_READY) == []
    await asyncio.sleep(STALE_READY + 1)
    consumer.service()

    second = await a_pass(settings)
    (wedged,) = found(second, queue, Condition.STALE_READY)
    assert wedged.recorded and wedged.verdict.measured > STALE_READY
    assert wedged.verdict.detail.startswith("wedged: 3 ready message(s) and 1 consumer(s)")

    consumer.ack_all()
    await shows(broker, queue, messages_ready=0, messages_unacknowledged=0)

    third = await a_pass(settings)
    assert found(third, queue, Condition.STALE_READY) == []
    assert any(
        v.verdict.action is Action.CLEARED and v.verdict.condition is Condition.STALE_READY
        for v in third.verdicts
        if v.verdict.queue == queue
    )


async def test_a_quorum_queue_with_no_consumer_gets_a_lower_bound_for_its_head_age(
    pg_dsn: str, broker: BrokerUnderTest
) -> None:
    queue = f"vibey.jobs.waiting.{uuid.uuid4().hex[:6]}"
    broker.declare_queue(queue, queue_type="quorum")
    publish(broker, queue, 2)
    await shows(broker, queue, messages_ready=2, consumers=0)
    settings = settings_for(pg_dsn, broker)

    first = await a_pass(settings)
    assert found(first, queue, Condition.STALE_READY) == []
    assert not any(queue in note and "not measured" in note for note in first.notes)
    await asyncio.sleep(STALE_READY + 1)

    second = await a_pass(settings)
    (stale,) = found(second, queue, Condition.STALE_READY)
    assert stale.verdict.measured > STALE_READY
    assert "head message waiting at least" in stale.verdict.detail

    # A message taken from the queue moves its counter: the measurement starts again.
    connection = connect(broker)
    try:
        channel = connection.channel()
        method, _, _ = channel.basic_get(queue, auto_ack=True)
        assert isinstance(method, pika.spec.Basic.GetOk)
    finally:
        connection.close()
    await shows(broker, queue, messages_ready=1)
    await asyncio.sleep(STATS_SETTLE_SECONDS)

    third = await a_pass(settings)
    assert found(third, queue, Condition.STALE_READY) == []
