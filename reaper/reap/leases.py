"""The pass's lease step: requeue and park, each move with its event (SPEC §1 (a), (c))."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from reaper.core.domain import Dispatch, Verdict
from reaper.jobqueue.port import JobQueue, LeaseMoves, MovesInterrupted
from reaper.reap.progress import Progress, RecordedVerdict, RowNotMoved, Unreadable

__all__ = ["act_on_leases"]


async def act_on_leases(
    store: JobQueue | None,
    verdicts: Sequence[Verdict],
    now: datetime,
    dispatch: Dispatch,
    progress: Progress,
) -> None:
    """Move every lease verdict's job; ``store`` None (a dry run, or no ledger) only reports.
    A database that goes away part-way is named, and what had committed is still reported as
    recorded. With outbox dispatch each requeue starts a new dispatch episode."""
    if store is None or not verdicts:
        progress.record(list(verdicts), False)
        return
    try:
        moves = await store.apply_lease_verdicts(verdicts, now, dispatch=dispatch)
    except MovesInterrupted as exc:
        progress.unreadable.append(Unreadable(exc.source, exc.reason))
        moves = exc.moves
    _report(moves, verdicts, progress)


def _report(moves: LeaseMoves, verdicts: Sequence[Verdict], progress: Progress) -> None:
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
    moved = {*moves.requeued, *moves.parked}
    progress.verdicts.extend(
        RecordedVerdict(v, v.lease is not None and v.lease.job_id in moved) for v in verdicts
    )
