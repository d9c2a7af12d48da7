"""What no single look at the broker shows, measured across passes.

Pure: no clock, no I/O (ADR-0056 condition (a) on the broker, and a wedged queue). The
management API keeps no time of a consumer's last acknowledgement nor of a queue's last
delivery, but it keeps counters, and a counter unmoved between two passes means nothing happened
in between. A channel holding unacknowledged deliveries whose ``ack`` counter has not moved is a
``hung_handler`` past ``longest_lease_seconds`` (the one guard a 4.3 classic queue has); a queue
with ready messages whose ``deliver_get`` has not moved is wedged if it has consumers
(``stale_ready``), and otherwise bounds a quorum queue's head age from below
(``docs/architecture.md``, "Measured across passes"). What is watched is kept in the store
(:class:`Observation`), so whichever reaper of the fleet runs the next pass continues it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

__all__ = [
    "ChannelStats",
    "ConsumerSeen",
    "Held",
    "Observation",
    "Observed",
    "QueueFlow",
    "Stalled",
    "Watch",
    "observe",
]


class Watch(StrEnum):
    """What an observation watches."""

    #: A channel holding deliveries from owned queues (keyed by the channel's name).
    HELD = "held"
    #: A queue with ready messages (keyed by the queue's name).
    STALLED = "stalled"


@dataclass(frozen=True)
class ChannelStats:
    """One channel as the management API lists it."""

    name: str
    messages_unacknowledged: int
    #: ``message_stats.ack``: acknowledgements so far; None where the broker did not list the
    #: counter (not measured, never read as zero: such a channel's holds are not watched).
    acks: int | None


@dataclass(frozen=True)
class ConsumerSeen:
    """One consumer as the management API lists it."""

    queue: str
    channel: str
    tag: str
    ack_required: bool


@dataclass(frozen=True)
class Observation:
    """One thing watched, as the store keeps it between passes: since when (the database's
    clock at the first pass that saw it in the state it is still in), the counter that has not
    moved since, and the level last seen (held: unacknowledged deliveries; stalled: ready
    messages)."""

    watch: Watch
    key: str
    since: datetime
    counter: int
    level: int


@dataclass(frozen=True)
class Held:
    """A channel holding deliveries from owned queues without acknowledging anything."""

    channel: str
    queues: tuple[str, ...]
    consumers: tuple[str, ...]
    unacknowledged: int
    since: datetime
    seconds: float


@dataclass(frozen=True)
class Stalled:
    """A queue with ready messages from which nothing has been delivered."""

    queue: str
    ready: int
    since: datetime
    seconds: float


@dataclass(frozen=True)
class Observed:
    """What one pass observed: what to keep for the next, and the measurements."""

    observations: tuple[Observation, ...]
    held: tuple[Held, ...]
    stalled: Mapping[str, Stalled]
    #: Channels holding deliveries from owned queues whose acknowledgement counter the broker
    #: did not list: what they hold is not measured.
    unmeasured: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueueFlow:
    """What a stall is measured from: one queue's ready count and delivery counter."""

    name: str
    ready: int
    #: ``message_stats.deliver_get``; None where the broker does not report it.
    deliveries: int | None


def observe(
    previous: Iterable[Observation],
    *,
    queues: Iterable[QueueFlow],
    channels: Iterable[ChannelStats],
    consumers: Sequence[ConsumerSeen],
    owned: frozenset[str],
    now: datetime,
) -> Observed:
    """This pass's observations, continued from ``previous`` where nothing has moved, and what
    they measure. ``owned``: the owned queues' names (held deliveries are watched on those)."""
    before = {(o.watch, o.key): o for o in previous}
    kept: list[Observation] = []
    held: list[Held] = []
    stalled: dict[str, Stalled] = {}
    unmeasured: list[str] = []

    on_channel: dict[str, list[ConsumerSeen]] = {}
    for consumer in consumers:
        if consumer.ack_required and consumer.queue in owned:
            on_channel.setdefault(consumer.channel, []).append(consumer)
    for channel in channels:
        watched = on_channel.get(channel.name)
        if not watched or channel.messages_unacknowledged <= 0:
            continue
        acks = channel.acks
        if acks is None:
            unmeasured.append(channel.name)
            continue
        last = before.get((Watch.HELD, channel.name))
        since = last.since if last is not None and last.counter == acks else now
        unacked = channel.messages_unacknowledged
        kept.append(Observation(Watch.HELD, channel.name, since, acks, unacked))
        held.append(
            Held(
                channel=channel.name,
                queues=tuple(sorted({c.queue for c in watched})),
                consumers=tuple(sorted(c.tag for c in watched)),
                unacknowledged=unacked,
                since=since,
                seconds=max(0.0, (now - since).total_seconds()),
            )
        )

    for queue in queues:
        if queue.ready <= 0 or queue.deliveries is None:
            continue
        last = before.get((Watch.STALLED, queue.name))
        still = last is not None and last.counter == queue.deliveries and queue.ready >= last.level
        since = last.since if still and last is not None else now
        kept.append(Observation(Watch.STALLED, queue.name, since, queue.deliveries, queue.ready))
        stalled[queue.name] = Stalled(
            queue.name, queue.ready, since, max(0.0, (now - since).total_seconds())
        )
    return Observed(tuple(kept), tuple(held), stalled, tuple(sorted(unmeasured)))
