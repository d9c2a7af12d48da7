"""Seeding a proof scenario on the broker: dead-letter queues filled through a real origin queue,
a foreign tenant's queue, and waits for their depths as the management statistics show them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from tests.support.invariants.expectation import (
    FOREIGN_DLQ,
    OWNED_DLQ,
    OWNED_ORIGIN,
    PUBLISHERS,
    STATS_WAIT_SECONDS,
    Seeded,
)
from tests.support.services import BrokerUnderTest


def queue_path(broker: BrokerUnderTest, name: str) -> str:
    return f"/api/queues/{broker.vhost_path}/{quote(name, safe='')}"


def declare_dead_letter_queues(
    broker: BrokerUnderTest,
    dlq: str = OWNED_DLQ,
    origin: str = OWNED_ORIGIN,
    *,
    dlq_type: str = "quorum",
) -> None:
    """An owned dead-letter queue and the owned work queue that dead-letters into it (a quorum
    queue: RabbitMQ 4.0 takes ~100 ms to accept one message published to a classic queue
    through the management API, ~10 ms for a quorum queue)."""
    broker.declare_queue(dlq, queue_type=dlq_type)
    declare_origin(broker, origin, dlq)


def declare_origin(broker: BrokerUnderTest, origin: str, dlq: str) -> None:
    """An owned quorum work queue that dead-letters into ``dlq``."""
    broker.declare_queue(
        origin,
        queue_type="quorum",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq},
    )


def dead_letter_through(
    broker: BrokerUnderTest,
    seeded: Seeded,
    count: int,
    *,
    dlq: str = OWNED_DLQ,
    origin: str = OWNED_ORIGIN,
    tag: str = "",
) -> list[str]:
    """``count`` real dead letters: published to ``origin`` (empty) and rejected there without
    requeueing, so the broker itself writes ``x-death`` and moves them to ``dlq``. The caller
    waits for ``dlq`` to show them (``wait_for_depth``): that also proves none was lost."""
    start = len(seeded.dead_letters.setdefault(dlq, []))
    bodies = [
        json.dumps({"task": start + i, "queue": dlq, "tag": tag}, sort_keys=True)
        for i in range(count)
    ]
    with broker.admin() as admin:

        def publish(i: int) -> None:
            r = admin.post(
                f"/api/exchanges/{broker.vhost_path}/amq.default/publish",
                json={
                    "properties": {"message_id": f"{dlq}-{tag}-{start + i}"},
                    "routing_key": origin,
                    "payload": bodies[i],
                    "payload_encoding": "string",
                },
            )
            r.raise_for_status()
            assert r.json()["routed"], f"not routed to {origin}"

        # one message per request: a few requests at once overlap the broker's latency
        with ThreadPoolExecutor(PUBLISHERS) as pool:
            list(pool.map(publish, range(count)))
        # A get of many messages with reject_requeue_false dead-letters only some of them on
        # a quorum queue (measured: 33 of 100 on 3.10 and 4.0); the rest go back to the
        # origin, ready. So: reject until the origin has stayed empty for a moment.
        empty_reads = 0
        while empty_reads < 2:
            got = admin.post(
                f"{queue_path(broker, origin)}/get",
                json={"count": 100, "ackmode": "reject_requeue_false", "encoding": "auto"},
            )
            got.raise_for_status()
            if got.json():
                empty_reads = 0
            else:
                empty_reads += 1
                time.sleep(0.2)
    seeded.dead_letters[dlq].extend(bodies)
    return bodies


def seed_foreign(
    broker: BrokerUnderTest, seeded: Seeded, count: int = 3, queue: str = FOREIGN_DLQ
) -> None:
    """A foreign dead-letter queue holding ``count`` messages: surfaced, never read."""
    broker.declare_queue(queue, queue_type="quorum")
    for i in range(count):
        broker.publish(queue, json.dumps({"theirs": i}), properties={"message_id": f"theirs-{i}"})
    seeded.untouched[queue] = seeded.untouched.get(queue, 0) + count


def listed(broker: BrokerUnderTest, queue: str) -> dict[str, Any] | None:
    """The queue as the management API shows it now, or None when there is no such queue."""
    with broker.admin() as admin:
        r = admin.get(queue_path(broker, queue))
        if r.status_code == 404:
            return None
        r.raise_for_status()
        result: dict[str, Any] = r.json()
        return result


async def seed_dead_letter_queues(
    broker: BrokerUnderTest, seeded: Seeded, counts: Mapping[str, int], *, tag: str
) -> None:
    """For each ``origin: count``: ``origin`` and its dead-letter queue ``<origin>.dead``
    declared and ``count`` letters tagged ``tag`` dead-lettered through them; back once the
    broker shows every dead-letter queue of ``seeded`` at its depth."""
    for origin, count in counts.items():
        dlq = f"{origin}.dead"
        declare_dead_letter_queues(broker, dlq, origin)
        dead_letter_through(broker, seeded, count, dlq=dlq, origin=origin, tag=tag)
    await wait_for_depths(broker, {q: len(b) for q, b in seeded.dead_letters.items()})


async def wait_for_depth(
    broker: BrokerUnderTest, queue: str, expected: int, seconds: float = STATS_WAIT_SECONDS
) -> None:
    """Until the broker shows ``queue`` holding ``expected`` messages, all ready (none held by
    a read a killed process left half done), with its statistics and policy fields."""
    await wait_for_depths(broker, {queue: expected}, seconds)


async def wait_for_depths(
    broker: BrokerUnderTest, expected: dict[str, int], seconds: float = STATS_WAIT_SECONDS
) -> None:
    """``wait_for_depth`` for several queues at once, one listing per poll (the statistics
    refresh every few seconds: waiting for queues one after the other costs that many times)."""
    deadline = time.monotonic() + seconds
    pending = dict(expected)
    shown: dict[str, Any] = {}
    while True:
        with broker.admin() as admin:
            r = admin.get(
                f"/api/queues/{broker.vhost_path}",
                params={
                    "columns": "name,messages,messages_ready,policy,effective_policy_definition"
                },
            )
            r.raise_for_status()
            listing = {q["name"]: q for q in r.json()}
        for queue, count in list(pending.items()):
            q = listing.get(queue)
            shown[queue] = q
            if (
                q is not None
                and q.get("messages") == count
                and q.get("messages_ready") == count
                and "policy" in q
                and "effective_policy_definition" in q
            ):
                del pending[queue]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"waited {seconds} s for "
                + "; ".join(
                    f"{q} to hold {n} ready message(s), listed: {shown[q]}"
                    for q, n in pending.items()
                )
            )
        await asyncio.sleep(0.25)


def read_is_safe(broker: BrokerUnderTest, queue: dict[str, Any]) -> str | None:
    """None when a requeueing read of this queue cannot make the broker drop a message (the
    test's own final read must keep the promise it checks), else why not."""
    if queue.get("type") != "quorum":
        return None
    arguments = queue.get("arguments") or {}
    policy = queue.get("effective_policy_definition") or {}
    if isinstance(arguments, dict) and "x-delivery-limit" in arguments:
        return f"x-delivery-limit argument {arguments['x-delivery-limit']}"
    limit = policy.get("delivery-limit") if isinstance(policy, dict) else None
    if broker.version.startswith("3."):
        return None if limit is None else f"policy delivery-limit {limit}"
    reported = queue.get("delivery_limit")
    if limit == -1 and reported in ("unlimited", -1, None):
        return None
    return f"delivery limit in force: policy {limit!r}, reported {reported!r}"


def read_bodies(broker: BrokerUnderTest, queue: str, at_most: int = 100) -> list[dict[str, Any]]:
    """Every message of ``queue`` (up to ``at_most``), put back: ``reject_requeue_true``."""
    with broker.admin() as admin:
        r = admin.post(
            f"{queue_path(broker, queue)}/get",
            json={"count": at_most, "ackmode": "reject_requeue_true", "encoding": "auto"},
        )
        r.raise_for_status()
        messages: list[dict[str, Any]] = r.json()
        return messages
