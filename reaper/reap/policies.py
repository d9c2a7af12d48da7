"""The pass's policy step: the declared policies rendered for this broker, reconciled and
verified (SPEC §4), or only planned in a dry run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from reaper.broker.port import Broker
from reaper.config import Settings
from reaper.core.domain import BrokerFacts, QueueStats
from reaper.errors import ConfigError
from reaper.policies.declarations import DEFAULT_POLICY_DIR, PolicyParameters, load_declarations
from reaper.policies.reconcile import Plan, PolicyOutcome, plan, reconcile
from reaper.policies.render import DesiredPolicy, render
from reaper.reap.progress import Progress

__all__ = ["desired_for", "policy_parameters", "policy_plan", "reconcile_policies"]


def policy_parameters(settings: Settings) -> PolicyParameters:
    """The values the declarations' placeholders take from ``[queue.reap]`` and ``[bus]``."""
    return PolicyParameters.from_thresholds(
        settings.thresholds(),
        prefix=settings.bus.prefix,
        policy_priority=settings.queue.reap.policy_priority,
    )


def desired_for(
    settings: Settings,
    facts: BrokerFacts,
    directory: Path = DEFAULT_POLICY_DIR,
    queues: Sequence[QueueStats] | None = None,
) -> list[DesiredPolicy]:
    """Load, fill and render the declarations for ``settings`` and this broker; ``queues``
    (the vhost's) withhold a delivery limit where it would drop (see :func:`render`)."""
    return render(load_declarations(directory), policy_parameters(settings), facts, queues)


async def reconcile_policies(
    settings: Settings,
    broker: Broker,
    facts: BrokerFacts,
    *,
    dry_run: bool,
    policies_dir: Path | None,
    progress: Progress,
    queues: Sequence[QueueStats] = (),
) -> list[PolicyOutcome]:
    """Reconcile (or in a dry run, plan) every declared policy; declarations that cannot be
    rendered are one refused outcome, never an exception."""
    try:
        desired = desired_for(settings, facts, policies_dir or DEFAULT_POLICY_DIR, queues)
    except ConfigError as exc:
        refused = PolicyOutcome(
            "declarations", "refused", False, 0, (), exc.reason, "InvalidDeclaration"
        )
        return [refused]
    outcomes = await progress.guarded(
        reconcile(
            broker,
            desired,
            vhost=settings.bus.vhost,
            dry_run=dry_run,
            verify_wait_seconds=settings.queue.reap.policy_verify_wait_seconds,
        )
    )
    return outcomes or []


async def policy_plan(broker: Broker, settings: Settings) -> Plan:
    """Desired policies against what the broker holds, per policy and per queue."""
    facts = await broker.facts(
        declared_consumer_timeout_ms=settings.queue.reap.consumer_timeout_seconds * 1000
    )
    queues = await broker.list_queues(settings.bus.vhost)
    desired = desired_for(settings, facts, queues=queues)
    return await plan(broker, desired, vhost=settings.bus.vhost)
