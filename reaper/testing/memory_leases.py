"""The in-memory double's lease reap.

The in-memory double's lease reap (:class:`LeaseReaps`, a part of
:class:`~reaper.testing.memory.MemoryJobQueue`): the pure lease judge's rulings, a batch at a
time, each move with its event and a park's gate, counted and its events' numbers kept as the
store keeps them, and read back from its ledger by them (the store's SQL is held to the same
rulings and events by ``tests/integration/test_lease_reap_sql.py``; the two stores to the same
moves by ``tests/contract/``)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable
from datetime import datetime, timedelta
from uuid import UUID

from reaper.core.domain import (
    GATE_DELIVERY_EXHAUSTED,
    Action,
    Dispatch,
    HeldLease,
    Thresholds,
    Verdict,
)
from reaper.core.judge_leases import judge_lease_page
from reaper.core.sightings import verdict_from_record
from reaper.jobqueue.port import LeaseKey, LeaseReap, LeaseReapInterrupted, LeaseReapRun
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

    async def reap_leases(self, run: LeaseReapRun) -> LeaseReap:
        reap = LeaseReap()
        thresholds = Thresholds(lease_grace_seconds=run.grace_seconds)
        after: LeaseKey | None = None
        while True:
            batch = self._expired_batch(run, after, BATCH)
            if not batch:
                return reap
            after = (batch[-1].lease_expires_at, batch[-1].job_id)
            verdicts = judge_lease_page(batch, thresholds, run.now)
            if run.write:
                moved = self._move(verdicts, run, reap)
                _tally(reap, moved)
                if len(moved) + len(reap.failed) < len(verdicts) and reap.unknown:
                    raise LeaseReapInterrupted("PostgreSQL went away", reap)
            else:
                _tally(reap, verdicts)
                reap.lanes[(0, 1)] = after
            if run.monotonic() >= run.deadline or run.stopping():
                reap.stopped = True
                return reap

    async def lease_listing(
        self, run: LeaseReapRun, reap: LeaseReap
    ) -> AsyncGenerator[Verdict, None]:
        self._open()
        if not run.write:
            thresholds = Thresholds(lease_grace_seconds=run.grace_seconds)
            last = reap.lanes.get((0, 1))
            held = [h for h in self._expired_batch(run, None) if last and _key(h) <= last]
            for verdict in judge_lease_page(held, thresholds, run.now):
                yield verdict
            return
        for stream, runs in reap.runs.items():
            for first, last_seq in runs:
                for event in self.ledger[stream][first - 1 : last_seq]:
                    yield verdict_from_record(stream, event.payload, event.trusted)

    def _move(self, verdicts: list[Verdict], run: LeaseReapRun, reap: LeaseReap) -> list[Verdict]:
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
            self._move_one(self.jobs[lease.job_id], lease, v, run.now, run.dispatch)
            seq = len(self.ledger[lease.project_id])
            reap.appended(lease.project_id, seq, seq)
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

    def _expired_batch(
        self, run: LeaseReapRun, after: LeaseKey | None, size: int | None = None
    ) -> list[HeldLease]:
        found = sorted(self._expired(run.now, run.grace_seconds, run.project_id), key=_key)
        return [h for h in found if after is None or _key(h) > after][:size]

    async def count_expired_leases(
        self, now: datetime, grace_seconds: int, project_id: UUID | None = None
    ) -> int:
        return sum(1 for _ in self._expired(now, grace_seconds, project_id))

    def _expired(
        self, now: datetime, grace_seconds: int, project_id: UUID | None
    ) -> Iterable[HeldLease]:
        """Every lease expired beyond the grace."""
        cutoff = now - timedelta(seconds=grace_seconds)
        self._open()
        for j in self.jobs.values():
            expiry = j.lease_expires_at
            if j.state != "leased" or expiry is None or not expiry < cutoff:
                continue
            if project_id is None or j.project_id == project_id:
                yield HeldLease(
                    j.id, j.project_id, j.kind, j.lease_owner, expiry, j.attempts, j.max_attempts
                )


def _key(lease: HeldLease) -> LeaseKey:
    """A lease's key, as the store orders them: by its expiry, then its job (as PostgreSQL
    orders uuids: by their bytes, as Python's ``UUID`` does)."""
    return (lease.lease_expires_at, lease.job_id)


def _tally(reap: LeaseReap, verdicts: list[Verdict]) -> None:
    """Count a batch's moves (a dry run's rulings)."""
    for v in verdicts:
        if v.lease is not None:
            expiry = v.lease.lease_expires_at
            reap.add([(v.lease.project_id, v.action is Action.PARK, 1, expiry, expiry)])
