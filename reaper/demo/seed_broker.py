"""The scenario's broker side: queues, messages and policies, in a vhost of its own."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from uuid import uuid4

from reaper.broker.client import ManagementClient
from reaper.config import Settings
from reaper.core.domain import BrokerFacts
from reaper.demo.admin import declare_queue
from reaper.demo.scenario import DELAY_TTL_MS, SeededLetter, SeededProject
from reaper.errors import BrokerUnavailable
from reaper.reap.policies import desired_for

__all__ = ["seed_broker"]

#: How old the delay tier's messages are: well inside its TTL.
_DELAY_MESSAGE_AGE = 30


async def seed_broker(
    broker: ManagementClient,
    vhost: str,
    settings: Settings,
    facts: BrokerFacts,
    projects: Sequence[SeededProject],
    now: datetime,
    old: int,
    dead_letter_count: int,
) -> tuple[dict[str, str], dict[str, int], list[SeededLetter], list[str], str | None, str]:
    """Declare the scenario's queues, write its policies (one drifted) and publish its
    messages: the queues' types, the messages per queue, the dead letters, the policies
    written, the one drifted and how."""
    prefix = settings.bus.prefix
    dead = f"{prefix}.jobs.dead"
    epoch = int(now.timestamp())
    queues = _queues(prefix, projects)
    for name, (kind, arguments) in queues.items():
        await declare_queue(broker, name, queue_type=kind, arguments=arguments, vhost=vhost)

    written, drifted, drift = await write_policies(broker, vhost, settings, facts)

    publisher = _Publisher(broker, vhost)
    await _publish_work(publisher, prefix, projects, epoch, old)
    await _publish_foreign(publisher, epoch, old)
    # Dead letters on the owned dead-letter queue, as RabbitMQ writes them.
    letters = _dead_letters(projects, epoch, dead_letter_count)
    for letter in letters:
        properties: dict[str, object] = {
            "delivery_mode": 2,
            "headers": _death_headers(
                letter.origin_queue,
                letter.reason,
                epoch - 3600,
                count=20 if letter.reason == "delivery_limit" else 1,
            ),
        }
        if letter.is_json:
            properties["content_type"] = "application/json"
        if letter.message_id is not None:
            properties["message_id"] = letter.message_id
        await publisher.publish(dead, letter.body, properties)

    return (
        {name: kind for name, (kind, _) in queues.items()},
        publisher.messages,
        letters,
        written,
        drifted,
        drift,
    )


def _queues(
    prefix: str, projects: Sequence[SeededProject]
) -> dict[str, tuple[str, dict[str, object]]]:
    """Each queue of the scenario: its type and arguments."""
    dead = f"{prefix}.jobs.dead"
    queues: dict[str, tuple[str, dict[str, object]]] = {
        p.work_queue: (
            "quorum",
            {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead},
        )
        for p in projects
    }
    queues[dead] = ("quorum", {})
    queues[f"{prefix}.webhooks"] = ("classic", {})
    queues[f"{prefix}.jobs.wait.w5m"] = (
        "classic",
        {
            "x-message-ttl": DELAY_TTL_MS,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": projects[0].work_queue,
        },
    )
    queues["celery"] = ("classic", {})
    queues["celery.dead"] = ("classic", {})
    return queues


class _Publisher:
    """Publishes into the demo's vhost, counting the messages routed to each queue."""

    def __init__(self, broker: ManagementClient, vhost: str) -> None:
        self._broker = broker
        self._vhost = vhost
        self.messages: dict[str, int] = {}

    async def publish(self, queue: str, body: str, properties: Mapping[str, object]) -> None:
        vhost = self._vhost
        if not await self._broker.publish(queue, body, properties=properties, vhost=vhost):
            raise BrokerUnavailable(f"a message to {queue!r} in vhost {vhost!r} was not routed")
        self.messages[queue] = self.messages.get(queue, 0) + 1


async def _publish_work(
    publisher: _Publisher, prefix: str, projects: Sequence[SeededProject], epoch: int, old: int
) -> None:
    """The owned queues' messages: work waiting, an outbox nobody consumes, a delay tier."""
    # Work waiting on quorum queues (which report no head-message age): a little on the first
    # project's, more on the idle project's.
    for project, count in ((projects[0], 1), (projects[-1], 3)):
        for n in range(count):
            job = str(uuid4())
            await publisher.publish(
                project.work_queue,
                json.dumps({"job_id": job, "kind": "render.thumbnail", "project": project.name}),
                _json_properties(job, epoch - 60 * (n + 1)),
            )
    # The owned classic outbox nobody consumes: its head message is long past the threshold.
    for n in range(4):
        event = str(uuid4())
        await publisher.publish(
            f"{prefix}.webhooks",
            json.dumps({"event": "invoice.paid", "id": event, "attempt": 1}),
            _json_properties(event, epoch - old - 3600 + 300 * n),
        )
    # The delay tier: messages younger than their TTL are where they should be.
    for n in range(2):
        job = str(uuid4())
        await publisher.publish(
            f"{prefix}.jobs.wait.w5m",
            json.dumps({"job_id": job, "retry_in": "5m"}),
            _json_properties(job, epoch - _DELAY_MESSAGE_AGE - n),
        )


async def _publish_foreign(publisher: _Publisher, epoch: int, old: int) -> None:
    """The foreign tenant: Celery tasks with no worker, and its own dead letters."""
    for n in range(5):
        task = str(uuid4())
        await publisher.publish(
            "celery",
            json.dumps([[n], {}, {"callbacks": None, "errbacks": None, "chain": None}]),
            {
                "content_type": "application/json",
                "content_encoding": "utf-8",
                "correlation_id": task,
                "delivery_mode": 2,
                "priority": 0,
                "timestamp": epoch - old - 60 * n,
                "headers": {"lang": "py", "task": "billing.tasks.send_reminder", "id": task},
            },
        )
    for n in range(2):
        await publisher.publish(
            "celery.dead",
            json.dumps([[n], {}, {}]),
            {
                "content_type": "application/json",
                "delivery_mode": 2,
                "headers": _death_headers("celery", "rejected", epoch - 7200 - n, count=1),
            },
        )


def _json_properties(message_id: str, timestamp: int) -> dict[str, object]:
    return {
        "content_type": "application/json",
        "delivery_mode": 2,
        "message_id": message_id,
        "timestamp": timestamp,
    }


def _death_headers(queue: str, reason: str, when: int, *, count: int) -> dict[str, object]:
    """The headers RabbitMQ writes on a message it dead-letters (3.x and 4.0)."""
    return {
        "x-death": [
            {
                "count": count,
                "reason": reason,
                "queue": queue,
                "time": when,
                "exchange": "",
                "routing-keys": [queue],
            }
        ],
        "x-first-death-exchange": "",
        "x-first-death-queue": queue,
        "x-first-death-reason": reason,
    }


def _dead_letters(projects: Sequence[SeededProject], epoch: int, count: int) -> list[SeededLetter]:
    """``count`` dead letters cycling three shapes: a JSON job with a message id that hit the
    delivery limit, a JSON job without one that a consumer rejected, a body that is not JSON."""
    letters = []
    for n in range(count):
        project = projects[n % len(projects)]
        shape = n % 3
        if shape == 0:
            job = str(uuid4())
            letters.append(
                SeededLetter(
                    message_id=job,
                    body=json.dumps({"job_id": job, "kind": "render.video", "n": n}),
                    is_json=True,
                    origin_queue=project.work_queue,
                    reason="delivery_limit",
                )
            )
        elif shape == 1:
            letters.append(
                SeededLetter(
                    message_id=None,
                    body=json.dumps({"kind": "index.document", "doc": f"doc-{epoch}-{n}"}),
                    is_json=True,
                    origin_queue=project.work_queue,
                    reason="rejected",
                )
            )
        else:
            letters.append(
                SeededLetter(
                    message_id=None,
                    body=f"resize 4096x4096 /srv/uploads/{epoch}-{n}.png (legacy text job)",
                    is_json=False,
                    origin_queue=project.work_queue,
                    reason="rejected",
                )
            )
    return letters


async def write_policies(
    broker: ManagementClient, vhost: str, settings: Settings, facts: BrokerFacts
) -> tuple[list[str], str | None, str]:
    """Write every declared policy this broker can hold, as a first reconcile would, then
    change the quorum policy's delivery limit by hand: the drift a real pass puts back."""
    desired = desired_for(settings, facts)
    written: list[str] = []
    drifted: str | None = None
    drift = ""
    for d in desired:
        if not d.writable:
            continue
        definition = dict(d.definition)
        limit = definition.get("delivery-limit")
        if drifted is None and isinstance(limit, int) and limit > 0:
            definition["delivery-limit"] = limit * 5
            drifted = d.name
            drift = f"{d.name} delivery-limit {limit * 5} (declared {limit})"
        await broker.put_policy(
            d.name,
            definition,
            pattern=d.pattern,
            apply_to=d.apply_to,
            priority=d.priority,
            vhost=vhost,
        )
        written.append(d.name)
    return written, drifted, drift
