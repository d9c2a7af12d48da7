"""The in-memory double's lease reap.

The in-memory double's lease reap (:class:`LeaseReaps`, a part of
:class:`~reaper.testing.memory.MemoryJobQueue`): the pure lease judge's rulings, a batch at a
time, each move with its event and a park's gate, handed to ``keep`` as the store hands its
batches (the store's SQL is held to the same rulings and events by
``tests/integration/test_lease_reap_sql.py``; the two stores to the same moves by
``tests/contract/``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from uuid import UUID

from reaper.core.canonical import canonical_json
from reaper.core.domain import (
    GATE_DELIVERY_EXHAUSTED,
    Action,
    Dispatch,
    HeldLease,
    Thresholds,
    Verdict,
)
from reaper.core.judge_leases import judge_lease_page
from reaper.jobqueue.port import KeepMoves, LeaseReap, LeaseReapInterrupted
from reaper.jobqueue.rules import DELIVERY_EXHAUSTED_CHOICES, park_identity, park_prompt
from reaper.testing.memory_records import JobRow, Records

__all__ = ["LeaseReaps"]

#: The most leases one batch of the double moves.
BATCH = 1000


class LeaseReaps(Records):
    """The lease reap of the in-memory job queue."""

    #: After this many moves of one reap the database "goes away" (None: never): the rest of
    #: that batch is neither known moved nor known not, as when a COMMIT gets no answer.
    lost_after: int | None = None

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
        stopping: Callable[[], bool] = lambda: False,
    ) -> LeaseReap:
        reap = LeaseReap()
        thresholds = Thresholds(lease_grace_seconds=grace_seconds)
        after: tuple[datetime, str] | None = None
        while True:
            batch = self._expired_batch(now, grace_seconds, project_id, after)
            if not batch:
                return reap
            after = (batch[-1].lease_expires_at, str(batch[-1].job_id))
            verdicts = judge_lease_page(batch, thresholds, now)
            if write:
                moved = self._move(verdicts, now, dispatch, reap)
                self._tally(reap, keep, moved, True)
                if len(moved) + len(reap.failed) < len(verdicts) and reap.unknown:
                    raise LeaseReapInterrupted("PostgreSQL went away", reap)
            else:
                self._tally(reap, keep, verdicts, False)
            if monotonic() >= deadline or stopping():
                reap.stopped = True
                return reap

    def _move(
        self, verdicts: list[Verdict], now: datetime, dispatch: Dispatch, reap: LeaseReap
    ) -> list[Verdict]:
        """Move each ruled lease, each with its event; the verdicts of the moves made. Past
        :attr:`lost_after` moves, the rest are ``unknown``."""
        moved: list[Verdict] = []
        for n, v in enumerate(verdicts):
            lease = v.lease
            assert lease is not None  # the lease judge's verdicts carry their lease
            if self.lost_after is not None and reap.moved + len(moved) >= self.lost_after:
                reap.unknown += len(verdicts) - n
                return moved
            refused = self.refused_moves.get(lease.job_id)
            if refused is not None:
                reap.failed.append((lease.job_id, refused))
                continue
            self._move_one(self.jobs[lease.job_id], lease, v, now, dispatch)
            moved.append(v)
        return moved

    def _move_one(
        self, job: JobRow, lease: HeldLease, v: Verdict, now: datetime, dispatch: Dispatch
    ) -> None:
        job.lease_owner = job.lease_expires_at = None
        job.updated_at = now
        if v.action is Action.PARK:
            job.state, job.attempts = "awaiting_human", max(job.attempts - 1, 0)
            self._raise_gate(
                job,
                GATE_DELIVERY_EXHAUSTED,
                park_prompt(lease),
                DELIVERY_EXHAUSTED_CHOICES,
                park_identity(lease),
                now,
            )
        else:
            job.state, job.run_after = "ready", now
            if dispatch is Dispatch.OUTBOX:
                self._dispatch(job, now)
        self._append(lease.project_id, v.payload(), True, now)

    @staticmethod
    def _tally(reap: LeaseReap, keep: KeepMoves, verdicts: list[Verdict], recorded: bool) -> None:
        """Count a batch's moves (a dry run's rulings) and hand them to ``keep``."""
        for v in verdicts:
            expiry = v.lease.lease_expires_at if v.lease else None
            project = v.lease.project_id if v.lease else None
            if project is not None:
                reap.add([(project, v.action is Action.PARK, 1)], expiry, expiry)
        if verdicts:
            keep(
                "\x1e".join(f"{v.project_id}{canonical_json(v.payload())}" for v in verdicts),
                recorded,
            )

    def _expired_batch(
        self,
        now: datetime,
        grace_seconds: int,
        project_id: UUID | None,
        after: tuple[datetime, str] | None,
    ) -> list[HeldLease]:
        found = sorted(self._expired(now, grace_seconds, project_id), key=lambda x: x[:2])
        return [
            HeldLease(j.id, j.project_id, j.kind, j.lease_owner, e, j.attempts, j.max_attempts)
            for e, job_id, j in found
            if after is None or (e, job_id) > after
        ][:BATCH]

    async def count_expired_leases(
        self, now: datetime, grace_seconds: int, project_id: UUID | None = None
    ) -> int:
        return sum(1 for _ in self._expired(now, grace_seconds, project_id))

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
