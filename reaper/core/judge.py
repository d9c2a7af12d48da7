"""The judge: every measurement against its declared threshold (SPEC §1).

``judge(measurements, thresholds, now)`` is pure. It reads no clock, logs nothing and does
no I/O; given the same arguments it returns the same ``Judgement``, in the same order, whatever
order the measurements came in.

It never trusts the store or the broker to have filtered for it: an age that cannot be measured
or a timestamp in the future concludes nothing. Broker values are read through
:mod:`reaper.core.values` and bounds through :mod:`reaper.core.bounds`, so judging is total over
whatever the management API lists. One queue is judged in :mod:`reaper.core.judge_queues`;
expired leases, a page at a time, in :mod:`reaper.core.judge_leases`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TypeVar
from uuid import UUID

from reaper.core.domain import (
    Action,
    ClaimableHead,
    Condition,
    Judgement,
    Measurements,
    Source,
    Thresholds,
    Unit,
    UnsentDispatch,
    Verdict,
)
from reaper.core.head_age import group_head_age_notes
from reaper.core.judge_queues import judge_held, judge_queue, num

_Row = TypeVar("_Row", ClaimableHead, UnsentDispatch)

__all__ = ["judge"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


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
    if measurements.claimable is not None:
        verdicts.extend(_judge_claimable(measurements.claimable, thresholds, now))
    if measurements.unsent is not None:
        verdicts.extend(_judge_unsent(measurements.unsent, thresholds, now))
    if measurements.queues is not None:
        now_us = (now - _EPOCH) // _MICROSECOND
        observed = measurements.observed
        for queue in measurements.queues:
            stalled = observed.stalled.get(queue.name) if observed is not None else None
            judged = judge_queue(
                queue,
                measurements.broker,
                thresholds,
                now_us,
                stalled=stalled,
                observed=observed is not None,
            )
            verdicts.extend(judged.verdicts)
            notes.extend(judged.notes)
        if observed is not None:
            listed = {q.name for q in measurements.queues}
            verdicts.extend(judge_held(observed.held, listed, thresholds))
    unique = dict.fromkeys(sorted(verdicts, key=_order))
    return Judgement(verdicts=tuple(unique), notes=tuple(sorted(set(group_head_age_notes(notes)))))


# --------------------------------------------------------------------------- job queue


def _oldest_per_project(rows: Iterable[_Row], since: Callable[[_Row], datetime]) -> Iterable[_Row]:
    """The oldest row of each project (by ``since``, then job id: the same one every time)."""
    oldest: dict[UUID, _Row] = {}
    for row in rows:
        kept = oldest.get(row.project_id)
        if kept is None or (since(row), str(row.job_id)) < (since(kept), str(kept.job_id)):
            oldest[row.project_id] = row
    return oldest.values()


def _surfaced(
    row: ClaimableHead | UnsentDispatch, condition: Condition, age: float, limit: int, detail: str
) -> Verdict:
    """A job-queue verdict surfacing a project's oldest ``row``, ``age`` seconds against the
    threshold ``limit``."""
    return Verdict(
        source=Source.JOB_QUEUE,
        object=str(row.job_id),
        condition=condition,
        measured=age,
        threshold=limit,
        unit=Unit.SECONDS,
        action=Action.SURFACE,
        project_id=row.project_id,
        detail=detail,
    )


def _over_limit(
    rows: Iterable[_Row], since: Callable[[_Row], datetime], limit: int, now: datetime
) -> Iterable[tuple[_Row, float]]:
    """The oldest row of each project (one per project: a project is one sighting) with its
    age, where that age is more than ``limit`` seconds. A time in the future concludes
    nothing."""
    for row in _oldest_per_project(rows, since):
        age = ceil_seconds(now - since(row))
        if age > 0 and age > limit:
            yield row, age


def _judge_claimable(
    heads: Iterable[ClaimableHead], thresholds: Thresholds, now: datetime
) -> Iterable[Verdict]:
    # One head per project is the store's promise; keep the oldest should it break it.
    limit = thresholds.stale_ready_seconds
    for head, age in _over_limit(heads, lambda h: h.claimable_since, limit, now):
        yield _surfaced(
            head,
            Condition.STALE_READY,
            age,
            limit,
            f"oldest claimable {head.kind} job of its project unclaimed for "
            f"{num(age)}s, more than stale_ready_seconds {limit}",
        )


def _judge_unsent(
    unsent: Iterable[UnsentDispatch], thresholds: Thresholds, now: datetime
) -> Iterable[Verdict]:
    limit = thresholds.stale_ready_seconds
    for row, age in _over_limit(unsent, lambda r: r.written_at, limit, now):
        yield _surfaced(
            row,
            Condition.LOST_DISPATCH,
            age,
            limit,
            f"dispatch {row.dispatch_seq} of a ready {row.kind} job was written to the "
            f"outbox {num(age)}s ago and never sent, more than stale_ready_seconds "
            f"{limit}: the host's outbox relay is not publishing, and no worker can "
            "receive the job until it does",
        )


# --------------------------------------------------------------------------- values


def ceil_seconds(delta: timedelta) -> float:
    """Seconds, rounded up to the millisecond: a measurement past its threshold by any amount
    never reads as equal to it."""
    return -(-(delta // _MICROSECOND) // 1000) / 1000


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
