"""The pass's observation step (:mod:`reaper.core.observation`): what was watched, continued
from the store, and kept for the next pass (never in a dry run). Runs after the broker is read
and before the judge, on the database's clock."""

from __future__ import annotations

from datetime import datetime

from reaper.config import Settings
from reaper.core.bounds import is_owned_queue
from reaper.core.observation import Observed, QueueFlow, observe
from reaper.jobqueue.port import JobQueue
from reaper.reap.measure import BrokerReading
from reaper.reap.progress import Progress

__all__ = ["observe_broker"]


async def observe_broker(
    settings: Settings,
    store: JobQueue | None,
    reading: BrokerReading | None,
    now: datetime,
    *,
    keep: bool,
    progress: Progress,
) -> Observed | None:
    """This pass's observations; None when the broker or the store could not be read (and
    then nothing is concluded from them). ``keep``: write them for the next pass."""
    if reading is None or store is None:
        return None
    scope = settings.bus.vhost
    previous = await progress.guarded(store.observations(scope))
    if previous is None:
        return None
    thresholds = settings.thresholds()
    owned = frozenset(q.name for q in reading.queues if is_owned_queue(q.name, thresholds))
    _unseen_consumers(reading, owned, settings.bus.username, progress)
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
        progress.notes.append(
            f"{len(observed.unmeasured)} channel(s) hold deliveries from owned queues but the "
            f"broker lists no acknowledgement counter for them ({shown}"
            f"{' …' if len(observed.unmeasured) > 5 else ''}): their holds are not measured"
        )
    if keep:
        await progress.written(
            store.keep_observations(scope, observed.observations), "the observations kept"
        )
    return observed


def _unseen_consumers(
    reading: BrokerReading, owned: frozenset[str], user: str, progress: Progress
) -> None:
    """Say where an owned queue lists consumers the reaper's user cannot see: their held
    deliveries cannot be measured (the management API shows another user's channels only to
    a user with the monitoring or administrator tag)."""
    seen = {c.queue for c in reading.consumers}
    hidden = sorted(
        q.name
        for q in reading.queues
        if q.name in owned and q.counts_known and q.consumers > 0 and q.name not in seen
    )
    if hidden:
        shown = ", ".join(repr(name) for name in hidden[:5]) + (" …" if len(hidden) > 5 else "")
        progress.notes.append(
            f"{len(hidden)} owned queue(s) list consumers that user {user!r} cannot see "
            f"({shown}): held deliveries there are not measured (give the user the "
            "monitoring tag)"
        )
