"""The pass's first step: read both sources at once.

The pass's first step: read both sources at once (SPEC §5). A source that cannot be read
is named in ``unreadable`` and read as unknown (``None``), never as empty."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

from reaper.broker.port import Broker, QueuesByVhost
from reaper.core.bounds import is_owned_queue
from reaper.core.domain import (
    BrokerFacts,
    ClaimableHead,
    Dispatch,
    Measurements,
    QueueStats,
    Source,
    UnsentDispatch,
)
from reaper.core.observation import ChannelStats, ConsumerSeen
from reaper.errors import ConfigError, ReaperError
from reaper.jobqueue.dispatch import DispatchInForce, dispatch_in_force
from reaper.jobqueue.port import JobQueue
from reaper.policies.declarations import load_declarations
from reaper.policies.render import DesiredPolicy, render
from reaper.reap.listing import Listing, QuietQueues, read_listing
from reaper.reap.pass_config import PassConfig
from reaper.reap.progress import Found, Unreadable, unreadable_from

__all__ = ["BrokerReading", "JobQueueReading", "Reading", "measure"]


@dataclass(frozen=True)
class JobQueueReading:
    #: The database's clock when the reading began: the pass's ``now``.
    now: datetime
    dispatch: DispatchInForce
    #: None when not read (a lease-only pass).
    claimable: tuple[ClaimableHead, ...] | None
    #: Unsent dispatches (outbox dispatch only); None when not read (a lease-only pass).
    unsent: tuple[UnsentDispatch, ...] | None = ()


@dataclass(frozen=True)
class BrokerReading:
    facts: BrokerFacts
    #: The queues measured: every queue listed but those that cannot be measured now.
    queues: tuple[QueueStats, ...]
    #: Queues listed that cannot be measured now (reaper.core.cluster), each with why.
    unavailable: tuple[tuple[QueueStats, str], ...] = ()
    #: The vhost's channels and consumers, what held deliveries are observed from.
    channels: tuple[ChannelStats, ...] = ()
    consumers: tuple[ConsumerSeen, ...] = ()
    #: The queues listed and not kept (each judged with nothing to say), as counts.
    quiet: QuietQueues = field(default_factory=QuietQueues)
    #: The pages the listing took.
    pages: int = 0
    #: When the vhost holds no owned queue: the other vhosts that do, as the user may read
    #: them (empty: none, or none readable).
    owned_elsewhere: QueuesByVhost = field(default_factory=lambda: QueuesByVhost({}))

    def unmeasured(self) -> frozenset[str]:
        """Queues about which this pass concludes nothing, not even that a finding cleared:
        those unavailable, and those listed without their statistics."""
        return (
            frozenset(q.name for q, _ in self.unavailable)
            | frozenset(q.name for q in self.queues if not q.counts_known)
            | frozenset(self.quiet.without_statistics)
        )


@dataclass(frozen=True)
class Reading:
    """Both sources as read; a source not read is None, and named in ``unreadable`` when it
    failed (or, with its queue, a queue of the broker that cannot be measured now)."""

    job_queue: JobQueueReading | None
    broker: BrokerReading | None
    unreadable: tuple[Unreadable, ...] = ()

    @property
    def found(self) -> Found:
        return Found(unreadable=self.unreadable)

    def measurements(self) -> Measurements:
        jq, br = self.job_queue, self.broker
        return Measurements(
            claimable=jq.claimable if jq else None,
            queues=br.queues if br else None,
            broker=br.facts if br else None,
            unsent=jq.unsent if jq else None,
            without_statistics=br.quiet.without_statistics if br else (),
        )


async def _read_job_queue(
    store: JobQueue, config: PassConfig, leases_only: bool
) -> JobQueueReading:
    # The host stamps leases and run_after with its database's clock (or its workers' own):
    # the database's clock decides, never the reaper's (SPEC §10).
    facts = await store.database_facts()
    now = facts.now
    dispatch = dispatch_in_force(config.dispatch, facts.outbox_schema)
    # The expired leases are not counted here: the lease reap reads them a page at a time
    # until none is left (reaper.reap.leases.reap_leases), and counts only what it leaves.
    if leases_only:
        return JobQueueReading(now, dispatch, None, None)
    project_id = config.project_id
    claimable, unsent = await asyncio.gather(
        store.claimable_heads(now, config.thresholds.known_phases, project_id),
        store.unsent_dispatches(project_id) if dispatch.mode is Dispatch.OUTBOX else _none(),
    )
    return JobQueueReading(now, dispatch, tuple(claimable), tuple(unsent))


async def _read_broker(client: Broker, config: PassConfig) -> BrokerReading:
    """The broker's facts, its channels and consumers, then its queues a page at a time, each
    page judged and dropped before the next is held (:mod:`reaper.reap.listing`)."""
    facts = await client.facts(declared_consumer_timeout_ms=config.consumer_timeout_ms)
    channels, consumers = await asyncio.gather(client.list_channels(), client.list_consumers())
    listing = await read_listing(
        client,
        None,
        facts,
        config.thresholds,
        desired=_desired(config, facts),
        watched=frozenset(c.queue for c in consumers),
    )
    return BrokerReading(
        facts,
        listing.queues,
        listing.unavailable,
        tuple(channels),
        tuple(consumers),
        quiet=listing.quiet,
        pages=listing.pages,
        owned_elsewhere=await _owned_elsewhere(client, config, listing),
    )


async def _owned_elsewhere(client: Broker, config: PassConfig, listing: Listing) -> QueuesByVhost:
    """When the vhost holds no owned queue, the vhosts that do: a pass pointed at the wrong
    vhost reads nothing of ours and would otherwise say so only as a count of 0. A broker
    that will not say (the user may not read other vhosts) names none."""
    thresholds = config.thresholds
    listed = [
        *(q.name for q in listing.queues),
        *(q.name for q, _ in listing.unavailable),
        *listing.quiet.without_statistics,
    ]
    if listing.quiet.owned or any(is_owned_queue(name, thresholds) for name in listed):
        return QueuesByVhost({})
    try:
        found = await client.queues_by_vhost(thresholds.owned_queue_pattern)
    except ReaperError:
        return QueuesByVhost({})
    counts = {v: n for v, n in found.counts.items() if v != config.vhost}
    return QueuesByVhost(counts, found.complete)


def _desired(config: PassConfig, facts: BrokerFacts) -> list[DesiredPolicy] | None:
    """The declared policies as rendered for this broker, before any queue is known; None
    when they cannot be (the policy step reports why, and verifies nothing)."""
    try:
        return render(load_declarations(config.policies_dir), config.policies, facts, None)
    except ConfigError:
        return None


async def _nothing() -> None:
    return None


async def _none() -> list[UnsentDispatch]:
    return []


async def measure(
    config: PassConfig, store: JobQueue | None, broker: Broker | None, *, leases_only: bool = False
) -> Reading:
    """Read both sources at once; a failing one is named and read as unknown. A lease-only
    pass reads the database's clock and dispatch alone (the lease reap reads the leases)."""
    pg_read, broker_read = await asyncio.gather(
        _read_job_queue(store, config, leases_only) if store else _nothing(),
        _read_broker(broker, config) if broker else _nothing(),
        return_exceptions=True,
    )
    job_queue: JobQueueReading | None = None
    unreadable: list[Unreadable] = []
    if isinstance(pg_read, BaseException):
        unreadable.append(unreadable_from(Source.JOB_QUEUE, pg_read))
    elif pg_read is not None:
        job_queue = pg_read
    reading: BrokerReading | None = None
    if isinstance(broker_read, BaseException):
        unreadable.append(unreadable_from(Source.BROKER, broker_read))
    elif broker_read is not None:
        reading = broker_read
        unreadable.extend(
            Unreadable(
                Source.BROKER.value,
                f"{why}: not measured; nothing is concluded from it (no finding, and no "
                "earlier finding about it is cleared)",
                queue.name,
            )
            for queue, why in reading.unavailable
        )
    return Reading(job_queue, reading, tuple(unreadable))
