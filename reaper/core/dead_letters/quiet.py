"""Whether a quiet pass may leave an owned dead-letter queue unread.

Decided from what the broker lists, never from a read (SPEC §8): even a read without bodies is
a delivery (on a quorum queue a replicated log write that raises the letter's delivery count;
on 3.x it moves the letter to the back). So a pass that proves every letter on a queue parked
keeps a :class:`QuietMark`: the queue's listing just before that read, its own gets added. A
later pass leaves the queue unread only while its listing matches the mark in every respect
(:func:`quiet_decision`); anything missing, lower, higher or different is read. What each part
of the mark rules out, measured on RabbitMQ 3.10, 4.0 and 4.3, is in ``docs/architecture.md``
("The quiet mark"); the one change no counter shows (a purge refilled alike) is why a queue is
read again at least every :data:`QUIET_PROOF_SECONDS`. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from reaper.core.domain import QueueStats
from reaper.core.moments import utc
from reaper.core.values import mapping

__all__ = [
    "QUIET_PROOF_SECONDS",
    "UNCOUNTED_REMOVALS",
    "QuietDecision",
    "QuietMark",
    "quiet_decision",
    "quiet_mark",
]

#: How long a pass's proof that every letter was parked stands without another read.
QUIET_PROOF_SECONDS: Final = 3600

#: Policy keys and queue arguments under which the broker removes letters without counting
#: them: a count that stays the same could then hide a new letter in a removed one's place.
UNCOUNTED_REMOVALS: Final = (
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "x-message-ttl",
    "x-max-length",
    "x-max-length-bytes",
)


@dataclass(frozen=True)
class QuietMark:
    """An owned dead-letter queue as the last pass that read it left it: its listing just
    before that read, the read's own gets added to ``fetched``, and whether that read proved
    every letter on the queue parked (only a proven mark spares a read)."""

    queue: str
    #: The database's clock at that pass.
    proven_at: datetime
    proven: bool
    #: Letters on the queue, all ready, every one known parked (0 when not proven).
    letters: int
    message_bytes: int | None
    #: None: the broker listed no ``publish`` counter (nothing published by a publisher yet).
    published: int | None
    #: The least ``deliver_get`` once the reaper's gets so far are counted: exact when proven.
    fetched: int
    #: None: the broker listed no ``ack`` counter (nothing acknowledged yet).
    acknowledged: int | None


@dataclass(frozen=True)
class QuietDecision:
    """Whether to read the queue this pass, and why (the note when it is not read)."""

    read: bool
    why: str


def quiet_decision(queue: QueueStats, mark: QuietMark | None, now: datetime) -> QuietDecision:
    """Read unless the listing proves nothing arrived since a proven ``mark`` and its letters
    are still all parked: every count, byte and counter exactly as marked."""
    doubt = _doubt(queue, mark, now)
    if doubt is not None or mark is None:
        return QuietDecision(True, doubt or "no earlier pass proved every letter on it parked")
    return QuietDecision(
        False,
        f"nothing arrived since the pass at {utc(mark.proven_at)} found its "
        f"{mark.letters} letter(s) parked (count, bytes and counters unchanged)",
    )


def quiet_mark(
    queue: QueueStats,
    previous: QuietMark | None,
    *,
    read: int,
    known_parked: int,
    fetched_by_pass: int,
    now: datetime,
) -> QuietMark:
    """The mark a pass leaves after reading ``queue`` (its listing just before the read).
    Proven only when that listing had counted the reaper's earlier gets (``previous``), lists
    the letters' bytes, and the read returned every letter listed, each one now known
    parked. ``fetched_by_pass``: the messages this pass's gets returned."""
    counters = queue.counters
    # A queue no get was ever counted on lists no fetch counter (RabbitMQ lists message_stats
    # only once something moved): the count this read starts from is 0. Should the listing be
    # older than a get it did not count, the next listing shows more than the mark: read again.
    listed = counters.fetched
    base = 0 if listed is None else listed
    proven = (
        _listing_doubt(queue) is None
        and (previous is None or base >= previous.fetched)
        and counters.message_bytes is not None
        and queue.messages_ready >= 1
        and read == known_parked == queue.messages_ready
        and fetched_by_pass >= read
    )
    return QuietMark(
        queue=queue.name,
        proven_at=now,
        proven=proven,
        letters=queue.messages_ready if proven else 0,
        message_bytes=counters.message_bytes,
        published=counters.published,
        fetched=base + max(0, fetched_by_pass),
        acknowledged=counters.acknowledged,
    )


def _doubt(queue: QueueStats, mark: QuietMark | None, now: datetime) -> str | None:
    """Why the listing does not prove the queue quiet; None when it does."""
    if mark is None or mark.queue != queue.name or not mark.proven:
        return "no earlier pass proved every letter on it parked"
    age = (now - mark.proven_at).total_seconds()
    if not 0 <= age < QUIET_PROOF_SECONDS:
        return f"the last proof that every letter was parked is {age:.0f} s old"
    listing = _listing_doubt(queue)
    if listing is not None:
        return listing
    counters = queue.counters
    if queue.messages_ready != mark.letters:
        return f"it lists {queue.messages_ready} letter(s), not the {mark.letters} found parked"
    if counters.message_bytes != mark.message_bytes:
        return "its letters' bytes changed"
    if counters.fetched is None:
        return "it lists no fetch counter (a restart, or declared anew): unknown"
    for name, now_value, marked in (
        ("fetch", counters.fetched, mark.fetched),
        ("publish", counters.published, mark.published),
        ("acknowledgement", counters.acknowledged, mark.acknowledged),
    ):
        moved = _moved(name, now_value, marked)
        if moved is not None:
            return moved
    return None


def _listing_doubt(queue: QueueStats) -> str | None:
    """What in the listing alone keeps a read from being spared."""
    if not queue.counts_known:
        return "it is listed without its statistics"
    if queue.messages_unacknowledged or queue.consumers:
        return "letters are checked out or consumers attached: a read sees only the ready ones"
    limits = {**mapping(queue.arguments), **mapping(queue.effective_policy)}
    found = sorted(k for k in UNCOUNTED_REMOVALS if k in limits)
    if found:
        return f"{', '.join(found)} in force removes letters without counting them"
    return None


def _moved(name: str, value: int | None, marked: int | None) -> str | None:
    """Why a counter differs from the mark; None when it is as marked (absent both times
    included, and absent then, 0 now: a queue's first gets make RabbitMQ list every counter,
    at 0 where nothing was counted; the fetch counter, always marked, shows a reset between)."""
    if value == marked or (marked is None and value == 0):
        return None
    if value is None or (marked is not None and value < marked):
        return (
            f"its {name} counter is below the last pass's (a restart, the queue declared anew, "
            "or statistics older than that pass's read): unknown"
        )
    return f"its {name} counter moved since the last pass"
