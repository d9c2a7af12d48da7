"""Real dead letters on a test vhost, shared by the dead-letter tests
(``test_dead_letters_live.py``, ``test_quiet_dead_letters_live.py``,
``test_status_page_browser.py``): made through an origin queue, read back without losing any,
waited for where the pass looks, and passes run until parked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reaper.broker.client import ManagementClient
from reaper.config import Settings, load_config
from reaper.core.dead_letters import decode
from reaper.core.domain import GATE_BUS_DEAD_LETTERED, DeadLetter
from reaper.core.records import Gate
from reaper.jobqueue.port import GateFilter
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.result import PassResult
from reaper.reap.run import reap_once
from tests.support.invariants.seed_broker import queue_path
from tests.support.services import STATS_INTERVAL_SECONDS, BrokerUnderTest, poll_until

ORIGIN = "vibey.jobs"
DLQ = "vibey.jobs.dead"
STATS_WAIT_SECONDS = 30


def got_letter(
    body: str, message_id: str, reason: str = "rejected", queue: str = "vibey.jobs.dead"
) -> DeadLetter:
    """A letter of ``vibey.jobs`` dead-lettered for ``reason``, as a get from ``queue``
    returns it, decoded."""
    return decode(
        {
            "payload": body,
            "payload_encoding": "string",
            "payload_bytes": len(body),
            "properties": {
                "message_id": message_id,
                "headers": {
                    "x-first-death-queue": "vibey.jobs",
                    "x-first-death-reason": reason,
                },
            },
        },
        queue=queue,
    )


def settings_for(broker: BrokerUnderTest, pg_dsn: str, config_dir: Path) -> Settings:
    """Environment only (an empty config dir), pointed at this test's vhost and database."""
    environ = {
        "REAPER_CONFIG_DIR": str(config_dir),
        "REAPER_BUS__MANAGEMENT_URL": broker.management_url,
        "REAPER_BUS__VHOST": broker.vhost,
        "REAPER_BUS__USERNAME": broker.username,
        "REAPER_BUS__PASSWORD": broker.password,
        "REAPER_DATABASE__DSN": pg_dsn,
        "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "1",
    }
    return load_config(None, environ=environ).settings


def dead_letter_through(
    broker: BrokerUnderTest, dlq: str, bodies: list[str], *, origin: str = ORIGIN
) -> None:
    """Make real dead letters: publish to ``origin`` (which dead-letters to ``dlq``) and
    reject them without requeueing, so the broker writes ``x-death`` and ``x-first-death-*``."""
    broker.declare_queue(
        origin,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq},
    )
    for i, body in enumerate(bodies):
        broker.publish(origin, body, properties={"message_id": f"{origin}-{i}"})
    with broker.admin() as admin:
        got = admin.post(
            f"{queue_path(broker, origin)}/get",
            json={"count": len(bodies), "ackmode": "reject_requeue_false", "encoding": "auto"},
        )
        got.raise_for_status()
        assert len(got.json()) == len(bodies)


def depth(broker: BrokerUnderTest, queue: str) -> int | None:
    """The queue's depth as the management statistics show it (None: not known yet)."""
    stats = broker.queue(queue)
    messages = stats.get("messages")
    return messages if isinstance(messages, int) else None


async def wait_for(probe: Callable[[], Any], what: str) -> Any:
    return await poll_until(probe, what, STATS_WAIT_SECONDS)


async def wait_for_depth(
    broker: BrokerUnderTest, queue: str, expected: int, *, message_bytes: int | None = None
) -> None:
    """Until the queue shows ``expected`` messages where the pass looks: in the paginated,
    column-projected listing, with its statistics and policy (a new queue is listed without
    them for a few seconds, and the pass then rightly measures nothing). ``message_bytes``:
    and those bytes (RabbitMQ 3.10 can list a new depth beside the bytes before it, for
    example 5 letters of 0 bytes, for as long as a statistics interval)."""

    async def listed() -> bool:
        async with ManagementClient(
            broker.management_url, broker.username, broker.password, vhost=broker.vhost
        ) as client:
            found = [q for q in await client.list_queues() if q.name == queue]
        return (
            bool(found)
            and found[0].counts_known
            and found[0].policy_known
            and (found[0].messages == expected)
            and message_bytes in (None, found[0].counters.message_bytes)
        )

    what = f"{expected} message(s)" + (
        "" if message_bytes is None else f" of {message_bytes} bytes"
    )
    await wait_for(listed, f"{queue} to be listed with {what}")


async def dead_letter_gates(store: PostgresStore) -> list[Gate]:
    return await store.list_gates(GateFilter(open_only=False, kind=GATE_BUS_DEAD_LETTERED))


async def gate_by_id(store: PostgresStore, gate_id: Any) -> Gate:
    [gate] = await store.gates_between(gate_id, gate_id, 1)
    return gate


def outcome_of(result: PassResult, queue: str) -> Any:
    found = [d for d in result.dead_letters.queues if d.queue == queue]
    return found[0] if found else None


async def parked_after_passes(settings: Settings, queue: str, want: int, passes: int = 40) -> None:
    """Run passes until ``want`` letters of ``queue`` are parked (the dead-letter policy may
    need a pass or a statistics interval before reads are proven safe)."""
    parked = 0
    for _ in range(passes):
        result = await reap_once(settings)
        outcome = outcome_of(result, queue)
        parked += outcome.parked_new if outcome else 0
        if parked >= want:
            return
        await asyncio.sleep(STATS_INTERVAL_SECONDS)
    pytest.fail(f"{queue}: {parked} of {want} parked after {passes} passes")
