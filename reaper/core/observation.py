"""What no single look at the broker shows, measured across passes (ADR-0056 condition (a) on
the broker, and a wedged queue): the management API keeps no timestamp of a consumer's last
acknowledgement nor of a queue's last delivery, but it keeps counters, and a counter that has
not moved between two passes means nothing happened in between. Pure: no clock, no I/O.

- **Held deliveries.** A channel consuming from an owned queue with acknowledgements required,
  holding unacknowledged deliveries, whose acknowledgement counter (``message_stats.ack``,
  summed over everything it consumes) has not moved since a pass first saw it so, has held
  them without acknowledging anything for at least that long. Past ``longest_lease_seconds``
  that is a ``hung_handler``. It is the one guard a queue has where the broker enforces no
  consumer timeout (classic queues on RabbitMQ 4.3).
- **Stalled queues.** A queue with ready messages whose delivery counter
  (``message_stats.deliver_get``) has not moved, and whose ready count has not fallen, since a
  pass first saw it so, has delivered nothing for at least that long, and its head message has
  waited at least that long. With consumers attached, past ``stale_ready_seconds`` it is wedged
  (every consumer's prefetch held, or a single-active-consumer queue that delivers to nobody):
  ``stale_ready``. With none, it gives a quorum queue (which reports no head timestamp) a lower
  bound for its head message's age.

What is watched is kept between passes in the store (:class:`Observation`), so that whichever
reaper of the fleet runs the next pass continues the measurement. Every figure is a lower
bound, from the first pass that saw the state, never a guess of when it began; the broker's
statistics lag the truth by their refresh (about 5 s, measured on 3.10, 4.0 and 4.3), so an
acknowledgement or delivery in the last seconds before a pass is seen by the next one.
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
