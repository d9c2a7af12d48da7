"""The judge: every measurement against its declared threshold (SPEC §1).

``judge(measurements, thresholds, now)`` is pure. It reads no clock, logs nothing and does
no I/O; given the same arguments it returns the same ``Judgement``, in the same order, whatever
order the measurements came in.

It never trusts the store or the broker to have filtered for it: a lease not yet past its grace,
an age that cannot be measured or a timestamp in the future concludes nothing. Broker values are
read through :mod:`reaper.core.values` and bounds through :mod:`reaper.core.bounds`, so judging
is total over whatever the management API lists.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from reaper.core.bounds import (
    POLICY_NOT_LISTED,
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
    ClaimableHead,
    Condition,
    HeldLease,
    Judgement,
    Measurements,
    QueueStats,
    Source,
    Thresholds,
    Unit,
    Verdict,
)
from reaper.core.values import count, finite

__all__ = ["judge"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

#: Quoted names and values are cut here: a broker's queue names are not our words.
_QUOTE_LIMIT = 200


# --------------------------------------------------------------------------- the judge


def judge(measurements: Measurements, thresholds: Thresholds, now: datetime) -> Judgement:
    """Judge every measurement against its threshold. ``now`` must be timezone-aware.

    A source that could not be read (``None`` in ``measurements``) yields nothing. Verdicts
    come sorted (job queue, then broker; by project, object, condition) with exact duplicates
    removed; notes sorted and unique. At most one broker verdict per queue and condition: two
    missing bounds on one queue are one ``unbounded`` verdict naming both, since they are one
    sighting.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    verdicts: list[Verdict] = []
    notes: list[str] = []
    if measurements.leases is not None and measurements.claimable is not None:
        verdicts.extend(_judge_leases(measurements.leases, thresholds, now))
        verdicts.extend(_judge_claimable(measurements.claimable, thresholds, now))
    if measurements.queues is not None:
        now_us = (now - _EPOCH) // _MICROSECOND
        for queue in measurements.queues:
            verdicts.extend(_judge_queue(queue, measurements.broker, thresholds, now_us, notes))
    unique = dict.fromkeys(sorted(verdicts, key=_order))
    return Judgement(verdicts=tuple(unique), notes=tuple(sorted(set(notes))))


# --------------------------------------------------------------------------- job queue


def _judge_leases(
    leases: Iterable[HeldLease], thresholds: Thresholds, now: datetime
) -> Iterable[Verdict]:
    grace = thresholds.lease_grace_seconds
    for lease in leases:
        past = _ceil_seconds(now - lease.lease_expires_at)
        if not past > grace:
            continue  # not yet past grace: the store's filter is not trusted
        held = f"lease of {lease.kind} job held by {_owner(lease)}"
        if lease.attempts >= lease.max_attempts:
            yield _lease_verdict(
                lease,
                Condition.POISON,
                Action.PARK,
                measured=lease.attempts,
                threshold=lease.max_attempts,
                unit=Unit.ATTEMPTS,
                detail=(
                    f"{held} expired {_num(past)}s ago with {lease.attempts} of "
                    f"{lease.max_attempts} attempts spent: park for a person "
                    "(delivery_exhausted gate)"
                ),
            )
        else:
            yield _lease_verdict(
                lease,
                Condition.LEASE_EXPIRED,
                Action.REQUEUE,
                measured=past,
                threshold=grace,
                unit=Unit.SECONDS,
                detail=(
                    f"{held} expired {_num(past)}s ago, past the grace of {grace}s: requeue "
                    f"(attempt {lease.attempts} of {lease.max_attempts} spent)"
                ),
            )


def _lease_verdict(
    lease: HeldLease,
    condition: Condition,
    action: Action,
    *,
    measured: float | int,
    threshold: int,
    unit: Unit,
    detail: str,
) -> Verdict:
    return Verdict(
        source=Source.JOB_QUEUE,
        object=str(lease.job_id),
        condition=condition,
        measured=measured,
        threshold=threshold,
        unit=unit,
        action=action,
        project_id=lease.project_id,
        detail=detail,
        lease=lease,
    )


def _judge_claimable(
    heads: Iterable[ClaimableHead], thresholds: Thresholds, now: datetime
) -> Iterable[Verdict]:
    # One head per project is the store's promise; keep the oldest should it break it, so a
    # project is one sighting.
    oldest: dict[UUID, ClaimableHead] = {}
    for head in heads:
        kept = oldest.get(head.project_id)
        if kept is None or (head.claimable_since, str(head.job_id)) < (
            kept.claimable_since,
            str(kept.job_id),
        ):
            oldest[head.project_id] = head
    limit = thresholds.stale_ready_seconds
    for head in oldest.values():
        age = _ceil_seconds(now - head.claimable_since)
        if age > 0 and age > limit:
            yield Verdict(
                source=Source.JOB_QUEUE,
                object=str(head.job_id),
                condition=Condition.STALE_READY,
                measured=age,
                threshold=limit,
                unit=Unit.SECONDS,
                action=Action.SURFACE,
                project_id=head.project_id,
                detail=(
                    f"oldest claimable {head.kind} job of its project unclaimed for "
                    f"{_num(age)}s, more than stale_ready_seconds {limit}"
                ),
            )


# --------------------------------------------------------------------------- broker


def _judge_queue(
    queue: QueueStats,
    broker: BrokerFacts | None,
    thresholds: Thresholds,
    now_us: int,
    notes: list[str],
) -> Iterable[Verdict]:
    owned = is_owned_queue(queue.name, thresholds)
    dead_letter = is_dead_letter_queue(queue.name, thresholds)
    found: list[Verdict] = []

    unbounded: list[_Finding] = []
    if owned:
        if queue.counts_known:
            timeout = _no_consumer_timeout(queue, broker, notes)
            unbounded.extend([timeout] if timeout is not None else [])
        unbounded.extend(_delivery_limit_findings(queue, broker, dead_letter, notes))
    if unbounded:
        first = unbounded[0]
        found.append(
            _queue_verdict(
                queue,
                Condition.UNBOUNDED,
                Action.SURFACE,
                measured=first.measured,
                threshold=first.threshold,
                unit=first.unit,
                detail="; ".join(finding.detail for finding in unbounded),
            )
        )

    if not queue.counts_known:
        # Listed before its statistics arrived: the zeros are not a measurement.
        notes.append(
            f"queue {_quote(queue.name)} is listed without statistics yet (a new queue); its "
            "counts are not measured"
        )
        return found
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
        stale = _stale_ready(queue, thresholds, now_us, notes)
        if stale is not None:
            found.append(stale)
    else:
        depth = count(queue.messages_ready) + unacked
        if depth >= thresholds.dead_letter_min_depth:
            found.append(
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
            )
    return found


@dataclass(frozen=True)
class _Finding:
    measured: float | int | None
    threshold: float | int | None
    unit: Unit
    detail: str


def _no_consumer_timeout(
    queue: QueueStats, broker: BrokerFacts | None, notes: list[str]
) -> _Finding | None:
    unacked = count(queue.messages_unacknowledged)
    if unacked <= 0:
        return None
    bound = consumer_timeout_bound(queue, broker)
    if not bound.known:
        notes.append(
            f"consumer timeout of queue {_quote(queue.name)} not known ({bound.source}); not judged"
        )
        return None
    if bound.value is not None:
        return None
    return _Finding(
        unacked,
        None,
        Unit.MESSAGES,
        f"{unacked} unacknowledged message(s) on queue {_quote(queue.name)} and no consumer "
        f"timeout is in force ({bound.source}): a hung handler holds them forever",
    )


def _delivery_limit_findings(
    queue: QueueStats, broker: BrokerFacts | None, dead_letter: bool, notes: list[str]
) -> list[_Finding]:
    if queue.kind != "quorum":
        return []  # a delivery limit binds only quorum queues
    bound = delivery_limit_bound(queue, broker)
    if not bound.known:
        notes.append(
            f"delivery limit of quorum queue {_quote(queue.name)} not known ({bound.source}); "
            "poison bound not judged"
        )
        return []
    exchange = dead_letter_exchange_in_force(queue)
    if exchange is None and bound.value is not None and not queue.policy_known:
        notes.append(
            f"dead-letter exchange of quorum queue {_quote(queue.name)} not known "
            f"({POLICY_NOT_LISTED}); poison bound not judged"
        )
        return []
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
                "argument is in force",
            )
        ]
    return []


def _stale_ready(
    queue: QueueStats, thresholds: Thresholds, now_us: int, notes: list[str]
) -> Verdict | None:
    if count(queue.consumers) != 0 or count(queue.messages_ready) <= 0:
        return None
    timestamp = finite(queue.head_message_timestamp)
    if timestamp is None:
        # An unmeasurable age is not old; say where the broker cannot tell, never guess.
        if queue.kind == "quorum":
            notes.append(
                f"head-message age of quorum queue {_quote(queue.name)} is not reported by the "
                "broker; stale-ready not measured"
            )
        elif queue.type is None:
            notes.append(
                f"head-message age of queue {_quote(queue.name)} is not reported by the broker "
                "(no queue type listed, as on LavinMQ); stale-ready not measured"
            )
        return None
    age_us = now_us - math.floor(timestamp * 1_000_000)
    if age_us == 0:
        return None
    if age_us < 0:
        notes.append(
            f"head-message timestamp of queue {_quote(queue.name)} is in the future (a "
            "publisher's clock, or a timestamp not in seconds); stale-ready not measured"
        )
        return None
    age = -(-age_us // 1000) / 1000  # rounded up to the millisecond
    if is_consumerless_queue(queue.name, thresholds):
        ttl = message_ttl_ms(queue)
        if ttl is None and not queue.policy_known:
            notes.append(
                f"message TTL of consumerless queue {_quote(queue.name)} not known "
                f"({POLICY_NOT_LISTED}); stale-ready not judged"
            )
            return None
        if ttl is not None:
            slack = thresholds.consumerless_slack_seconds
            limit: float | int = _num_value((ttl + slack * 1000) / 1000)
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
        return None
    return _queue_verdict(
        queue,
        Condition.STALE_READY,
        Action.SURFACE,
        measured=age,
        threshold=limit,
        unit=Unit.SECONDS,
        detail=f"head message waiting {_num(age)}s with no consumer: {why}",
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
    )


# --------------------------------------------------------------------------- values


def _order(verdict: Verdict) -> tuple[str, ...]:
    """A total order, so the output does not depend on the order measurements came in."""
    return (
        "0" if verdict.source is Source.JOB_QUEUE else "1",
        str(verdict.project_id or ""),
        verdict.object,
        verdict.condition.value,
        verdict.action.value,
        verdict.queue or "",
        verdict.detail,
        repr(verdict.measured),
        repr(verdict.threshold),
        verdict.unit.value,
        repr(verdict.lease),
    )


def _ceil_seconds(delta: timedelta) -> float:
    """Seconds, rounded up to the millisecond: a measurement past its threshold by any amount
    never reads as equal to it."""
    return -(-(delta // _MICROSECOND) // 1000) / 1000


def _num_value(value: float) -> float | int:
    return int(value) if value.is_integer() else value


def _num(value: float | int) -> str:
    return str(_num_value(float(value))) if isinstance(value, float) else str(value)


def _owner(lease: HeldLease) -> str:
    return _quote(lease.lease_owner) if lease.lease_owner is not None else "no recorded owner"


def _quote(text: str) -> str:
    cut = text[:_QUOTE_LIMIT]
    return repr(cut) + ("…" if len(text) > _QUOTE_LIMIT else "")
