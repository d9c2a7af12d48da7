"""What each RabbitMQ version does to a consumer that holds a delivery past its consumer timeout,
per queue type and per setting, with a real consumer (pika, manual ack, prefetch 1, holding its
first delivery: ``holders.py``) in a vhost of the test's own. These tests are the evidence
``reaper.broker.capabilities_for`` cites for what a version *enforces*.

Pinned with a timeout T of 2000 ms. "closed": the broker closes the consumer's channel, 406
PRECONDITION_FAILED "delivery acknowledgement on channel 1 timed out", 50 to 75 s after the
channel opened. "cancelled": a ``basic.cancel`` within a quorum tick after T from the delivery
(T to T + 5 s on a quiet node with RabbitMQ's default 5 s tick, T + 8.1 s once beside the whole
suite; at T with the test nodes' 1 s tick), the channel left open. Either way the delivery
returns to ready. "held": neither, 10 T after the delivery.

| setting                          | 3.10 (both types) | 4.0 (both) | 4.3 classic     | 4.3 quorum |
|----------------------------------|-------------------|------------|-----------------|------------|
| policy ``consumer-timeout``      | refused (400)     | closed     | held            | cancelled  |
| argument ``x-consumer-timeout``  | held past a tick  | closed     | declare refused | cancelled  |
| broker-wide ``consumer_timeout`` | closed            | closed     | held            | cancelled  |

On 3.10 and 4.0 the channel checks its deliveries on a 60 s tick counted from when it opened,
so a timeout is enforced between T and T + 60 s after the delivery. The broker-wide value is
changed on the node for a moment only (``holders.broker_wide_timeout``); 3.10 and 4.0 read it
when a channel opens, 4.3 when a consumer starts. The tests that watch a channel's tick take
about 60 to 75 s and are marked ``slow``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pika.exceptions
import pytest

from tests.support.holders import (
    Holder,
    broker_wide_timeout,
    connect,
    delivered,
    start,
    watch,
)
from tests.support.services import BrokerUnderTest

pytestmark = pytest.mark.broker

TIMEOUT_MS = 2000
T = TIMEOUT_MS / 1000
#: "Not enforced": still held this long after the delivery.
NOT_ENFORCED_WITHIN = 10 * T
#: When a 4.3 quorum queue cancels, counted from the delivery: with the default 5 s tick, T to
#: T + 5 s on a quiet node and 10.1 s (T + 8.1) once under the whole suite on two cores. The
#: bound is the default tick's, still well inside NOT_ENFORCED_WITHIN, so "cancelled" and "held"
#: cannot be mistaken for each other.
CANCELLED_WITHIN = (T - 0.5, T + 12.0)
#: When 3.10 and 4.0 close the channel, counted from channel open (the 60 s tick).
CLOSED_AFTER_OPEN = (50.0, 75.0)
#: How long a test watches for a close on the channel's tick; and how long a channel is
#: watched to show an ignored setting was not enforced at its first tick either.
TICK_WATCH = 80.0
PAST_FIRST_TICK = 75.0
CLOSE_TEXT = "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out"
STATS_WAIT = 30.0
TYPES = ("classic", "quorum")


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    """The test's holders, each closed at the end whatever happened."""
    made: list[Holder] = []
    yield made
    for h in made:
        h.close()


def arrange(
    broker: BrokerUnderTest,
    made: list[Holder],
    queue_types: tuple[str, ...] = TYPES,
    *,
    prefix: str = "ct",
    arguments: dict[str, object] | None = None,
) -> list[Holder]:
    """One queue per type holding one message, and a connected (not yet consuming) holder."""
    for queue_type in queue_types:
        name = f"{prefix}.{queue_type}"
        broker.declare_queue(name, queue_type=queue_type, arguments=arguments)
        broker.publish(name, "a job")
        h = Holder(broker, name)
        h.connect()
        made.append(h)
    return made


def put_policy(broker: BrokerUnderTest, definition: dict[str, object]) -> Any:
    return broker.put_policy(
        "ct", {"pattern": r"^ct\.", "apply-to": "queues", "definition": definition}
    )


def wait_for(holders: list[Holder], probe: Callable[[], bool], what: str) -> None:
    """Poll the management API while the holders' connections stay serviced."""
    deadline = time.monotonic() + STATS_WAIT
    while not probe():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {STATS_WAIT} s for {what}")
        watch(holders, 0.5, lambda: False)


def counts(broker: BrokerUnderTest, queue: str) -> tuple[object, object]:
    shown = broker.queue(queue)
    return shown.get("messages_ready"), shown.get("messages_unacknowledged")


def back_to_ready(holders: list[Holder], h: Holder) -> None:
    wait_for(holders, lambda: counts(h.broker, h.queue) == (1, 0), f"{h.queue} back to ready")


def still_unacknowledged(holders: list[Holder], h: Holder) -> None:
    wait_for(holders, lambda: counts(h.broker, h.queue) == (0, 1), f"{h.queue} held")


def by_type(holders: list[Holder]) -> dict[str, Holder]:
    return {h.queue.rsplit(".", 1)[-1]: h for h in holders}


# --------------------------------------------------------------------------- what is seen


def assert_closed_on_the_tick(h: Holder, timeout_ms: int = TIMEOUT_MS) -> None:
    """3.10 and 4.0: the channel closed with 406 on its 60 s tick; the delivery requeued."""
    print(h.figures())
    assert h.cancelled_at is None, h.figures()
    assert h.closed_at is not None, h.figures()
    assert h.close_code == 406, h.close_text
    assert CLOSE_TEXT in h.close_text
    assert f"Timeout value used: {timeout_ms} ms" in h.close_text
    after_open = h.since_open(h.closed_at)
    assert after_open is not None
    assert CLOSED_AFTER_OPEN[0] <= after_open <= CLOSED_AFTER_OPEN[1], h.figures()


def assert_cancelled_in_time(h: Holder) -> None:
    """4.3 quorum: basic.cancel when T has elapsed; the channel stays open."""
    print(h.figures())
    assert h.closed_at is None, h.figures()
    assert h.cancelled_at is not None, h.figures()
    after = h.since_consume(h.cancelled_at)
    assert after is not None
    assert CANCELLED_WITHIN[0] <= after <= CANCELLED_WITHIN[1], h.figures()
    assert h.channel.is_open
    assert h.deliveries == [False]  # nothing redelivered to the cancelled consumer


def assert_not_enforced(h: Holder, seconds: float) -> None:
    """Still held, neither cancelled nor closed, ``seconds`` after the delivery."""
    print(h.figures())
    assert not h.acted_on, h.figures()
    assert (h.since_consume(time.monotonic()) or 0) >= seconds
    assert h.channel.is_open


def watch_for_the_tick(holders: list[Holder]) -> None:
    watch(holders, TICK_WATCH, lambda: all(h.acted_on for h in holders))


def watch_43(holders: list[Holder]) -> None:
    """Until every holder has held NOT_ENFORCED_WITHIN after its delivery (a quorum holder is
    cancelled long before)."""
    until = max(h.consumed_at or 0.0 for h in holders) + NOT_ENFORCED_WITHIN
    watch(holders, until - time.monotonic() + 0.1, lambda: False)


def enforced_as_the_version_does(broker: BrokerUnderTest, holders: list[Holder]) -> None:
    """A timeout in force on both queue types: 4.3 cancels the quorum holder in time (proof
    the window was in force) and does not enforce it on the classic one within 10 T, whose
    message stays unacknowledged; earlier versions close every holder's channel on the tick
    and each message returns to ready."""
    held = by_type(holders)
    if broker.at_least(4, 3):
        watch_43(holders)
        assert_cancelled_in_time(held["quorum"])
        assert_not_enforced(held["classic"], NOT_ENFORCED_WITHIN)
        back_to_ready(holders, held["quorum"])
        still_unacknowledged(holders, held["classic"])
    else:
        watch_for_the_tick(holders)
        for h in holders:
            assert_closed_on_the_tick(h)
            back_to_ready(holders, h)


# --------------------------------------------------------------------------- policy


@pytest.mark.slow
def test_a_policy_timeout(broker: BrokerUnderTest, holders: list[Holder]) -> None:
    """The policy key ``consumer-timeout`` (the reaper's own policies carry it)."""
    if not broker.at_least(4, 0):
        refused = put_policy(broker, {"consumer-timeout": TIMEOUT_MS})
        assert refused.status_code == 400
        assert "not recognised policy settings" in refused.json()["reason"]
        return
    assert put_policy(broker, {"consumer-timeout": TIMEOUT_MS}).is_success
    arrange(broker, holders)
    # 4.3 fixes a quorum consumer's timeout when it starts: the policy must be in force first
    for h in holders:
        wait_for(holders, lambda h=h: broker.queue(h.queue).get("policy") == "ct", "the policy")
    start(holders)
    delivered(holders)
    enforced_as_the_version_does(broker, holders)


# --------------------------------------------------------------------------- argument


@pytest.mark.slow
def test_a_queue_argument_timeout(broker: BrokerUnderTest, holders: list[Holder]) -> None:
    """The queue argument ``x-consumer-timeout``; on 4.3 a classic queue refuses it
    (:func:`test_a_classic_queue_declare_with_x_consumer_timeout`), so quorum only there."""
    types = ("quorum",) if broker.at_least(4, 3) else TYPES
    arrange(broker, holders, types, arguments={"x-consumer-timeout": TIMEOUT_MS})
    start(holders)
    delivered(holders)
    held = by_type(holders)

    if broker.at_least(4, 3):
        watch(holders, CANCELLED_WITHIN[1] + 1, lambda: held["quorum"].acted_on)
        assert_cancelled_in_time(held["quorum"])
        back_to_ready(holders, held["quorum"])
    elif broker.at_least(4, 0):
        watch_for_the_tick(holders)
        for h in holders:
            assert_closed_on_the_tick(h)
            back_to_ready(holders, h)
    else:
        # 3.10 takes the argument and ignores it: nothing at the channel's first tick
        opened = min(h.opened_at or 0.0 for h in holders)
        watch(holders, opened + PAST_FIRST_TICK - time.monotonic(), lambda: False)
        for h in holders:
            assert_not_enforced(h, PAST_FIRST_TICK - 5)
            assert (h.since_open(time.monotonic()) or 0) >= PAST_FIRST_TICK
            still_unacknowledged(holders, h)


def test_a_classic_queue_declare_with_x_consumer_timeout(broker: BrokerUnderTest) -> None:
    """4.3.2+ refuse the argument on a classic queue (channel closed, 406); 3.10 and 4.0 take
    it (and 3.10 then ignores it: :func:`test_a_queue_argument_timeout`)."""
    connection = connect(broker)
    try:
        channel = connection.channel()
        declare = {
            "queue": "ct.arg-classic",
            "durable": True,
            "arguments": {"x-queue-type": "classic", "x-consumer-timeout": TIMEOUT_MS},
        }
        if broker.at_least(4, 3):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
                channel.queue_declare(**declare)
            assert caught.value.reply_code == 406
            assert (
                "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for queue "
                "'ct.arg-classic'" in caught.value.reply_text
            )
            assert "of queue type rabbit_classic_queue" in caught.value.reply_text
            with broker.admin() as admin:
                listed = admin.get(f"/api/queues/{broker.vhost_path}").json()
            assert [q["name"] for q in listed] == []
        else:
            channel.queue_declare(**declare)
            assert broker.queue("ct.arg-classic")["arguments"] == declare["arguments"]
    finally:
        connection.close()


# --------------------------------------------------------------------------- broker-wide


@pytest.mark.slow
def test_the_broker_wide_timeout(broker: BrokerUnderTest, holders: list[Holder]) -> None:
    """The node's ``consumer_timeout``, set to T only while the holders open their channels and
    consume (3.10 and 4.0 read it at channel open, 4.3 at basic.consume), then put back."""
    arrange(broker, holders)
    with broker_wide_timeout(broker, TIMEOUT_MS):
        for h in holders:
            h.start()
    delivered(holders)
    enforced_as_the_version_does(broker, holders)
