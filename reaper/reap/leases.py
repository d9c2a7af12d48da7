"""The pass's lease step: expired leases read, judged and moved a page at a time, each move
with its event (SPEC §1 (a), (c); §8).

A page is read from where the last one ended (its expiry and job id), judged by the pure lease
judge in columns, and moved as one set-based step, and only then is the next page read. The
moves keep both of a small machine's cores busy on their own (two lanes, see
:mod:`reaper.jobqueue.leases`); measured, reading or judging the next page beside them slowed
the moves by more than it saved (``bench/lease_reap.py``). Every ruling goes to the pass's
:class:`~reaper.reap.lease_log.LeaseLog`, so the whole pass holds one page of leases at a time,
whatever their number.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core.domain import Dispatch, Thresholds
from reaper.core.judge_leases import LeaseColumns, LeaseRulings, judge_lease_page
from reaper.jobqueue.port import JobQueue, LeaseMoves, MovesInterrupted
from reaper.reap.lease_log import LeaseLog
from reaper.reap.progress import Progress, RowNotMoved, Unreadable

__all__ = ["LEASE_PAGE_SIZE", "reap_leases"]

#: Leases read, judged and moved at once. A few thousand: enough that a page is a handful of
#: set-based statements, few enough that a pass holds little whatever its number of leases.
LEASE_PAGE_SIZE: Final = 5000


async def reap_leases(
    store: JobQueue,
    thresholds: Thresholds,
    now: datetime,
    *,
    limit: int,
    project_id: UUID | None,
    dispatch: Dispatch,
    write: bool,
    log: LeaseLog,
    progress: Progress,
    page_size: int | None = None,
) -> None:
    """Read at most ``limit`` expired leases in pages (of ``page_size``, by default
    :data:`LEASE_PAGE_SIZE`), judge each page, and (``write``) move
    what the judge ruled, each with its event. A dry run (``write`` false) reads and judges
    the same and moves nothing. A database that goes away part-way is named in
    ``unreadable``, and what had committed is still logged as recorded."""
    page_size = page_size or LEASE_PAGE_SIZE
    grace = thresholds.lease_grace_seconds
    after: tuple[datetime, UUID] | None = None
    taken = 0
    while taken < limit:
        size = min(page_size, limit - taken)
        page = await progress.guarded(store.expired_lease_page(now, grace, size, after, project_id))
        if page is None:
            return  # named in unreadable
        taken += len(page)
        after = page.last_key()
        rulings = judge_lease_page(page, thresholds, now)
        if not write or not rulings.rows:
            log.add(page, rulings, ())
        elif not await _move(store, page, rulings, now, dispatch, log, progress):
            return
        if len(page) < size:
            return


async def _move(
    store: JobQueue,
    page: LeaseColumns,
    rulings: LeaseRulings,
    now: datetime,
    dispatch: Dispatch,
    log: LeaseLog,
    progress: Progress,
) -> bool:
    """Move a page as the judge ruled and log it; False when the database went away."""
    try:
        moves = await store.move_lease_page(page, rulings, now, dispatch=dispatch)
    except MovesInterrupted as exc:
        progress.unreadable.append(Unreadable(exc.source, exc.reason))
        _report(exc.moves, progress)
        log.add(page, rulings, {*exc.moves.requeued, *exc.moves.parked})
        return False
    _report(moves, progress)
    log.add(page, rulings, {*moves.requeued, *moves.parked})
    return True


def _report(moves: LeaseMoves, progress: Progress) -> None:
    for job_id in moves.skipped:
        progress.notes.append(
            f"job {job_id} changed after it was read (finished, re-leased, or moved by "
            "another reaper): left alone"
        )
    progress.not_moved.extend(RowNotMoved(f"job {job}", reason) for job, reason in moves.failed)
    if moves.unknown:
        shown = ", ".join(str(job) for job in moves.unknown[:3])
        more = f" and {len(moves.unknown) - 3} more" if len(moves.unknown) > 3 else ""
        progress.not_moved.append(
            RowNotMoved(
                f"{len(moves.unknown)} lease move(s) (job {shown}{more})",
                "the database went away while they were committing: each is either moved with "
                "its event or not moved at all, and the next pass finds out",
                unknown=True,
            )
        )
