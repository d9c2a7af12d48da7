"""The pass's lease step: every expired lease ruled on and moved by PostgreSQL, in batches.

Each move goes with its event (SPEC §1 (a), (c); §8). The store does the work
(:meth:`~reaper.jobqueue.port.JobQueue.reap_leases`: the lease judge's rule in SQL, two lanes at
once, batches sized by their time) and hands back counts, never a lease, until none is left or
the time budget (``lease_reap_budget_seconds``) is spent; what is left then is counted and
reported, and the next turn comes at once. A dry run asks the same question read-only. The
moves are read back for the report (:class:`LeaseListing`) from the ledger, a page at a time:
a pass holds no lease however many it moves.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import Final

from reaper.core.domain import Action, Condition
from reaper.core.judge_leases import RULING_KINDS
from reaper.core.moments import utc
from reaper.errors import SourceUnreadable
from reaper.jobqueue.port import JobQueue, LeaseReap, LeaseReapInterrupted, LeaseReapRun
from reaper.reap.context import Pass
from reaper.reap.progress import Found, RecordedVerdict, RowNotMoved

__all__ = ["SAMPLED_MOVES", "LeaseListing", "LeaseReapOutcome", "reap_leases"]

#: The moves of each condition read back as the pass ends, for the short report (printed after
#: the pass's sources are closed): the report lists that many before it summarises.
SAMPLED_MOVES: Final = 10


class LeaseListing:
    """Every lease move of a pass (a dry run: every ruling), read back as it is iterated
    (``async for``), a page at a time: from the ledger by the runs of events the reap appended,
    or, in a dry run, by asking the same rulings again over the keys the reap covered.

    It reads through the pass's store, so it is valid only while the pass's sources are open:
    :func:`~reaper.reap.run.reap_once` hands the result to its ``report`` consumer before it
    closes them, and that consumer prints it. The short report, printed later, uses
    :attr:`sample`, read as the pass ends. :attr:`lost` says why the moves cannot be read back
    (PostgreSQL went away part-way); :meth:`command` lists them once it is back."""

    def __init__(
        self,
        reap: LeaseReap,
        run: LeaseReapRun | None = None,
        store: JobQueue | None = None,
        lost: str | None = None,
    ) -> None:
        self.reap = reap
        self.run = run
        self.recorded = run is not None and run.write
        self._store = store
        self.lost = lost
        #: The first :data:`SAMPLED_MOVES` of each condition, read as the pass ended.
        self.sample: tuple[RecordedVerdict, ...] = ()
        #: How many moves the last whole reading listed (None: not read to its end).
        self.listed: int | None = None

    @property
    def readable(self) -> bool:
        return self._store is not None and self.run is not None and self.lost is None

    async def __aiter__(self) -> AsyncGenerator[RecordedVerdict, None]:
        """Each move as its event recorded it (a dry run: each ruling); raises
        :class:`~reaper.errors.SourceUnreadable` when the store cannot be read."""
        if not self.reap.moved or self._store is None or self.run is None or self.lost:
            self.listed = 0 if not self.reap.moved else None
            return
        listed = 0
        async with contextlib.aclosing(self._store.lease_listing(self.run, self.reap)) as moves:
            async for verdict in moves:
                listed += 1
                yield RecordedVerdict(verdict, self.recorded)
        self.listed = listed

    async def read_sample(self) -> None:
        """Read :attr:`sample`: the first few moves of each condition (the listing is read
        until each condition has as many as it counted, or :data:`SAMPLED_MOVES`), the longest
        past its bound first within each, as a person reads them."""
        wanted = {c: min(SAMPLED_MOVES, n) for c, n in self.counts().items()}
        kept: list[RecordedVerdict] = []
        async with contextlib.aclosing(self.__aiter__()) as moves:
            async for r in moves:
                if wanted.get(r.verdict.condition, 0) > 0:
                    wanted[r.verdict.condition] -= 1
                    kept.append(r)
                if not any(wanted.values()):
                    break
        kept.sort(key=lambda r: (r.verdict.condition, -(r.verdict.measured or 0)))
        self.sample = tuple(kept)

    def tally(self) -> dict[tuple[Condition, Action], int]:
        """The moves per condition and action, as the reap counted them."""
        counted: dict[tuple[Condition, Action], int] = {}
        for (_, poison), n in self.reap.moves.items():
            kind = RULING_KINDS[poison]
            counted[kind] = counted.get(kind, 0) + n
        return counted

    def counts(self) -> dict[Condition, int]:
        """The moves per condition, as the reap counted them."""
        return {condition: n for (condition, _), n in self.tally().items()}

    def changed(self) -> str | None:
        """A dry run's listing read to its end that did not list what was counted: the host
        changed expired leases in between (said, never hidden)."""
        if self.recorded or self.listed is None or self.listed == self.reap.moved:
            return None
        return (
            f"the dry run counted {self.reap.moved} lease ruling(s) and listed {self.listed}: "
            "the host changed expired leases between the count and the listing"
        )

    def command(self) -> str:
        """The ``reaper events`` command that lists this pass's moves (with any recorded
        since)."""
        assert self.run is not None
        project = f" --project {self.run.project_id}" if self.run.project_id else ""
        since = utc(self.run.now, "milliseconds")
        return (
            f"reaper events --kind QueueReaped --source job_queue --since {since}{project} "
            f"--limit {self.reap.moved}"
        )

    def unread(self) -> str:
        """The one line that stands for the listing when it cannot be read back."""
        return (
            f"{self.reap.moved} lease move(s) committed, each with its QueueReaped event; they "
            f"could not be read back ({self.lost}): `{self.command()}` lists them once "
            "PostgreSQL is back"
        )


@dataclass(frozen=True)
class LeaseReapOutcome:
    #: Expired leases left by the budget, a stop request or a lost connection (0: the reap
    #: went to the end).
    remaining: int = 0
    found: Found = field(default_factory=Found)
    #: Every lease verdict of the step (a dry run: every ruling), counted, and read back as
    #: it is iterated.
    listing: LeaseListing = field(default_factory=lambda: LeaseListing(LeaseReap()))
    #: The expired leases the step read: those it ruled on and those it left (None: the job
    #: queue was not read).
    expired: int | None = None


async def reap_leases(p: Pass) -> LeaseReapOutcome:
    """The lease step, when the job queue was read: every expired lease ruled on and (unless
    an audit) moved, until none is left, the pass's lease budget (by its ``monotonic``) is
    spent or the pass is asked to stop (asked after each batch). A database that goes away
    part-way is named in ``unreadable``, and what had committed is still counted as recorded.
    What the budget, a stop request or a lost connection left is counted (``remaining``) and
    noted. The first few moves of each condition are read back for the short report."""
    if p.store is None:
        return LeaseReapOutcome()
    config = p.config
    run = LeaseReapRun(
        p.now,
        config.thresholds.lease_grace_seconds,
        config.project_id,
        p.dispatch,
        p.ledger is not None,
        p.monotonic() + config.lease_reap_budget_seconds,
        p.monotonic,
        p.stop,
    )
    outcome = await _reaped(p.store, run, config.lease_reap_budget_seconds)
    listing = outcome.listing
    if listing.readable and listing.reap.moved:
        try:
            await listing.read_sample()
        except SourceUnreadable as exc:
            listing.lost = exc.reason  # the report says so, and how to list them
    return replace(outcome, expired=listing.reap.moved + outcome.remaining)


async def _reaped(store: JobQueue, run: LeaseReapRun, budget: float) -> LeaseReapOutcome:
    try:
        reap = await store.reap_leases(run)
    except LeaseReapInterrupted as exc:
        listing = LeaseListing(exc.reap, run, store, lost=exc.reason)
        left, said = await _left_after_loss(store, run)
        return LeaseReapOutcome(left, Found.failed(exc) + _report(exc.reap) + said, listing)
    except SourceUnreadable as exc:
        return LeaseReapOutcome(0, Found.failed(exc))
    listing = LeaseListing(reap, run, store)
    found = _report(reap)
    if not reap.stopped:
        return LeaseReapOutcome(0, found, listing)
    try:
        left = await store.count_expired_leases(run.now, run.grace_seconds, run.project_id)
    except SourceUnreadable as exc:
        return LeaseReapOutcome(0, found + Found.failed(exc), listing)
    # what the next turn takes: not the rows named, nor (a dry run) those already ruled on
    left = max(0, left - (len(reap.failed) if run.write else reap.moved))
    said = _left(left, None if run.stopping() else budget)
    return LeaseReapOutcome(left, found + said, listing)


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


async def _left_after_loss(store: JobQueue, run: LeaseReapRun) -> tuple[int, Found]:
    """How many expired leases are still there once the connection was lost part-way (the
    batch in flight rolled back, or its commit got no answer): asked again on a new
    connection, or said to be unknown."""
    try:
        left = await store.count_expired_leases(run.now, run.grace_seconds, run.project_id)
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
