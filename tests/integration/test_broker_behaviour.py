"""Pins of upstream broker behaviour the reaper relies on, one test each, on every supported
RabbitMQ version. Each asserts the version-specific outcome explicitly, so an upgrade that
changes it fails here, not in production.

Observed on RabbitMQ 3.10.8, 4.0.5 and 4.3.6 (see each test for the detail; "4.x" is both 4.0
and 4.3):

1. policy key ``consumer-timeout``: 3.10 refuses (400), 4.x accepts. (Whether a version then
   *enforces* it is pinned with real consumers in ``test_consumer_timeout_enforcement.py``.)
2. ``apply-to: classic_queues|quorum_queues``: 3.10 refuses (400), 4.x accepts.
3. ``delivery-limit: -1``: 3.10 refuses (400), 4.x accepts (the queue lists "unlimited").
4. all: a policy carrying ``delivery-limit`` never attaches to a classic queue.
5. all: a quorum queue lists no ``head_message_timestamp`` key at all; a classic queue lists
   its head message's ``timestamp`` property (seconds).
6. 4.x: a quorum queue with no policy and no argument lists ``delivery_limit: 20`` (the only
   place the default shows: not in ``effective_policy_definition``, not in ``arguments``), and
   the 21st requeueing read drops the message. 3.10 lists no ``delivery_limit`` and has none.
7. all: a requeueing management read (``reject_requeue_true``) of a quorum queue is a
   delivery. With a delivery limit L and no dead-letter exchange, reads 1..L+1 return the
   message, the (L+1)-th shows ``x-delivery-count`` L, and its requeue drops the message: the
   queue empties with no further read. With no limit (3.10) or ``-1`` (4.x), 30 reads drop
   nothing.
8. ``x-delivery-count``: 3.10 sends it on every quorum read, 0 on the first; 4.x omits it on
   the first read (and a message with no other properties comes back with ``properties: []``),
   then 1, 2, ...: on all, it is the number of earlier deliveries. Classic queues send none.
9. CONTRARY TO SPEC §4 ("on 3.x a requeueing read moves a quorum message to the back"): where
   the message goes depends on the delivery limit on 3.10 and 4.0, and on nothing on 4.3. A
   quorum queue with no limit (3.10 by default, 4.0 with -1) moves it to the back; one with a
   finite limit (3.10 with x-delivery-limit, 4.0 by default) puts it back at the head, so
   repeated single reads hit, and spend, the same message. On 4.3 every quorum queue puts it
   back at the head, unlimited ones too. A classic queue always keeps it at the head.
10. all: a ``basic.get`` delivery still held (not acknowledged) counts in ``consumers`` on a
    quorum queue (one statistics interval later, until it is acknowledged), never on a classic
    queue, and is listed in ``/api/consumers`` on neither.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from reaper.broker.client import ManagementClient
from reaper.broker.http import BrokerRejected
from tests.support.holders import connect
from tests.support.services import BrokerUnderTest, policy_named, poll_until

pytestmark = pytest.mark.broker

STATS_WAIT_SECONDS = 20
QUORUM = "quorum"


async def wait_for(probe: Callable[[], Any], what: str) -> Any:
    return await poll_until(probe, what, STATS_WAIT_SECONDS)


def depth_is(broker: BrokerUnderTest, queue: str, messages: int) -> Callable[[], bool]:
    return lambda: broker.queue(queue).get("messages") == messages


def settled(broker: BrokerUnderTest, queue: str, messages: int) -> Callable[[], bool]:
    """Counts and the policy fields arrive separately, in either order: wait for both."""

    def probe() -> bool:
        shown = broker.queue(queue)
        return shown.get("messages") == messages and "policy" in shown and "consumers" in shown

    return probe


def carries(broker: BrokerUnderTest, queue: str, policy: str) -> Callable[[], bool]:
    return lambda: broker.queue(queue).get("policy") == policy


async def put_policy(
    client: ManagementClient, name: str, definition: dict[str, Any], apply_to: str = "queues"
) -> None:
    await client.put_policy(name, definition, pattern=f"^{name}\\.", apply_to=apply_to, priority=0)


def headers(message: dict[str, Any]) -> dict[str, Any]:
    return dict(message["properties"].get("headers") or {})


# --------------------------------------------------------------------------- 1-3 policy keys


async def test_1_policy_key_consumer_timeout(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    if broker.at_least(4, 0):
        await put_policy(client, "ct", {"consumer-timeout": 21_600_000})
        policy = await policy_named(client, "ct")
        assert policy is not None and policy.definition == {"consumer-timeout": 21_600_000}
    else:
        with pytest.raises(BrokerRejected) as caught:
            await put_policy(client, "ct", {"consumer-timeout": 21_600_000})
        assert caught.value.status == 400
        assert "not recognised policy settings" in caught.value.reason
        assert await policy_named(client, "ct") is None


@pytest.mark.parametrize("apply_to", ["quorum_queues", "classic_queues"])
async def test_2_apply_to_a_queue_type(
    broker: BrokerUnderTest, client: ManagementClient, apply_to: str
) -> None:
    if broker.at_least(4, 0):
        await put_policy(client, "typed", {"max-length": 1000}, apply_to=apply_to)
        policy = await policy_named(client, "typed")
        assert policy is not None and policy.apply_to == apply_to
    else:
        with pytest.raises(BrokerRejected) as caught:
            await put_policy(client, "typed", {"max-length": 1000}, apply_to=apply_to)
        assert caught.value.status == 400
        assert f"apply-to '{apply_to}' unrecognised" in caught.value.reason


async def test_3_unlimited_delivery_limit(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    if broker.at_least(4, 0):
        broker.declare_queue("dl.q", queue_type=QUORUM)
        await put_policy(client, "dl", {"delivery-limit": -1})
        await wait_for(carries(broker, "dl.q", "dl"), "the policy to attach")
        assert broker.queue("dl.q")["delivery_limit"] == "unlimited"
        assert (await client.queue("dl.q")).reported_delivery_limit == -1
    else:
        with pytest.raises(BrokerRejected) as caught:
            await put_policy(client, "dl", {"delivery-limit": -1})
        assert caught.value.status == 400
        assert "-1 is not a valid delivery limit" in caught.value.reason


# --------------------------------------------------------------------------- 4 attach


async def test_4_a_delivery_limit_policy_does_not_attach_to_a_classic_queue(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    broker.declare_queue("limited.c")
    broker.declare_queue("limited.q", queue_type=QUORUM)
    broker.declare_queue("plain.c")
    await put_policy(client, "limited", {"delivery-limit": 5, "max-length": 1000})
    await put_policy(client, "plain", {"max-length": 1000})

    await wait_for(carries(broker, "plain.c", "plain"), "the plain policy on a classic queue")
    await wait_for(carries(broker, "limited.q", "limited"), "the limited policy on a quorum queue")
    await wait_for(settled(broker, "limited.c", 0), "the classic queue's statistics")
    classic = broker.queue("limited.c")
    assert classic["policy"] is None
    assert classic["effective_policy_definition"] == {}
    stats = await client.queue("limited.c")
    assert stats.policy_known and stats.policy is None


# --------------------------------------------------------------------------- 5 head timestamp


async def test_5_quorum_queues_report_no_head_message_timestamp(broker: BrokerUnderTest) -> None:
    stamp = int(time.time()) - 120
    for name, queue_type in (("ts.c", "classic"), ("ts.q", QUORUM)):
        broker.declare_queue(name, queue_type=queue_type)
        broker.publish(name, "x", properties={"timestamp": stamp})

    def classic_stamped() -> bool:
        return broker.queue("ts.c").get("head_message_timestamp") == stamp

    await wait_for(classic_stamped, "the classic queue's head timestamp")
    await wait_for(settled(broker, "ts.q", 1), "the quorum queue's statistics")
    quorum = broker.queue("ts.q")
    assert "head_message_timestamp" not in quorum
    assert quorum["messages_ready"] == 1


# --------------------------------------------------------------------------- 6 default limit


async def test_6_the_default_quorum_delivery_limit(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    broker.declare_queue("default.q", queue_type=QUORUM)
    broker.publish("default.q", "poison")

    await wait_for(settled(broker, "default.q", 1), "the queue's statistics")
    shown = broker.queue("default.q")
    assert shown["effective_policy_definition"] == {}
    assert shown["arguments"] == {"x-queue-type": "quorum"}
    listed = {q.name: q for q in await client.list_queues()}["default.q"]

    reads = 0
    while await client.get_messages("default.q", 1):
        reads += 1
        if reads > 30:
            break
    if broker.at_least(4, 0):
        assert shown["delivery_limit"] == 20
        assert listed.reported_delivery_limit == 20
        assert reads == 21  # the 21st read shows x-delivery-count 20 and its requeue drops it
        await wait_for(depth_is(broker, "default.q", 0), "the dropped message to leave")
    else:
        assert "delivery_limit" not in shown
        assert listed.reported_delivery_limit is None
        assert reads == 31  # stopped by us: nothing dropped
        await wait_for(depth_is(broker, "default.q", 1), "the message to be counted")


# --------------------------------------------------------------------------- 7 reads spend


async def test_7_a_requeueing_read_spends_the_delivery_limit_and_then_drops(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    broker.declare_queue("spent.dead", queue_type=QUORUM)
    await put_policy(client, "spent", {"delivery-limit": 2})
    await wait_for(carries(broker, "spent.dead", "spent"), "the delivery-limit policy")
    broker.publish("spent.dead", "dead letter")

    counts = []
    for _ in range(3):
        [message] = await client.get_messages("spent.dead", 1)
        assert message["payload"] == "dead letter"
        counts.append(headers(message).get("x-delivery-count", 0))
    assert counts == [0, 1, 2]
    # The third read's requeue spent the limit: the message leaves with no further read.
    await wait_for(depth_is(broker, "spent.dead", 0), "the message to be dropped")
    assert await client.get_messages("spent.dead", 1) == []


async def test_7_with_no_limit_many_reads_drop_nothing(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    broker.declare_queue("keep.dead", queue_type=QUORUM)
    if broker.at_least(4, 0):
        # Without it 4.0's default of 20 applies (test 6).
        await put_policy(client, "keep", {"delivery-limit": -1})
        await wait_for(carries(broker, "keep.dead", "keep"), "the unlimited policy")
    broker.publish("keep.dead", "dead letter")

    for read in range(30):
        [message] = await client.get_messages("keep.dead", 1)
        assert headers(message).get("x-delivery-count", 0) == read
    await wait_for(depth_is(broker, "keep.dead", 1), "the message to be counted")
    [message] = await client.get_messages("keep.dead", 1)
    assert headers(message)["x-delivery-count"] == 30


# --------------------------------------------------------------------------- 8 delivery count


async def test_8_x_delivery_count_counts_earlier_deliveries(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    broker.declare_queue("count.q", queue_type=QUORUM)
    broker.declare_queue("count.c")
    broker.publish("count.q", "a")
    broker.publish("count.c", "a")

    quorum = [await client.get_messages("count.q", 1) for _ in range(3)]
    first = quorum[0][0]
    if broker.at_least(4, 0):
        assert "x-delivery-count" not in headers(first)
        raw = await _raw_get(broker, "count.q")  # one more read: count 3 now
        assert raw["properties"]["headers"]["x-delivery-count"] == 3
    else:
        assert headers(first)["x-delivery-count"] == 0
    assert [headers(m[0])["x-delivery-count"] for m in quorum[1:]] == [1, 2]
    assert [m[0]["redelivered"] for m in quorum] == [False, True, True]

    classic = [await client.get_messages("count.c", 1) for _ in range(3)]
    assert all("x-delivery-count" not in headers(m[0]) for m in classic)
    assert [m[0]["redelivered"] for m in classic] == [False, True, True]


async def test_8_a_message_with_no_properties_comes_back_with_an_empty_list(
    broker: BrokerUnderTest,
) -> None:
    # Why ManagementClient.get_messages turns ``properties`` into a mapping.
    broker.declare_queue("bare.c")
    broker.publish("bare.c", "a")
    assert (await _raw_get(broker, "bare.c"))["properties"] == []


async def _raw_get(broker: BrokerUnderTest, queue: str) -> dict[str, Any]:
    with broker.admin() as admin:
        r = admin.post(
            f"/api/queues/{broker.vhost_path}/{queue}/get",
            json={"count": 1, "ackmode": "reject_requeue_true", "encoding": "auto"},
        )
        r.raise_for_status()
        [message] = r.json()
        return dict(message)


# --------------------------------------------------------------------------- 9 order


async def test_9_where_a_requeueing_read_puts_the_message(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    # On 3.10 and 4.0 the rule is the delivery limit, not the version: a quorum queue with no
    # limit (3.10's default, 4.0's -1) moves the read message to the back; one with a finite
    # limit (3.10's x-delivery-limit, 4.0's default 20 or any explicit value) puts it back at
    # the head, so single reads keep hitting, and spending, the same message. 4.3 puts it back
    # at the head whatever the limit. Classic: always the head.
    four = broker.at_least(4, 0)
    unlimited: dict[str, object] = {"x-delivery-limit": -1} if four else {}
    queues: dict[str, tuple[str, dict[str, object]]] = {
        "order.unlimited": (QUORUM, unlimited),
        "order.limited": (QUORUM, {"x-delivery-limit": 100}),
        "order.default": (QUORUM, {}),
        "order.classic": ("classic", {}),
    }
    for name, (queue_type, arguments) in queues.items():
        broker.declare_queue(name, queue_type=queue_type, arguments=arguments)
        for i in range(3):
            broker.publish(name, f"m{i}")

    async def singles(name: str) -> list[str]:
        return [(await client.get_messages(name, 1))[0]["payload"] for _ in range(6)]

    to_the_back = ["m0", "m1", "m2", "m0", "m1", "m2"]
    at_the_head = ["m0"] * 6
    unlimited_order = at_the_head if broker.at_least(4, 3) else to_the_back
    assert await singles("order.unlimited") == unlimited_order
    assert await singles("order.limited") == at_the_head
    assert await singles("order.default") == (at_the_head if four else to_the_back)
    assert await singles("order.classic") == at_the_head
    # A read of several at once returns them in the queue's current order either way.
    for name in queues:
        assert [m["payload"] for m in await client.get_messages(name, 3)] == ["m0", "m1", "m2"]


# --------------------------------------------------------------------------- 10 basic.get


def test_10_a_basic_get_holder_counts_as_a_consumer_on_quorum_queues_only(
    broker: BrokerUnderTest,
) -> None:
    # Why holder_gone on a classic queue says a basic.get holder may be behind it
    # (BrokerFacts.get_holder_counted_as_consumer). No /api/consumers entry either way.
    broker.declare_queue("get.c")
    broker.declare_queue("get.q", queue_type=QUORUM)
    for name in ("get.c", "get.q"):
        broker.publish(name, "held by a get")
    connection = connect(broker)
    try:
        channel = connection.channel()
        tags = {
            name: channel.basic_get(name, auto_ack=False)[0].delivery_tag
            for name in ("get.c", "get.q")
        }

        def both_held() -> tuple[dict[str, Any], dict[str, Any]] | None:
            # one listing of each, whole: a quorum queue's counts can arrive a sample apart
            connection.process_data_events(time_limit=0.5)
            c, q = broker.queue("get.c"), broker.queue("get.q")
            held = c.get("messages_unacknowledged") == 1 and q.get("consumers") == 1
            return (c, q) if held and q.get("messages_unacknowledged") == 1 else None

        deadline = time.monotonic() + STATS_WAIT_SECONDS
        while (held := both_held()) is None:
            assert time.monotonic() < deadline, "the held gets were not counted"
        classic, _ = held
        assert classic["consumers"] == 0
        with broker.admin() as admin:
            assert admin.get(f"/api/consumers/{broker.vhost_path}").json() == []

        for tag in tags.values():
            channel.basic_ack(tag)
        deadline = time.monotonic() + STATS_WAIT_SECONDS
        while broker.queue("get.q").get("consumers") != 0:
            assert time.monotonic() < deadline, "the acknowledged get still counts"
            connection.process_data_events(time_limit=0.5)
    finally:
        connection.close()
