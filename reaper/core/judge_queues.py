"""The judge's half for the broker: one queue against its thresholds.

The judge's half for the broker: one queue against its thresholds (SPEC §1 (a)-(e) on the
broker). Pure, like :mod:`reaper.core.judge`, which calls :func:`judge_queue` for each queue
listed; the small value helpers both halves share are here too."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from reaper.core.bounds import (
    POLICY_NOT_LISTED,
    Bound,
    consumer_timeout_bound,
    dead_letter_exchange_in_force,
    delivery_limit_bound,
    get_holder_unseen,
    is_consumerless_queue,
    is_dead_letter_queue,
    is_owned_queue,
    message_ttl_ms,
)
from reaper.core.domain import (
    Action,
    BrokerFacts,
    Condition,
    QueueStats,
    Source,
    Thresholds,
    Unit,
    Verdict,
)
from reaper.core.head_age import head_age_unreported, num, num_value, quote
from reaper.core.observation import Held, Stalled
from reaper.core.terminal import first_few
from reaper.core.values import count, finite

__all__ = [
    "QueueJudgement",
    "judge_held",
    "judge_queue",
    "num",
    "quote",
    "without_statistics",
]


@dataclass(frozen=True)
class QueueJudgement:
    """One queue's verdicts, and the notes on what could not be judged there."""

    verdicts: tuple[Verdict, ...] = ()
    notes: tuple[str, ...] = ()


def judge_queue(
    queue: QueueStats,
    broker: BrokerFacts | None,
    thresholds: Thresholds,
    now_us: int,
    *,
    stalled: Stalled | None = None,
    observed: bool = False,
) -> QueueJudgement:
    """One queue's verdicts and notes. ``stalled``: what was observed of its deliveries across
    passes (None: not stalled, or not observed); ``observed``: whether observation ran."""
    owned = is_owned_queue(queue.name, thresholds)
    dead_letter = is_dead_letter_queue(queue.name, thresholds)
    found, notes = _unbounded(queue, broker, thresholds, owned, dead_letter)
    if not queue.counts_known:
        # Listed before its statistics arrived: the zeros are not a measurement. The judge
        # notes all such queues at once (:func:`without_statistics`).
        return QueueJudgement(tuple(found), tuple(notes))
    unacked = count(queue.messages_unacknowledged)
    if unacked > 0 and count(queue.consumers) == 0:
        why = get_holder_unseen(queue, broker)
        found.append(
            _queue_verdict(
                queue,
                Condition.HOLDER_GONE,
                Action.SURFACE,
                measured=unacked,
                threshold=0,
                unit=Unit.MESSAGES,
                detail=(
                    f"{unacked} unacknowledged message(s) and no consumer: the holder is gone "
                    "and the broker has not requeued its deliveries"
                    + (f", or a basic.get holder still holds them ({why})" if why else "")
                ),
            )
        )
    if not dead_letter:
        stale, said = _stale_ready(queue, broker, thresholds, now_us, stalled, observed)
        found.extend([stale] if stale is not None else [])
        notes.extend(said)
    else:
        found.extend(_dead_letters(queue, thresholds, owned, unacked))
    return QueueJudgement(tuple(found), tuple(notes))


def without_statistics(names: Sequence[str]) -> list[str]:
    """One note on the queues listed without their statistics (their zeros are not a
    measurement): on a running queue, a new one or one whose leader just moved, whose
    statistics restart there. It names the first few and counts the rest: a node that lists
    thousands of queues so (just restarted, or overloaded) is one line of the report."""
    if not names:
        return []
    ordered = sorted(set(names))
    if len(ordered) == 1:
        return [
            f"queue {quote(ordered[0])} is listed without statistics yet (a new queue, or one "
            "whose leader just moved); its counts are not measured"
        ]
    among = first_few(ordered, quote)
    return [
        f"{len(ordered):,} queues are listed without statistics yet (new queues, or ones whose "
        f"leader just moved): {among}; their counts are not measured"
    ]


def _unbounded(
    queue: QueueStats,
    broker: BrokerFacts | None,
    thresholds: Thresholds,
    owned: bool,
    dead_letter: bool,
) -> tuple[list[Verdict], list[str]]:
    """An owned queue's missing bounds, as one ``unbounded`` verdict naming them all."""
    if not owned:
        return [], []
    unbounded: list[_Finding] = []
    notes: list[str] = []
    if queue.counts_known:
        timeout, said = _no_consumer_timeout(queue, broker, thresholds, dead_letter)
        unbounded.extend([timeout] if timeout is not None else [])
        notes.extend(said)
    limits, said = _delivery_limit_findings(queue, broker, dead_letter)
    unbounded.extend(limits)
    notes.extend(said)
    if not unbounded:
        return [], notes
    first = unbounded[0]
    verdict = _queue_verdict(
        queue,
        Condition.UNBOUNDED,
        Action.SURFACE,
        measured=first.measured,
        threshold=first.threshold,
        unit=first.unit,
        detail="; ".join(finding.detail for finding in unbounded),
        drops=any(finding.drops for finding in unbounded),
    )
    return [verdict], notes


def _dead_letters(
    queue: QueueStats, thresholds: Thresholds, owned: bool, unacked: int
) -> list[Verdict]:
    depth = count(queue.messages_ready) + unacked
    if depth < thresholds.dead_letter_min_depth:
        return []
    return [
        _queue_verdict(
            queue,
            Condition.DEAD_LETTER,
            Action.PARK if owned else Action.SURFACE,
            measured=depth,
            threshold=thresholds.dead_letter_min_depth,
            unit=Unit.MESSAGES,
            detail=(
                f"{depth} dead letter(s), at or above dead_letter_min_depth "
                f"{thresholds.dead_letter_min_depth}: "
                + (
                    "owned, park each as a bus.dead_letter job once reading is proven "
                    "safe; never deleted"
                    if owned
                    else "foreign, surfaced only: never read, never touched"
                )
            ),
        )
    ]


@dataclass(frozen=True)
class _Finding:
    measured: float | int | None
    threshold: float | int | None
    unit: Unit
    detail: str
    drops: bool = False


def _no_consumer_timeout(
    queue: QueueStats,
    broker: BrokerFacts | None,
    thresholds: Thresholds,
    dead_letter: bool = False,
) -> tuple[_Finding | None, list[str]]:
    unacked = count(queue.messages_unacknowledged)
    bound = consumer_timeout_bound(queue, broker)
    if not bound.known:
        if unacked > 0:
            note = f"consumer timeout of queue {quote(queue.name)} not known ({bound.source})"
            return None, [f"{note}; not judged"]
        return None, []
    if bound.value is not None:
        return None, []
    fix = (
        f"; fix: {bound.fix}: {thresholds.consumer_timeout_seconds * 1000} "
        f"(consumer_timeout_seconds {thresholds.consumer_timeout_seconds} in ms)"
        if bound.fix
        else ""
    )
    if unacked <= 0:
        # What the broker cannot enforce (a 4.3 classic queue; LavinMQ without the queue
        # argument) is a finding whatever the work queue holds now: the reaper's own
        # observation across passes is the only guard (SPEC §4). A dead-letter queue has no
        # consumer of ours (the reaper reads it over HTTP): nothing to bound.
        if bound.enforced or dead_letter:
            return None, []
        return _Finding(
            0,
            None,
            Unit.MESSAGES,
            f"no consumer timeout can be in force on queue {quote(queue.name)} "
            f"({bound.source}): the guard is the reaper's own observation across passes, "
            "which reports a consumer that holds deliveries without acknowledging" + fix,
        ), []
    return _Finding(
        unacked,
        None,
        Unit.MESSAGES,
        f"{unacked} unacknowledged message(s) on queue {quote(queue.name)} and no consumer "
        f"timeout is in force ({bound.source}): a hung handler holds them forever" + fix,
    ), []


def _delivery_limit_findings(
    queue: QueueStats, broker: BrokerFacts | None, dead_letter: bool
) -> tuple[list[_Finding], list[str]]:
    if queue.kind != "quorum":
        return [], []  # a delivery limit binds only quorum queues
    bound = delivery_limit_bound(queue, broker)
    if not bound.known:
        return [], [
            f"delivery limit of quorum queue {quote(queue.name)} not known ({bound.source}); "
            "poison bound not judged"
        ]
    exchange = dead_letter_exchange_in_force(queue)
    if exchange is None and bound.value is not None and not queue.policy_known:
        return [], [
            f"dead-letter exchange of quorum queue {quote(queue.name)} not known "
            f"({POLICY_NOT_LISTED}); poison bound not judged"
        ]
    return _delivery_limits(bound, exchange, dead_letter), []


def _delivery_limits(bound: Bound, exchange: str | None, dead_letter: bool) -> list[_Finding]:
    if dead_letter:
        if bound.value is None or exchange is not None:
            return []
        return [
            _Finding(
                bound.value,
                None,
                Unit.ATTEMPTS,
                f"reads would drop: a delivery limit of {bound.value} ({bound.source}) is in "
                "force on this dead-letter queue with no dead-letter exchange, and every "
                "requeueing read spends one delivery; put the dead-letter policy in force "
                "before reading",
            )
        ]
    if bound.value is None:
        return [
            _Finding(
                None,
                None,
                Unit.ATTEMPTS,
                f"poison is unbounded: no delivery limit is in force ({bound.source}), so a "
                "message that kills its handler is redelivered forever",
            )
        ]
    if exchange is None:
        return [
            _Finding(
                bound.value,
                None,
                Unit.ATTEMPTS,
                f"a delivery limit of {bound.value} ({bound.source}) would drop, not "
                "dead-letter: no dead-letter-exchange policy or x-dead-letter-exchange "
                "argument is in force; fix: declare the queue with x-dead-letter-exchange and "
                "a dead-letter queue bound to it",
                drops=True,
            )
        ]
    return []


def _stale_ready(
    queue: QueueStats,
    broker: BrokerFacts | None,
    thresholds: Thresholds,
    now_us: int,
    stalled: Stalled | None,
    observed: bool,
) -> tuple[Verdict | None, list[str]]:
    if count(queue.messages_ready) <= 0:
        return None, []
    if count(queue.consumers) != 0:
        return _wedged(queue, thresholds, stalled), []
    timestamp = finite(queue.head_message_timestamp)
    if timestamp is None:
        notes: list[str] = []
        if stalled is not None:
            # No head timestamp, but nothing delivered and nothing gone since a pass first
            # saw it: its head message has waited at least that long.
            found, notes = _stale_head(queue, thresholds, stalled.seconds, lower_bound=True)
            if found is not None:
                return found, notes
        # An unmeasurable age is not old; say so on every broker that cannot tell, never guess.
        note = head_age_unreported(queue, broker, stalled, observed)
        return None, notes + ([note] if note is not None else [])
    age_us = now_us - math.floor(timestamp * 1_000_000)
    if age_us == 0:
        return None, []
    if age_us < 0:
        return None, [
            f"head-message timestamp of queue {quote(queue.name)} is in the future (a "
            "publisher's clock, or a timestamp not in seconds); stale-ready not measured"
        ]
    age = -(-age_us // 1000) / 1000  # rounded up to the millisecond
    return _stale_head(queue, thresholds, age, lower_bound=False)


def _stale_head(
    queue: QueueStats,
    thresholds: Thresholds,
    age: float,
    *,
    lower_bound: bool,
) -> tuple[Verdict | None, list[str]]:
    """A queue with no consumer whose head message has waited ``age`` seconds (at least, when
    ``lower_bound``: measured across passes)."""
    if is_consumerless_queue(queue.name, thresholds):
        ttl = message_ttl_ms(queue)
        if ttl is None and not queue.policy_known:
            return None, [
                f"message TTL of consumerless queue {quote(queue.name)} not known "
                f"({POLICY_NOT_LISTED}); stale-ready not judged"
            ]
        if ttl is not None:
            slack = thresholds.consumerless_slack_seconds
            limit: float | int = num_value((ttl + slack * 1000) / 1000)
            why = (
                f"consumerless by design, judged against its message TTL of {ttl} ms plus "
                f"{slack}s slack"
            )
        else:
            limit = thresholds.stale_ready_seconds
            why = (
                "consumerless by design but no message TTL is in force, so judged against "
                f"stale_ready_seconds {limit}"
            )
    else:
        limit = thresholds.stale_ready_seconds
        why = f"more than stale_ready_seconds {limit}"
    if not age > limit:
        return None, []
    waiting = (
        f"head message waiting at least {num(age)}s with no consumer (nothing delivered from "
        "the queue and no ready message gone since a pass first saw it; the broker reports no "
        "head timestamp)"
        if lower_bound
        else f"head message waiting {num(age)}s with no consumer"
    )
    return _stale(queue, age, limit, f"{waiting}: {why}"), []


def _wedged(queue: QueueStats, thresholds: Thresholds, stalled: Stalled | None) -> Verdict | None:
    """A queue with consumers attached from which nothing has been delivered, measured across
    passes: every consumer's prefetch held, or a single-active-consumer queue that delivers
    to nobody."""
    limit = thresholds.stale_ready_seconds
    if stalled is None or not stalled.seconds > limit:
        return None
    age = num_value(round(stalled.seconds, 3))
    consumers = count(queue.consumers)
    return _stale(
        queue,
        age,
        limit,
        f"wedged: {count(queue.messages_ready)} ready message(s) and {consumers} "
        f"consumer(s), and nothing delivered from the queue for at least {num(age)}s "
        f"(since a pass first saw it so), more than stale_ready_seconds {limit}: every "
        "consumer's prefetch is held, or a single-active-consumer queue delivers to nobody",
    )


def judge_held(held: Iterable[Held], listed: set[str], thresholds: Thresholds) -> Iterable[Verdict]:
    """``hung_handler`` on each owned queue a channel has held deliveries from without
    acknowledging anything for longer than ``longest_lease_seconds``: one verdict per queue,
    naming the longest such hold (a queue is one sighting)."""
    limit = thresholds.longest_lease_seconds
    longest: dict[str, Held] = {}
    for hold in held:
        if not hold.seconds > limit:
            continue
        for queue in hold.queues:
            kept = longest.get(queue)
            if queue in listed and (kept is None or hold.seconds > kept.seconds):
                longest[queue] = hold
    for queue, hold in sorted(longest.items()):
        age = num_value(round(hold.seconds, 3))
        yield Verdict(
            source=Source.BROKER,
            object=queue,
            condition=Condition.HUNG_HANDLER,
            measured=age,
            threshold=limit,
            unit=Unit.SECONDS,
            action=Action.SURFACE,
            queue=queue,
            detail=(
                f"channel {quote(hold.channel)} (consumer(s) "
                f"{', '.join(quote(t) for t in hold.consumers)}) has held "
                f"{hold.unacknowledged} unacknowledged delivery(ies) without acknowledging "
                f"anything for at least {num(age)}s (since a pass first saw it so), more than "
                f"longest_lease_seconds {limit}: a hung handler"
            ),
            trusted=False,  # a broker's channel and queue names are not our words
        )


def _stale(queue: QueueStats, age: float | int, limit: float | int, detail: str) -> Verdict:
    """``stale_ready`` on ``queue``: its head or its deliveries ``age`` seconds still."""
    return _queue_verdict(
        queue,
        Condition.STALE_READY,
        Action.SURFACE,
        measured=age,
        threshold=limit,
        unit=Unit.SECONDS,
        detail=detail,
    )


def _queue_verdict(
    queue: QueueStats,
    condition: Condition,
    action: Action,
    *,
    measured: float | int | None,
    threshold: float | int | None,
    unit: Unit,
    detail: str,
    drops: bool = False,
) -> Verdict:
    return Verdict(
        source=Source.BROKER,
        object=queue.name,
        condition=condition,
        measured=measured,
        threshold=threshold,
        unit=unit,
        action=action,
        queue=queue.name,
        detail=detail,
        trusted=False,  # a broker's queue names are not our words
        drops=drops,
    )
