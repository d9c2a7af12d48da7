"""Seeding the scenario on both sides (:mod:`reaper.demo.scenario` says what it is)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import datetime
from uuid import uuid4

from reaper.broker.client import ManagementClient
from reaper.config import Settings
from reaper.core.domain import QueueStats
from reaper.core.head_age import head_age_reported
from reaper.demo.scenario import PROJECT_NAMES, Scenario, SeededProject
from reaper.demo.seed_broker import seed_broker
from reaper.demo.seed_jobs import Jobs, plan_jobs
from reaper.errors import BrokerUnavailable
from reaper.jobqueue.postgres import PostgresStore
from reaper.policies.render import DesiredPolicy
from reaper.reap.policies import desired_for

__all__ = ["seed", "settled"]


async def seed(
    store: PostgresStore,
    broker: ManagementClient,
    *,
    now: datetime,
    settings: Settings | None = None,
    vhost: str | None = None,
    projects: int = 3,
    expired_leases: int = 4,
    dead_letters: int = 3,
    settle_seconds: float = 45.0,
) -> Scenario:
    """Seed the scenario into ``store`` (a migrated database of the caller's own) and into
    ``vhost`` (default: the client's; it must exist, empty) on ``broker``, and wait until the
    broker's statistics show all of it (a queue declared a moment ago is listed without counts
    or policy for a few seconds: a pass then would measure nothing).

    ``settings`` supplies the thresholds the ages are scaled to and the policies' parameters
    (default: the built-in defaults). ``projects`` is at least 3 (a project with leases and the
    poison job, one with dependencies, one with no worker). Raises ``ValueError`` for bad
    arguments, :class:`~reaper.errors.SourceUnreadable` when a service fails.
    """
    _check(now, projects, expired_leases, dead_letters)
    settings = settings or Settings()
    vhost = broker.vhost if vhost is None else vhost
    reap = settings.queue.reap
    prefix = settings.bus.prefix
    stale = reap.stale_ready_seconds
    # Ages: "long ago" is well past the threshold, "fresh" well inside it.
    old = max(3 * stale, 2700)
    fresh = max(1, min(60, stale // 10))

    seeded = _projects(prefix, projects)
    jobs = Jobs(now)
    plan = plan_jobs(jobs, seeded, now, reap.lease_grace_seconds, old, fresh, expired_leases)

    facts = await broker.facts(declared_consumer_timeout_ms=reap.consumer_timeout_seconds * 1000)
    queues, messages, letters, written, drifted, drift = await seed_broker(
        broker, vhost, settings, facts, seeded, now, old, dead_letters
    )
    await jobs.insert(store)

    scenario = Scenario(
        now=now,
        vhost=vhost,
        broker=facts,
        projects=tuple(seeded),
        jobs=len(jobs.rows),
        expired_leases=tuple(plan.expired),
        poison=tuple(plan.poison),
        live_leases=tuple(plan.live),
        stale_heads=dict(plan.stale_heads),
        not_claimable=tuple(plan.not_claimable),
        fresh_ready=tuple(plan.fresh),
        queues=queues,
        messages=messages,
        dead_letter_queue=f"{prefix}.jobs.dead",
        dead_letters=tuple(letters),
        foreign_queues=("celery",),
        foreign_dead_letter_queue="celery.dead",
        stale_queues=(f"{prefix}.webhooks", "celery"),
        delay_queue=f"{prefix}.jobs.wait.w5m",
        policies_written=tuple(written),
        drifted_policy=drifted,
        drift=drift,
    )
    desired = desired_for(settings, facts)
    await _settle(broker, vhost, scenario, desired, settle_seconds)
    return scenario


def _check(now: datetime, projects: int, expired_leases: int, dead_letters: int) -> None:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if projects < 3:
        raise ValueError(f"the scenario needs at least 3 projects, not {projects}")
    if expired_leases < 0 or dead_letters < 1:
        raise ValueError("expired_leases must be >= 0 and dead_letters >= 1")


def _projects(prefix: str, count: int) -> list[SeededProject]:
    """The scenario's projects, named in order; every one has a worker but the last."""
    seeded = []
    for i in range(count):
        name = PROJECT_NAMES[i] if i < len(PROJECT_NAMES) else f"p{i}"
        seeded.append(
            SeededProject(
                name=name, id=uuid4(), work_queue=f"{prefix}.jobs.{name}", has_worker=i < count - 1
            )
        )
    return seeded


async def _settle(
    broker: ManagementClient,
    vhost: str,
    scenario: Scenario,
    desired: Sequence[DesiredPolicy],
    within_seconds: float,
) -> None:
    """Wait until the broker lists every queue with its counts, its policy in force and, for
    the queues whose messages carry one, the head message's timestamp where the broker reports
    one (never on LavinMQ, never for a quorum queue: waiting for it would only time out)."""
    deadline = time.monotonic() + within_seconds
    while True:
        listed = {q.name: q for q in await broker.list_queues(vhost)}
        pending = [
            name for name in scenario.queues if not settled(listed.get(name), scenario, desired)
        ]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise BrokerUnavailable(
                "the broker did not show the seeded queues' statistics within "
                f"{within_seconds:g} s (still waiting for: {', '.join(pending)})"
            )
        await asyncio.sleep(0.5)


def settled(queue: QueueStats | None, scenario: Scenario, desired: Sequence[DesiredPolicy]) -> bool:
    """Whether the broker lists ``queue`` as the scenario seeded it, with all it can report."""
    if queue is None or not queue.counts_known or not queue.policy_known:
        return False
    if queue.messages != scenario.messages.get(queue.name, 0):
        return False
    timestamped = (*scenario.stale_queues, scenario.delay_queue)
    if (
        queue.name in timestamped
        and queue.head_message_timestamp is None
        and head_age_reported(queue, scenario.broker)
    ):
        return False
    carrying = {d.name for d in desired if d.writable and d.selects(queue)}
    return not carrying or queue.policy in carrying
