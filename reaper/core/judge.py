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
from reaper.core.judge_queues import judge_held, judge_queue, num, without_statistics

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
    # A claimable job unclaimed and a dispatch unsent are both work a worker should have by now.
    stale = thresholds.stale_ready_seconds
    if measurements.claimable is not None:
        verdicts.extend(
            _waited_too_long(measurements.claimable, Condition.STALE_READY, _unclaimed, stale, now)
        )
    if measurements.unsent is not None:
        verdicts.extend(
            _waited_too_long(measurements.unsent, Condition.LOST_DISPATCH, _unsent, stale, now)
        )
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
        unmeasured = [q.name for q in measurements.queues if not q.counts_known]
        notes.extend(without_statistics([*unmeasured, *measurements.without_statistics]))
        if observed is not None:
            listed = {q.name for q in measurements.queues}
            verdicts.extend(judge_held(observed.held, listed, thresholds))
    unique = dict.fromkeys(sorted(verdicts, key=_order))
    return Judgement(verdicts=tuple(unique), notes=tuple(sorted(set(group_head_age_notes(notes)))))


# --------------------------------------------------------------------------- job queue


def _oldest_per_project(rows: Iterable[_Row]) -> Iterable[_Row]:
    """The oldest row of each project (by :func:`_since`, then job id: the same one every
    time). The store promises one claimable head a project; should it break that, the oldest
    is kept."""
    oldest: dict[UUID, _Row] = {}
    for row in rows:
        kept = oldest.get(row.project_id)
        if kept is None or (_since(row), str(row.job_id)) < (_since(kept), str(kept.job_id)):
            oldest[row.project_id] = row
    return oldest.values()


def _waited_too_long(
    rows: Iterable[_Row],
    condition: Condition,
    wording: Callable[[_Row, float, int], str],
    limit: int,
    now: datetime,
) -> Iterable[Verdict]:
    """A job-queue verdict surfacing the oldest row of each project (one per project: a
    project is one sighting), where it has waited more than ``limit`` seconds: its age against
    ``limit``, said by ``wording``. A time in the future concludes nothing."""
    for row in _oldest_per_project(rows):
        age = ceil_seconds(now - _since(row))
        if age > 0 and age > limit:
            yield Verdict(
                source=Source.JOB_QUEUE,
                object=str(row.job_id),
                condition=condition,
                measured=age,
                threshold=limit,
                unit=Unit.SECONDS,
                action=Action.SURFACE,
                project_id=row.project_id,
                detail=wording(row, age, limit),
            )


def _since(row: ClaimableHead | UnsentDispatch) -> datetime:
    """Since when a row's work has waited: claimable, or written to the outbox."""
    return row.claimable_since if isinstance(row, ClaimableHead) else row.written_at


def _unclaimed(head: ClaimableHead, age: float, limit: int) -> str:
    return (
        f"oldest claimable {head.kind} job of its project unclaimed for "
        f"{num(age)}s, more than stale_ready_seconds {limit}"
    )


def _unsent(row: UnsentDispatch, age: float, limit: int) -> str:
    return (
        f"dispatch {row.dispatch_seq} of a ready {row.kind} job was written to the "
        f"outbox {num(age)}s ago and never sent, more than stale_ready_seconds "
        f"{limit}: the host's outbox relay is not publishing, and no worker can "
        "receive the job until it does"
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
