"""Reading a dead-letter queue without losing a letter: whether, how much, and what is new.

Reading a dead-letter queue without losing a letter (SPEC §1 (e), §4): whether a
requeueing read is proven safe and how much to read (:func:`read_plan`), which letters read are
new (:func:`select_new`), and what stays unread (:func:`unread_count`). Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reaper.core.bounds import (
    dead_letter_exchange_in_force,
    delivery_limit_applies,
    delivery_limit_bound,
)
from reaper.core.cluster import queue_unavailable
from reaper.core.dead_letters.decode import envelope, header_identity
from reaper.core.dead_letters.untrusted import quote_untrusted
from reaper.core.domain import BrokerFacts, DeadLetter, QueueStats

__all__ = [
    "READ_PAST_PARKED_CAP",
    "HeaderRead",
    "QuietRead",
    "ReadPlan",
    "header_read",
    "quiet_read",
    "read_plan",
    "remainder_bucket",
    "select_new",
    "unread_count",
]

#: How many already-parked dead letters one pass reads past, at most. The read is bounded by
#: ``peek_limit`` plus this; new letters beyond it stay unread and are surfaced as unread.
READ_PAST_PARKED_CAP = 1_000


@dataclass(frozen=True)
class ReadPlan:
    """What one pass may read from a dead-letter queue.

    ``count`` is how many messages to ``get`` (0 when blocked). ``blocked`` is None when the
    read is proven safe, else why it is not (for ``dead_letters[].read_blocked``). ``budget``
    is the finite delivery limit in force when reads spend deliveries, else None. ``basis``
    says what the proof rests on.
    """

    count: int
    blocked: str | None
    budget: int | None
    basis: str = ""


def read_plan(
    queue: QueueStats, facts: BrokerFacts, peek_limit: int, already_parked_hint: int = 0
) -> ReadPlan:
    """Whether and how much of an owned dead-letter queue a pass may read (SPEC §1, §4).

    The read is ``get`` with ``ackmode=reject_requeue_true``; it must not cost a message. It is
    proven safe on a classic queue (a requeueing read counts nothing) and on a quorum queue with
    no finite delivery limit in force; a finite limit (each read spends a delivery, and a spent
    letter is dropped or dead-lettered onward), a stream, an unknown type or a queue that cannot
    be served now blocks it (``docs/architecture.md``, "Reading a dead letter safely").
    ``count``: up to ``already_parked_hint + peek_limit`` messages, the parked part capped at
    ``READ_PAST_PARKED_CAP``, never more than listed (listed, not ready: a sample taken while an
    earlier read had them out shows them unacknowledged for seconds after they are back).
    """
    name = quote_untrusted(queue.name)
    unreadable = _unreadable(queue, facts, name)
    if unreadable is not None:
        return unreadable
    kind = queue.kind
    count = _read_count(queue, peek_limit, already_parked_hint)
    if kind == "classic" and not delivery_limit_applies(queue, facts):
        return ReadPlan(count, None, None, "classic queue: a requeueing read counts no delivery")

    bound = delivery_limit_bound(queue, facts)
    label = "quorum queue" if kind == "quorum" else "queue"
    if not bound.known:
        return ReadPlan(0, f"{label} {name}: the delivery limit in force is unknown", None)
    if bound.value is None:
        return ReadPlan(
            count, None, None, f"{label} with no delivery limit in force: {bound.source}"
        )
    return _limited(queue, facts, f"{label} {name}", bound.value, bound.source)


def _unreadable(queue: QueueStats, facts: BrokerFacts, name: str) -> ReadPlan | None:
    """The plan of a queue no read is proven safe on, whatever its limits; else None."""
    unavailable = queue_unavailable(queue, facts.nodes)
    if unavailable is not None:
        # Measured on a 4.3 cluster: a get on a queue whose node is gone fails, and one on a
        # quorum queue in minority can hang for 60 s; nothing proves it requeues there.
        reason = (
            f"{name} is not read while it cannot be served ({unavailable}): a dead-letter "
            "queue is read only with its leader up and a majority of its members online"
        )
        return ReadPlan(0, reason, None)
    if not queue.counts_known:
        # A quorum queue whose leader just changed lists no statistics for a few seconds.
        reason = f"{name} is listed without its statistics (new, or a new leader): not read"
        return ReadPlan(0, reason, None)
    kind = queue.kind
    if kind == "stream":
        return ReadPlan(0, f"{name} is a stream: a requeueing get cannot read it", None)
    if kind not in ("classic", "quorum"):
        reason = f"{name} has queue type {quote_untrusted(kind)}: reading it is not proven safe"
        return ReadPlan(0, reason, None)
    return None


def _limited(queue: QueueStats, facts: BrokerFacts, what: str, limit: int, source: str) -> ReadPlan:
    """The blocked plan of a queue with a finite delivery ``limit`` in force, and the fix."""
    exchange = dead_letter_exchange_in_force(queue)
    consequence = (
        f"reading could dead-letter a message onward through exchange "
        f"{quote_untrusted(exchange)}, off this queue"
        if exchange is not None
        else "reading could drop a dead letter"
    )
    if facts.product.lower() == "lavinmq":
        # Measured on LavinMQ 2.9.1: a requeueing HTTP read spends x-delivery-limit, and a
        # delivery-limit -1 policy empties the queue instead of lifting the limit.
        return ReadPlan(
            0,
            f"{what} has {_limit_named(limit, source)} in force, and on "
            f"{facts.name} every requeueing read spends one delivery of it: {consequence}. "
            f"Nothing lifts it there (a delivery-limit -1 policy empties the queue), so it is "
            "not read: declare the dead-letter queue without x-delivery-limit",
            limit,
        )
    if facts.unlimited_delivery_limit:
        remedy = "the reconciled dead-letter policy (delivery-limit -1) is not in force"
    else:
        remedy = (
            "the reconciled dead-letter policy, which sets no delivery limit here "
            f"({facts.product} {facts.version} refuses delivery-limit -1), is not the one in force"
        )
    blocked = (
        f"{what} has a delivery limit of {limit} in force ({source}) and a "
        f"requeueing read counts as a delivery: {consequence}; {remedy}"
    )
    return ReadPlan(0, blocked, limit)


def _limit_named(value: int, source: str) -> str:
    """``x-delivery-limit: 3`` where one setting gives the limit, else the value and where."""
    named = {
        "argument x-delivery-limit": "x-delivery-limit",
        "policy delivery-limit": "policy delivery-limit",
    }.get(source)
    return f"{named}: {value}" if named else f"a delivery limit of {value} ({source})"


def select_new(
    letters: Iterable[DeadLetter], parked_identities: set[str], peek_limit: int
) -> tuple[list[DeadLetter], int]:
    """The letters to park now, and how many distinct letters read were already parked.

    By identity, never by position: on 3.x a requeueing read moves a quorum message to the
    back, so the order changes from read to read. A letter read twice in one read (same
    identity) counts once. At most ``peek_limit`` new letters, in the order read; new letters
    past that are left for ``unread_count``.
    """
    limit = max(0, peek_limit)
    new: list[DeadLetter] = []
    seen: set[str] = set()
    already = 0
    for letter in letters:
        if letter.identity in seen:
            continue
        seen.add(letter.identity)
        if letter.identity in parked_identities:
            already += 1
        elif len(new) < limit:
            new.append(letter)
    return new, already


def unread_count(
    depth: int,
    letters: Iterable[DeadLetter],
    parked_identities: set[str],
    new: Iterable[DeadLetter],
) -> int:
    """How many of the queue's ``depth`` messages are neither parked nor being parked now:
    never read, or read but past ``peek_limit``. Measured and surfaced, never assumed parked."""
    accounted = set(parked_identities) | {letter.identity for letter in new}
    covered = sum(1 for letter in letters if letter.identity in accounted)
    return max(0, depth - covered)


def _read_count(queue: QueueStats, peek_limit: int, already_parked_hint: int) -> int:
    listed = max(0, queue.messages) if queue.counts_known else 0
    past = min(max(0, already_parked_hint), READ_PAST_PARKED_CAP)
    return min(listed, max(0, peek_limit) + past)


# --------------------------------------------------------------------------- quiet passes


@dataclass(frozen=True)
class HeaderRead:
    """What a read without bodies tells of each message: a message id's identity, an
    envelope (:func:`reaper.core.dead_letters.envelope`), or nothing to go on."""

    #: The identity of each message read that has a message id (repeats kept).
    identities: tuple[str, ...]
    #: The envelope of each message read with no message id (repeats kept: twins).
    envelopes: tuple[str, ...]
    #: Messages with neither: only their body can tell whether they are parked.
    unknown: int

    @property
    def count(self) -> int:
        return len(self.identities) + len(self.envelopes) + self.unknown


@dataclass(frozen=True)
class QuietRead:
    """Whether the letters a read without bodies saw are all parked already."""

    #: Every letter read is parked: the pass reads no body.
    quiet: bool
    #: Distinct letters read that are known parked (``already_parked``).
    parked: int
    #: Messages read that are known parked (they are not part of the unread remainder).
    covered: int


def header_read(raw: Iterable[Mapping[str, object]]) -> HeaderRead:
    """Each message of a read without bodies by what its headers say (pure)."""
    identities: list[str] = []
    envelopes: list[str] = []
    unknown = 0
    for message in raw:
        identity = header_identity(message)
        if identity is not None:
            identities.append(identity)
            continue
        found = envelope(message)
        if found is None:
            unknown += 1
        else:
            envelopes.append(found)
    return HeaderRead(tuple(identities), tuple(envelopes), unknown)


def quiet_read(
    read: HeaderRead, parked_identities: set[str], parked_envelopes: Mapping[str, int]
) -> QuietRead:
    """Whether every letter a read without bodies saw is parked, by what the store holds: the
    identities parked, and how many parked letters carry each envelope.

    A letter with a message id is parked when its identity is. Letters with no message id are
    counted by envelope: ``k`` read with one envelope are all parked only when at least ``k``
    parked letters carry it, so a new letter whose envelope equals a parked one's (twins: the
    same headers, the same second, the same size) is never taken for it while its twin is on
    the queue. A message with nothing to go on is never known parked. Only a quiet read
    (everything parked) spares the bodies; otherwise the pass reads them and decides by
    identity.
    """
    counts = Counter(read.envelopes)
    ids_parked = [i for i in read.identities if i in parked_identities]
    env_parked = {e: min(n, max(0, parked_envelopes.get(e, 0))) for e, n in counts.items()}
    covered = len(ids_parked) + sum(env_parked.values())
    parked = len(set(ids_parked)) + sum(env_parked.values())
    quiet = read.unknown == 0 and covered == read.count
    return QuietRead(quiet, parked, covered)


def remainder_bucket(unread: int) -> int:
    """The power of ten an unread remainder has reached: 1 for 1-9, 10 for 10-99, 100 for
    100-999, ...; 0 for none. A remainder is recorded again only when it reaches a higher
    bucket, so a steady trickle is not an event per pass."""
    if unread < 1:
        return 0
    bucket = 1
    while bucket * 10 <= unread:
        bucket *= 10
    return bucket
