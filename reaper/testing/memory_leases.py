"""The in-memory double's lease reap (:class:`LeaseReaps`, a part of
:class:`~reaper.testing.memory.MemoryJobQueue`): the pure lease judge's rulings, a page at a
time, each move guarded and recorded as the store's statements do (the two are held to the same
rulings and events by ``tests/integration/test_lease_reap_sql.py`` and ``tests/contract/``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from uuid import UUID

from reaper.core.canonical import canonical_json
from reaper.core.domain import (
    FLEET_PROJECT_ID,
    GATE_DELIVERY_EXHAUSTED,
    Action,
    Dispatch,
    Thresholds,
    Verdict,
)
from reaper.core.judge_leases import LeaseColumns, LeaseRulings, judge_lease_page
from reaper.jobqueue.port import (
    KeepMoves,
    LeaseMoves,
    LeaseReap,
    LeaseReapInterrupted,
    MovesInterrupted,
)
from reaper.jobqueue.rules import (
    DELIVERY_EXHAUSTED_CHOICES,
    check_lease_page,
    park_identity,
    park_prompt,
)
from reaper.testing.memory_records import JobRow, Records

__all__ = ["LeaseReaps"]


def _keep(
    reap: LeaseReap, keep: KeepMoves, verdicts: list[Verdict], moves: LeaseMoves | None
) -> None:
    """Hand a page's moves (``moves`` None: a dry run's rulings) to ``keep``, as a store does."""
    if moves is not None:
        done = {*moves.requeued, *moves.parked}
        verdicts = [v for v in verdicts if v.lease and v.lease.job_id in done]
    for v in verdicts:
        expiry = v.lease.lease_expires_at if v.lease else None
        reap.add([(v.project_id or FLEET_PROJECT_ID, v.action is Action.PARK, 1)], expiry, expiry)
    if verdicts:
        kept = (f"{v.project_id}{canonical_json(v.payload())}" for v in verdicts)
        keep("\x1e".join(kept), moves is not None)


class LeaseReaps(Records):
    """The lease reap of the in-memory job queue."""

    # ----------------------------------------------------------------------- leases

    async def expired_lease_page(
        self,
        now: datetime,
        grace_seconds: int,
        size: int,
        after: tuple[datetime, UUID] | None = None,
        project_id: UUID | None = None,
    ) -> LeaseColumns:
        found = sorted(self._expired(now, grace_seconds, project_id), key=lambda x: x[:2])
        rows = [
            (j.id, j.project_id, j.kind, j.lease_owner, expiry, j.attempts, j.max_attempts)
            for expiry, _, j in found
            if after is None or (expiry, str(j.id)) > (after[0], str(after[1]))
        ]
        return LeaseColumns.of_rows(rows[:size])

    async def move_lease_page(
        self,
        page: LeaseColumns,
        rulings: LeaseRulings,
        now: datetime,
        *,
        dispatch: Dispatch = Dispatch.POLLING,
    ) -> LeaseMoves:
        check_lease_page(page, rulings)
        self._open()
        requeued: list[UUID] = []
        parked: list[UUID] = []
        skipped: list[UUID] = []
        failed: list[tuple[UUID, str]] = []
        for k, i in enumerate(rulings.rows):
            lease = page.lease(i)
            job = self.jobs.get(lease.job_id)
            if job is None or not job.still_as_read(lease, now):
                skipped.append(lease.job_id)
                continue
            refused = self.refused_moves.get(lease.job_id)
            if refused is not None:
                failed.append((lease.job_id, refused))
                continue
            job.lease_owner = job.lease_expires_at = None
            job.updated_at = now
            if rulings.poison[k]:
                job.state, job.attempts = "awaiting_human", max(job.attempts - 1, 0)
                self._raise_gate(
                    job,
                    GATE_DELIVERY_EXHAUSTED,
                    park_prompt(lease),
                    DELIVERY_EXHAUSTED_CHOICES,
                    park_identity(lease),
                    now,
                )
                parked.append(lease.job_id)
            else:
                job.state, job.run_after = "ready", now
                if dispatch is Dispatch.OUTBOX:
                    self._dispatch(job, now)
                requeued.append(lease.job_id)
            self._append(lease.project_id, rulings.verdict(page, k).payload(), True, now)
        return LeaseMoves(tuple(requeued), tuple(parked), tuple(skipped), tuple(failed))

    async def reap_leases(
        self,
        now: datetime,
        grace_seconds: int,
        *,
        project_id: UUID | None,
        dispatch: Dispatch,
        write: bool,
        deadline: float,
        keep: KeepMoves,
        monotonic: Callable[[], float],
    ) -> LeaseReap:
        """The lease judge's rulings, a page at a time, moved as :meth:`move_lease_page`
        moves them (the store's statements are held to the same rulings and events by
        ``tests/integration/test_lease_reap_sql.py``)."""
        reap = LeaseReap()
        thresholds = Thresholds(lease_grace_seconds=grace_seconds)
        after: tuple[datetime, UUID] | None = None
        while True:
            page = await self.expired_lease_page(now, grace_seconds, 1000, after, project_id)
            if not len(page):
                return reap
            after = page.last_key()
            rulings = judge_lease_page(page, thresholds, now)
            verdicts = list(rulings.verdicts(page))
            if write:
                try:
                    moves = await self.move_lease_page(page, rulings, now, dispatch=dispatch)
                except MovesInterrupted as exc:
                    reap.unknown += len(exc.moves.unknown)
                    _keep(reap, keep, verdicts, exc.moves)
                    raise LeaseReapInterrupted(exc.reason, reap) from None
                reap.failed += moves.failed
                _keep(reap, keep, verdicts, moves)
            else:
                _keep(reap, keep, verdicts, None)
            if monotonic() >= deadline:
                reap.stopped = True
                return reap

    async def count_expired_leases(
        self,
        now: datetime,
        grace_seconds: int,
        project_id: UUID | None = None,
        after: tuple[datetime, UUID] | None = None,
    ) -> int:
        return sum(
            1
            for expiry, job_id, _ in self._expired(now, grace_seconds, project_id)
            if after is None or (expiry, job_id) > (after[0], str(after[1]))
        )

    def _expired(
        self, now: datetime, grace_seconds: int, project_id: UUID | None
    ) -> Iterable[tuple[datetime, str, JobRow]]:
        """``(expiry, id, job)`` of every lease expired beyond the grace."""
        cutoff = now - timedelta(seconds=grace_seconds)
        self._open()
        for j in self.jobs.values():
            expiry = j.lease_expires_at
            if j.state != "leased" or expiry is None or not expiry < cutoff:
                continue
            if project_id is None or j.project_id == project_id:
                yield expiry, str(j.id), j
