"""The reaper never makes the broker drop a message, live on every broker (SPEC §1 (c), §4): a
pass writes a finite delivery limit only where the owned quorum queues it reaches dead-letter,
and where one does not, it withholds the limit and is not ok. A real AMQP client then spends
the deliveries (``basic.get`` and ``basic.nack`` with requeue) to show what the limit in force
does to the message: dead-lettered where the reaper wrote it; on 3.10 (no default limit) never
dropped; on 4.x dropped at the broker's own default of 20, which the pass names as the
``would_drop`` finding with its fix."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from reaper.config import Settings
from reaper.edges.report import render_text
from reaper.reap.run import reap_once
from tests.support.holders import connect
from tests.support.services import BrokerUnderTest, poll_until

pytestmark = [pytest.mark.broker, pytest.mark.postgres]

QUEUE = "vibey.jobs.main"
DEAD = "vibey.jobs.main.dlq"
#: More deliveries than any limit in play (the declared 20, 4.x's default 20).
DELIVERIES = 25


def settings_for(pg_dsn: str, broker: BrokerUnderTest) -> Settings:
    return Settings.model_validate(
        {
            "database": {"dsn": pg_dsn},
            "bus": {
                "management_url": broker.management_url,
                "vhost": broker.vhost,
                "username": broker.username,
                "password": broker.password,
            },
            "queue": {"reap": {"policy_verify_wait_seconds": 15}},
        }
    )


def spend_deliveries(broker: BrokerUnderTest, queue: str, times: int) -> int:
    """Consume the queue's message and reject it back (requeue), ``times`` times or until it
    stops coming; how many times it came. A consumer's reject is what every version counts as
    a failed delivery (measured: on 4.3 a ``basic.get`` handed back is not counted)."""
    connection = connect(broker)
    came = 0
    last = time.monotonic()
    try:
        channel: Any = connection.channel()
        channel.basic_qos(prefetch_count=1)

        def rejected(ch: Any, method: Any, _properties: Any, _body: bytes) -> None:
            nonlocal came, last
            came, last = came + 1, time.monotonic()
            ch.basic_reject(method.delivery_tag, requeue=True)

        channel.basic_consume(queue, rejected)
        while came < times and time.monotonic() - last < 2.0:
            connection.process_data_events(time_limit=0.1)
        return came
    finally:
        connection.close()


def depth(broker: BrokerUnderTest, queue: str) -> int:
    """Messages in ``queue``, asked of the broker over AMQP (a passive declare: no stats lag)."""
    connection = connect(broker)
    try:
        channel: Any = connection.channel()
        return int(channel.queue_declare(queue, passive=True).method.message_count)
    finally:
        connection.close()


async def listed_with_statistics(broker: BrokerUnderTest, queue: str) -> None:
    """Until the broker lists the queue's statistics (and so its policy): before that a pass
    concludes nothing about it."""

    def listed() -> bool:
        shown = broker.queue(queue)
        return "messages" in shown and "policy" in shown

    await poll_until(listed, f"statistics of {queue}", 30)


def quorum_policy(broker: BrokerUnderTest) -> dict[str, object] | None:
    with broker.admin() as client:
        r = client.get(f"/api/policies/{broker.vhost_path}")
        r.raise_for_status()
        found = [p for p in r.json() if p["name"] == "vibey-reap-quorum"]
    return dict(found[0]["definition"]) if found else None


async def test_no_limit_is_written_where_it_would_drop_and_the_pass_is_not_ok(
    broker: BrokerUnderTest, pg_dsn: str
) -> None:
    broker.declare_queue(QUEUE, queue_type="quorum")  # no dead-letter exchange
    broker.publish(QUEUE, '{"job": 1}')
    await listed_with_statistics(broker, QUEUE)

    result = await reap_once(settings_for(pg_dsn, broker))

    held = quorum_policy(broker)
    assert held is None or "delivery-limit" not in held, held
    assert not result.ok
    problems = {(p.kind, p.subject): p for p in result.problems()}
    withheld = problems[("policy", "vibey-reap-quorum")]
    assert "delivery-limit 20 withheld: vibey.jobs.main has no dead-letter" in withheld.detail
    assert "declare each with x-dead-letter-exchange" in withheld.detail
    [outcome] = [p for p in result.policies.outcomes if p.name == "vibey-reap-quorum"]
    assert outcome.reason == "DeliveryLimitWithheld"
    # 4.x: written with its consumer timeout alone; 3.10 takes no consumer-timeout key, so
    # without its limit there is nothing of the policy to write
    assert outcome.action == ("created" if broker.at_least(4, 0) else "unsupported")
    text = render_text(result)
    assert text.splitlines()[0].startswith("queue-reaper pass: NOT OK: ")

    came = await asyncio.to_thread(spend_deliveries, broker, QUEUE, DELIVERIES)
    if broker.at_least(4, 0):
        # 4.x gives every quorum queue a limit of 20: the pass said it would drop, and it does
        drop = problems[("would_drop", f"queue {QUEUE}")]
        assert "would drop, not dead-letter" in drop.detail and "x-dead-letter-exchange" in drop.fix
        assert came <= 21
        await poll_until(lambda: depth(broker, QUEUE) == 0, "the broker to drop it", 10)
    else:
        # 3.10 has no default limit: with none written, the message is never dropped
        assert ("would_drop", f"queue {QUEUE}") not in problems
        assert came == DELIVERIES and await asyncio.to_thread(depth, broker, QUEUE) == 1


async def test_a_limit_is_written_where_the_queue_dead_letters_and_the_message_is_kept(
    broker: BrokerUnderTest, pg_dsn: str
) -> None:
    broker.declare_queue(DEAD, queue_type="quorum")
    broker.declare_queue(
        QUEUE,
        queue_type="quorum",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": DEAD},
    )
    broker.publish(QUEUE, '{"job": 2}')
    await listed_with_statistics(broker, QUEUE)

    result = await reap_once(settings_for(pg_dsn, broker))

    assert (quorum_policy(broker) or {}).get("delivery-limit") == 20
    subjects = {(p.kind, p.subject) for p in result.problems()}
    assert ("policy", "vibey-reap-quorum") not in subjects
    assert not [s for k, s in subjects if k == "would_drop"]

    came = await asyncio.to_thread(spend_deliveries, broker, QUEUE, DELIVERIES)
    assert came <= 21  # the limit ended its deliveries
    # dead-lettered, not dropped
    await poll_until(lambda: depth(broker, DEAD) == 1, "the message in the dead-letter queue", 10)
    assert await asyncio.to_thread(depth, broker, QUEUE) == 0
