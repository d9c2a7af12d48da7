"""The pass's lease step: expired leases read, judged and moved a page at a time, each move
with its event (SPEC §1 (a), (c); §8).

A page is read from where the last one ended (its expiry and job id), judged by the pure lease
judge in columns, and moved as one set-based step, and only then is the next page read. The
moves keep both of a small machine's cores busy on their own (two lanes, see
:mod:`reaper.jobqueue.leases`); measured, reading or judging the next page beside them slowed
the moves by more than it saved (``bench/lease_reap.py``). Every ruling goes to the pass's
:class:`~reaper.reap.lease_log.LeaseLog`, so a pass holds one page of leases at a time. The
pages go on until none is left or the time budget (``lease_reap_budget_seconds``) is spent;
what is left then is counted and reported, and the next turn comes at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core.domain import Dispatch, Thresholds
from reaper.core.judge_leases import LeaseColumns, LeaseRulings, judge_lease_page
from reaper.errors import SourceUnreadable
from reaper.jobqueue.port import JobQueue, LeaseMoves, MovesInterrupted
from reaper.reap.lease_log import LeaseLog
from reaper.reap.progress import Found, RowNotMoved, cut_short_words

__all__ = ["LEASE_PAGE_SIZE", "LeaseReapOutcome", "reap_leases"]

#: Leases read, judged and moved at once. A few thousand: enough that a page is a handful of
#: set-based statements, few enough that a pass holds little whatever its number of leases.
LEASE_PAGE_SIZE: Final = 5000


@dataclass(frozen=True)
class LeaseReapOutcome:
    #: Expired leases left unread because the budget was spent (0: the reap went to the end).
    remaining: int = 0
    found: Found = field(default_factory=Found)


async def reap_leases(
    store: JobQueue,
    thresholds: Thresholds,
    now: datetime,
    *,
    budget_seconds: float,
    project_id: UUID | None,
    dispatch: Dispatch,
    write: bool,
    log: LeaseLog,
    monotonic: Callable[[], float] = time.monotonic,
    page_size: int | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> LeaseReapOutcome:
    """Read the expired leases in pages (of ``page_size``, by default :data:`LEASE_PAGE_SIZE`)
    until none is left or ``budget_seconds`` (by ``monotonic``) is spent, judge each page, and
    (``write``) move what the judge ruled, each with its event. A dry run (``write`` false)
    reads and judges the same and moves nothing. A database that goes away part-way is named
    in ``unreadable``, and what had committed is still logged as recorded. What the budget,
    a lost connection or a stop request (``stopping``, asked before each page) left is counted
    (``remaining``: the expired leases past the last page read) and noted."""
    page_size = page_size or LEASE_PAGE_SIZE
    grace = thresholds.lease_grace_seconds
    deadline = monotonic() + budget_seconds
    after: tuple[datetime, UUID] | None = None
    found = Found()
    try:
        while True:
            page = await store.expired_lease_page(now, grace, page_size, after, project_id)
            if len(page):
                after = page.last_key()
            rulings = judge_lease_page(page, thresholds, now)
            if not write or not rulings.rows:
                log.add(page, rulings, ())
            else:
                moved, said = await _move(store, page, rulings, now, dispatch, log)
                found += said
                if not moved:
                    left, said = await _left_after_loss(store, now, grace, project_id, after)
                    return LeaseReapOutcome(left, found + said)
            if len(page) < page_size:
                return LeaseReapOutcome(0, found)
            if monotonic() >= deadline or stopping():
                left = await store.count_expired_leases(now, grace, project_id, after)
                why = None if stopping() else budget_seconds
                return LeaseReapOutcome(left, found + _left(left, why))
    except SourceUnreadable as exc:
        return LeaseReapOutcome(0, found + Found.failed(exc))


def _left(left: int, budget_seconds: float | None) -> Found:
    """The note on the expired leases past the last page read, once the budget is spent
    (``budget_seconds``) or the pass was asked to stop (None)."""
    if not left:
        return Found()  # the last page was the last
    if budget_seconds is None:
        return Found.noted(
            f"{left} more expired lease(s) left unread when the pass was asked to stop: the "
            "next pass takes them (reaper reap, or the next turn of reaper serve)"
        )
    return Found.noted(
        f"{left} more expired lease(s) left when the lease reap's budget of {budget_seconds:g} s "
        "was spent: the next turn comes at once and takes them"
    )


async def _left_after_loss(
    store: JobQueue,
    now: datetime,
    grace: int,
    project_id: UUID | None,
    after: tuple[datetime, UUID] | None,
) -> tuple[int, Found]:
    """How many expired leases lie past the last page read, once the connection was lost in
    the middle of a page's moves: asked again on a new connection, or said to be unknown."""
    try:
        left = await store.count_expired_leases(now, grace, project_id, after)
    except SourceUnreadable as exc:
        return 0, Found.noted(
            "how many expired leases lie past the last page read is unknown (PostgreSQL could "
            f"not be asked again: {exc.reason}): the next pass reads and moves them"
        )
    if not left:
        return 0, Found()
    return left, Found.noted(
        f"{left} more expired lease(s) left unread after the connection to PostgreSQL was "
        "lost: the next pass takes them (reaper reap, or the next turn of reaper serve)"
    )


async def _move(
    store: JobQueue,
    page: LeaseColumns,
    rulings: LeaseRulings,
    now: datetime,
    dispatch: Dispatch,
    log: LeaseLog,
) -> tuple[bool, Found]:
    """Move a page as the judge ruled and log it; False when the database went away."""
    try:
        moves = await store.move_lease_page(page, rulings, now, dispatch=dispatch)
    except MovesInterrupted as exc:
        log.add(page, rulings, {*exc.moves.requeued, *exc.moves.parked})
        return False, Found.failed(exc) + _report(exc.moves, lost=exc.reason)
    log.add(page, rulings, {*moves.requeued, *moves.parked})
    return True, _report(moves)


#: Skipped jobs named one by one per page; the rest of a page's are counted in one note, so
#: that a pass beside another reaper keeps a few notes per page, not one per lease.
_SKIPS_NAMED: Final = 3


def _report(moves: LeaseMoves, *, lost: str | None = None) -> Found:
    """The notes and the writes not done of one page's moves; ``lost``: why the connection
    to PostgreSQL went away part-way, and then what was not moved was not moved for that
    (its batch rolled back, or never ran), never for a row that changed."""
    if lost is not None:
        return _report(replace(moves, skipped=())) + _not_moved(moves.skipped, lost)
    notes = [
        f"job {job_id} changed after it was read (finished, re-leased, or moved by "
        "another reaper): left alone"
        for job_id in moves.skipped[:_SKIPS_NAMED]
    ]
    if len(moves.skipped) > _SKIPS_NAMED:
        notes.append(
            f"and {len(moves.skipped) - _SKIPS_NAMED} more job(s) read with job "
            f"{moves.skipped[_SKIPS_NAMED - 1]}, each changed after it was read: left alone"
        )
    not_moved = [RowNotMoved(f"job {job}", reason) for job, reason in moves.failed]
    if moves.unknown:
        shown = ", ".join(str(job) for job in moves.unknown[:3])
        more = f" and {len(moves.unknown) - 3} more" if len(moves.unknown) > 3 else ""
        not_moved.append(
            RowNotMoved(
                f"{len(moves.unknown)} lease move(s) (job {shown}{more})",
                "the database went away while they were committing: each is either moved with "
                "its event or not moved at all, and the next pass finds out",
                unknown=True,
            )
        )
    return Found(notes=tuple(notes), not_moved=tuple(not_moved))


def _not_moved(jobs: Sequence[UUID], lost: str) -> Found:
    """The moves a lost connection left undone, as one write not done."""
    if not jobs:
        return Found()
    shown = ", ".join(str(job) for job in jobs[:_SKIPS_NAMED])
    more = f" and {len(jobs) - _SKIPS_NAMED} more" if len(jobs) > _SKIPS_NAMED else ""
    return Found(
        not_moved=(
            RowNotMoved(
                f"{len(jobs)} lease move(s) (job {shown}{more})",
                f"not moved: {cut_short_words(lost)}; each is still an expired lease, as it was "
                "read, and the next pass moves it",
            ),
        )
    )
