"""The pass's lease step: every expired lease ruled on and moved by PostgreSQL, in batches.

Each move goes with its event (SPEC §1 (a), (c); §8). The store does the work
(:meth:`~reaper.jobqueue.port.JobQueue.reap_leases`: the lease judge's rule in SQL, two lanes at
once, batches sized by their time); the pass sends the bounds and the thresholds, and keeps what
each batch hands back in the pass's :class:`~reaper.reap.lease_log.LeaseLog` (one text a batch,
spooled), so a pass holds no lease however many it moves. The batches go on until none is left
or the time budget (``lease_reap_budget_seconds``) is spent; what is left then is counted and
reported, and the next turn comes at once. A dry run asks the same question read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from uuid import UUID

from reaper.errors import SourceUnreadable
from reaper.jobqueue.port import JobQueue, LeaseReap, LeaseReapInterrupted
from reaper.reap.context import Pass
from reaper.reap.lease_log import LeaseLog
from reaper.reap.progress import Found, RowNotMoved

__all__ = ["LeaseReapOutcome", "reap_leases"]


@dataclass(frozen=True)
class LeaseReapOutcome:
    #: Expired leases left by the budget, a stop request or a lost connection (0: the reap
    #: went to the end).
    remaining: int = 0
    found: Found = field(default_factory=Found)
    #: Every lease verdict of the step (a dry run: every ruling), kept a batch at a time.
    log: LeaseLog = field(default_factory=LeaseLog)
    #: The expired leases the step read: those it ruled on and those it left (None: the job
    #: queue was not read).
    expired: int | None = None


async def reap_leases(p: Pass) -> LeaseReapOutcome:
    """The lease step, when the job queue was read: every expired lease ruled on and (unless
    an audit) moved, until none is left, the pass's lease budget (by its ``monotonic``) is
    spent or the pass is asked to stop (asked after each batch). A database that goes away
    part-way is named in ``unreadable``, and what had committed is still logged as recorded.
    What the budget, a stop request or a lost connection left is counted (``remaining``) and
    noted."""
    if p.store is None:
        return LeaseReapOutcome()
    log = LeaseLog()
    outcome = await _reaped(p, p.store, log)
    return replace(outcome, log=log, expired=len(log) + outcome.remaining)


async def _reaped(p: Pass, store: JobQueue, log: LeaseLog) -> LeaseReapOutcome:
    config, now, stopping, write = p.config, p.now, p.stop, p.ledger is not None
    grace, project_id = config.thresholds.lease_grace_seconds, config.project_id
    budget = config.lease_reap_budget_seconds
    try:
        reap = await store.reap_leases(
            now,
            grace,
            project_id=project_id,
            deadline=p.monotonic() + budget,
            dispatch=p.dispatch,
            write=write,
            keep=log.keep,
            monotonic=p.monotonic,
            stopping=stopping,
        )
    except LeaseReapInterrupted as exc:
        log.count(exc.reap, True)
        left, said = await _left_after_loss(store, now, grace, project_id)
        return LeaseReapOutcome(left, Found.failed(exc) + _report(exc.reap) + said)
    except SourceUnreadable as exc:
        return LeaseReapOutcome(0, Found.failed(exc))
    log.count(reap, write)
    found = _report(reap)
    if not reap.stopped:
        return LeaseReapOutcome(0, found)
    try:
        left = await store.count_expired_leases(now, grace, project_id)
    except SourceUnreadable as exc:
        return LeaseReapOutcome(0, found + Found.failed(exc))
    # what the next turn takes: not the rows named, nor (a dry run) those already ruled on
    left = max(0, left - (len(reap.failed) if write else reap.moved))
    return LeaseReapOutcome(left, found + _left(left, None if stopping() else budget))


def _left(left: int, budget_seconds: float | None) -> Found:
    """The note on the expired leases left once the budget is spent (``budget_seconds``) or
    the pass was asked to stop (None)."""
    if not left:
        return Found()  # the last batch was the last
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
    store: JobQueue, now: datetime, grace: int, project_id: UUID | None
) -> tuple[int, Found]:
    """How many expired leases are still there once the connection was lost part-way (the
    batch in flight rolled back, or its commit got no answer): asked again on a new
    connection, or said to be unknown."""
    try:
        left = await store.count_expired_leases(now, grace, project_id)
    except SourceUnreadable as exc:
        return 0, Found.noted(
            "how many expired leases are left is unknown (PostgreSQL could not be asked again: "
            f"{exc.reason}): the next pass reads and moves them"
        )
    if not left:
        return 0, Found()
    return left, Found.noted(
        f"{left} expired lease(s) not moved after the connection to PostgreSQL was lost: the "
        "next pass takes them (reaper reap, or the next turn of reaper serve)"
    )


def _report(reap: LeaseReap) -> Found:
    """The writes not done of a lease reap: the rows named, and the moves whose commit got
    no answer."""
    not_moved = [RowNotMoved(f"job {job}", reason) for job, reason in reap.failed]
    if reap.unknown:
        not_moved.append(
            RowNotMoved(
                f"{reap.unknown} lease move(s)",
                "the database went away while they were committing: each is either moved with "
                "its event or not moved at all, and the next pass finds out",
                unknown=True,
            )
        )
    return Found(not_moved=tuple(not_moved))
