"""The pass's policy step: the declared policies rendered, reconciled and verified.

The pass's policy step: the declared policies rendered for this broker, reconciled and
verified (SPEC §4), or only planned in a dry run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reaper.broker.port import Broker
from reaper.config import Settings
from reaper.core.domain import BrokerFacts, QueueStats
from reaper.errors import ConfigError, SourceUnreadable
from reaper.policies.declarations import DEFAULT_POLICY_DIR, load_declarations
from reaper.policies.reconcile import Plan, PolicyOutcome, QueuesRead, plan, reconcile
from reaper.policies.render import DesiredPolicy, render
from reaper.reap.context import Pass
from reaper.reap.listing import read_listing
from reaper.reap.measure import BrokerReading
from reaper.reap.pass_config import policy_parameters
from reaper.reap.progress import Found

__all__ = [
    "PoliciesOutcome",
    "desired_for",
    "policy_plan",
    "reconcile_policies",
]


def desired_for(
    settings: Settings,
    facts: BrokerFacts,
    directory: Path = DEFAULT_POLICY_DIR,
    queues: Sequence[QueueStats] | None = None,
) -> list[DesiredPolicy]:
    """Load, fill and render the declarations for ``settings`` and this broker; ``queues``
    (the vhost's) withhold a delivery limit where it would drop (see :func:`render`)."""
    return render(load_declarations(directory), policy_parameters(settings), facts, queues)


@dataclass(frozen=True)
class PoliciesOutcome:
    #: Each declared policy's outcome (none when the broker was not read, or the pass was
    #: asked to stop before this step).
    outcomes: tuple[PolicyOutcome, ...] = ()
    found: Found = field(default_factory=Found)


async def reconcile_policies(p: Pass) -> PoliciesOutcome:
    """Reconcile (or in a dry run, plan) every declared policy, when the broker was read and
    the pass was not asked to stop; declarations that cannot be rendered are one refused
    outcome, never an exception. The pass's listing withholds a delivery limit where it would
    drop, and the policies are verified on it when nothing was written (a queue it did not
    keep was verified as it was read); the queues are listed again, a page at a time, only
    when that listing no longer holds."""
    reading, broker, config = p.reading.broker, p.broker, p.config
    if reading is None or broker is None or p.stop():
        return PoliciesOutcome()
    facts = reading.facts
    listed = _listed(reading)
    queues = list(listed.queues) + [q for q, _ in listed.unreadable] if listed else ()
    watched = frozenset(c.queue for c in reading.consumers) if reading else frozenset()

    async def read_queues(desired: Sequence[DesiredPolicy]) -> QueuesRead:
        listing = await read_listing(
            broker, None, facts, config.thresholds, desired=desired, watched=watched
        )
        return QueuesRead(listing.queues, listing.unavailable, listing.quiet.verified)

    try:
        declared = load_declarations(config.policies_dir)
        desired = render(declared, config.policies, facts, queues)
    except ConfigError as exc:
        refused = PolicyOutcome(
            "declarations", "refused", False, 0, (), exc.reason, "InvalidDeclaration"
        )
        return PoliciesOutcome((refused,))
    try:
        reconciled = await reconcile(
            broker,
            desired,
            vhost=config.vhost,
            dry_run=p.dry_run,
            verify_wait_seconds=config.policy_verify_wait_seconds,
            listed=listed,
            read_queues=read_queues,
        )
    except SourceUnreadable as exc:
        return PoliciesOutcome((), Found.failed(exc))
    return PoliciesOutcome(reconciled.outcomes)


def _listed(reading: BrokerReading | None) -> QueuesRead | None:
    if reading is None:
        return None
    return QueuesRead(reading.queues, reading.unavailable, reading.quiet.verified)


async def policy_plan(broker: Broker, settings: Settings) -> Plan:
    """Desired policies against what the broker holds, per policy and per queue."""
    facts = await broker.facts(
        declared_consumer_timeout_ms=settings.queue.reap.consumer_timeout_seconds * 1000
    )
    queues = await broker.list_queues(settings.bus.vhost)
    desired = desired_for(settings, facts, queues=queues)
    return await plan(broker, desired, vhost=settings.bus.vhost)
