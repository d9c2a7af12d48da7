"""The pass's observation step: what was watched, continued from the store, and kept.

The pass's observation step (:mod:`reaper.core.observation`): what was watched, continued
from the store, and kept for the next pass (never in a dry run). Runs after the broker is read
and before the judge, on the database's clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from reaper.core.bounds import is_owned_queue
from reaper.core.observation import Observed, QueueFlow, observe
from reaper.errors import SourceUnreadable
from reaper.reap.context import Pass
from reaper.reap.measure import BrokerReading
from reaper.reap.progress import Found, written

__all__ = ["ObserveOutcome", "observe_broker"]


@dataclass(frozen=True)
class ObserveOutcome:
    #: This pass's observations; None when the broker or the store could not be read (and
    #: then nothing is concluded from them).
    observed: Observed | None = None
    found: Found = field(default_factory=Found)


async def observe_broker(p: Pass) -> ObserveOutcome:
    """This pass's observations, continued from the last pass's and, unless a dry run, kept
    for the next."""
    config, store, reading, now = p.config, p.store, p.reading.broker, p.now
    if reading is None or store is None:
        return ObserveOutcome()
    try:
        previous = await store.observations(config.vhost)
    except SourceUnreadable as exc:
        return ObserveOutcome(None, Found.failed(exc))
    owned = frozenset(q.name for q in reading.queues if is_owned_queue(q.name, config.thresholds))
    notes = _unseen_consumers(reading, owned, config.user)
    observed = observe(
        previous,
        queues=[
            QueueFlow(q.name, q.messages_ready, q.deliveries)
            for q in reading.queues
            if q.counts_known
        ],
        channels=reading.channels,
        consumers=reading.consumers,
        owned=owned,
        now=now,
    )
    if observed.unmeasured:
        shown = ", ".join(repr(c) for c in observed.unmeasured[:5])
        notes.append(
            f"{len(observed.unmeasured)} channel(s) hold deliveries from owned queues but the "
            f"broker lists no acknowledgement counter for them ({shown}"
            f"{' …' if len(observed.unmeasured) > 5 else ''}): their holds are not measured"
        )
    found = Found.noted(*notes)
    if not p.dry_run:
        _, kept = await written(
            store.keep_observations(config.vhost, observed.observations), "the observations kept"
        )
        found += kept
    return ObserveOutcome(observed, found)


def _unseen_consumers(reading: BrokerReading, owned: frozenset[str], user: str) -> list[str]:
    """Say where an owned queue lists consumers the reaper's user cannot see: their held
    deliveries cannot be measured (the management API shows another user's channels only to
    a user with the monitoring or administrator tag)."""
    seen = {c.queue for c in reading.consumers}
    hidden = sorted(
        q.name
        for q in reading.queues
        if q.name in owned and q.counts_known and q.consumers > 0 and q.name not in seen
    )
    if not hidden:
        return []
    shown = ", ".join(repr(name) for name in hidden[:5]) + (" …" if len(hidden) > 5 else "")
    return [
        f"{len(hidden)} owned queue(s) list consumers that user {user!r} cannot see "
        f"({shown}): held deliveries there are not measured (give the user the "
        "monitoring tag)"
    ]
