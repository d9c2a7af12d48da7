"""The demo's outbox step: a host that dispatches through RabbitMQ, in miniature.

The demo's fourth step: a host that dispatches through RabbitMQ (SPEC §3, ADR-0044 §3-§5),
in miniature, on the demo's own database and vhost: ``reaper db migrate --outbox``, a job
enqueued at generation 1 and relayed, a worker that dies holding its lease, one real pass that
requeues it at generation 2 (its outbox row in the same transaction as the move), and a second
worker for which generation 1 fails the fence and generation 2 runs. The host, relay and
workers are the demo's stand-ins, a few lines each (their queries in ``scenario.sql``); the
steps one by one are in ``docs/architecture.md`` ("The demo").
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Final

from reaper.broker.client import ManagementClient
from reaper.broker.http import api_path
from reaper.config import Settings
from reaper.core.domain import Condition
from reaper.demo.admin import declare_queue, run_scenario_query
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.run import reap_once
from reaper.schema.migrations import migrate

__all__ = ["WORK_QUEUE", "outbox_step"]

#: The demo's work queue, where the relay publishes dispatch messages.
WORK_QUEUE: Final = "vibey.demo.dispatch"

#: How long the first worker's lease lasts before it "dies" holding it.
_LEASE: Final = timedelta(seconds=1)


async def outbox_step(
    demo: Settings, client: ManagementClient, password: str | None
) -> AsyncIterator[str]:
    """Run the step (see the module docstring), yielding what happens, a line at a time."""
    store = await PostgresStore.connect(demo.database.dsn, password=password, pool_size=2)
    try:
        run = await migrate(store.database, outbox=True)
        yield f"reaper db migrate --outbox: {', '.join(run.applied) or 'already in place'}"
        await declare_queue(client, WORK_QUEUE)
        job, project = uuid.uuid4(), uuid.uuid4()
        now = (await store.database_facts()).now
        await run_scenario_query(store, "outbox_enqueue", job, project, "render.thumbnail", now)
        async for line in _relay(store, client):
            yield line

        message = await _take(client, requeue=True)
        claimed = await _claim(store, message, "worker-a", now + _LEASE)
        yield (
            f"worker-a took generation {message['dispatch_seq']} of job {str(job)[:8]}: "
            f"{'claimed' if claimed else 'NOT claimed'}, then died holding its lease "
            "(the broker keeps the message for redelivery)"
        )
        await asyncio.sleep(_LEASE.total_seconds() + 0.5)

        result = await reap_once(demo)
        moved = [
            r.verdict
            for r in result.leases.listing.sample  # the first few moves, read back
            if r.verdict.object == str(job) and r.verdict.condition is Condition.LEASE_EXPIRED
        ]
        dispatch = result.dispatch.why if result.dispatch else "unknown"
        yield f"reaper reap (dispatch in force: {dispatch}):"
        for verdict in moved:
            what = f"{verdict.action.value} {verdict.condition.value} {str(job)[:8]}"
            yield f"  {what}: {verdict.detail}"
        async for line in _relay(store, client):
            yield line

        for _ in range(2):
            message = await _take(client, requeue=False)
            generation = message["dispatch_seq"]
            now = (await store.database_facts()).now
            if not await _claim(store, message, "worker-b", now + timedelta(minutes=5)):
                yield f"worker-b: generation {generation} fails the fence: dropped"
                continue
            done = await run_scenario_query(
                store, "outbox_finish", job, "worker-b", generation, now
            )
            yield (
                f"worker-b: generation {generation} claimed and run: "
                f"{'succeeded' if done else 'NOT finished'}"
            )
        (row,) = await run_scenario_query(store, "outbox_job", job)
        yield (
            f"job {str(job)[:8]}: {row['state']} on attempt {int(row['attempts'])}, "
            f"{int(row['dispatch_seq'])} dispatch episodes, {int(row['outbox_rows'])} outbox "
            f"rows, {int(row['events'])} ledger event(s) (the requeue)"
        )
    finally:
        await store.close()


async def _relay(store: PostgresStore, client: ManagementClient) -> AsyncIterator[str]:
    """The host's relay: publish every unsent outbox row, then mark it sent."""
    for row in await run_scenario_query(store, "outbox_unsent"):
        routed = await client.publish(
            WORK_QUEUE, row["payload"], properties={"message_id": row["key"], "delivery_mode": 2}
        )
        now = (await store.database_facts()).now
        await run_scenario_query(store, "outbox_mark_sent", row["id"], now)
        state = "routed" if routed else "NOT routed"
        yield f"relay: published {row['key']} to {WORK_QUEUE} ({state})"


async def _take(client: ManagementClient, *, requeue: bool) -> dict[str, object]:
    """One dispatch message off the work queue, as a worker receives it: put back (a worker
    that dies before its ack), or acknowledged (a worker that handled it, run or dropped)."""
    path = api_path("queues", client.vhost, WORK_QUEUE, "get")
    ackmode = "reject_requeue_true" if requeue else "ack_requeue_false"
    for _ in range(40):  # a message just published may take a moment to be ready
        answer = await client.api.request(
            "POST", path, json={"count": 1, "ackmode": ackmode, "encoding": "auto"}
        )
        if isinstance(answer, list) and answer:
            body = json.loads(str(answer[0]["payload"]))
            return dict(body) if isinstance(body, dict) else {}
        await asyncio.sleep(0.25)
    raise TimeoutError(f"no dispatch message arrived on {WORK_QUEUE}")


async def _claim(
    store: PostgresStore, message: dict[str, object], worker: str, until: object
) -> bool:
    now = (await store.database_facts()).now
    claimed = await run_scenario_query(
        store,
        "outbox_claim",
        uuid.UUID(str(message["job_id"])),
        int(str(message["dispatch_seq"])),
        worker,
        until,
        now,
    )
    return bool(claimed)
