"""The demo waits only for what the broker reports: over LavinMQ 2.9.1's recorded answers (no
head-message timestamp on any queue) a seeded queue is settled once its counts and policy show,
where on RabbitMQ a classic queue's timestamp is still awaited; and the demo names the product
it talks to."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from reaper.broker.capabilities import capabilities_for
from reaper.broker.client import ManagementClient
from reaper.core.domain import QueueStats
from reaper.core.head_age import head_age_reported
from reaper.demo.scenario import Scenario
from reaper.demo.seed import settled
from tests.support.lavinmq_recorded import VHOST, RecordedLavinMQ

#: vibey.jobs.old holds 3 messages whose AMQP timestamp is an hour old (the recordings' README).
OLD = "vibey.jobs.old"


def scenario(facts_product: str, version: str, queue: QueueStats) -> Scenario:
    return Scenario(
        now=datetime(2026, 12, 1, 20, 33, tzinfo=UTC),
        vhost=VHOST,
        broker=capabilities_for(facts_product, version),
        projects=(),
        jobs=0,
        expired_leases=(),
        poison=(),
        live_leases=(),
        stale_heads={},
        not_claimable=(),
        fresh_ready=(),
        queues={queue.name: queue.type or "classic"},
        messages={queue.name: queue.messages or 0},
        dead_letter_queue="vibey.jobs.dead",
        dead_letters=(),
        foreign_queues=(),
        foreign_dead_letter_queue="celery.dead",
        stale_queues=(queue.name,),
        delay_queue="vibey.jobs.wait.w5m",
        policies_written=(),
        drifted_policy=None,
    )


async def recorded_queue(name: str) -> QueueStats:
    client = ManagementClient(
        "http://lavinmq.test:15690", "guest", "guest", vhost=VHOST, transport=RecordedLavinMQ()
    )
    try:
        await client.facts()
        return next(q for q in await client.list_queues() if q.name == name)
    finally:
        await client.aclose()


async def test_on_lavinmq_a_queue_is_settled_without_a_head_timestamp() -> None:
    queue = await recorded_queue(OLD)
    assert queue.head_message_timestamp is None and queue.messages == 3
    on_lavinmq = scenario("LavinMQ", "2.9.1", queue)
    assert not head_age_reported(queue, on_lavinmq.broker)
    assert settled(queue, on_lavinmq, ())


async def test_on_rabbitmq_a_classic_queue_waits_for_its_head_timestamp() -> None:
    listed = replace(await recorded_queue(OLD), type="classic")
    on_rabbitmq = scenario("RabbitMQ", "3.10.8", listed)
    assert head_age_reported(listed, on_rabbitmq.broker)
    assert not settled(listed, on_rabbitmq, ())
    assert settled(replace(listed, head_message_timestamp=1796153493), on_rabbitmq, ())


async def test_the_demo_names_the_product_it_talks_to() -> None:
    queue = await recorded_queue(OLD)
    said = scenario("LavinMQ", "2.9.1", queue).describe()
    assert any(line.startswith("LavinMQ 2.9.1, vhost 'vibey'") for line in said), said
    assert not any("RabbitMQ" in line for line in said), said
