"""The in-memory double's tables, and the writes and reads its methods share.

Arranging jobs, raising a gate, appending to the ledger and reading it, starting a dispatch
episode. Gates are answered in :mod:`reaper.testing.memory_gates`, the lease reap runs in
:mod:`reaper.testing.memory_leases`, and the job queue port's other methods are in
:mod:`reaper.testing.memory`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from uuid import UUID, uuid4

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.dead_letters import DISPATCH_SCHEMA, QuietMark
from reaper.core.domain import EVENT_KIND, HeldLease
from reaper.core.observation import Observation
from reaper.core.records import Gate, LedgerEvent
from reaper.core.storable import payload_for_storage
from reaper.errors import StoreUnavailable
from reaper.jobqueue.port import (
    EventFilter,
    ParkedDeadLetter,
)

__all__ = ["JobRow", "OutboxRow", "Records"]


@dataclass(kw_only=True)
class JobRow:
    """The columns of a ``job`` row the reaper reads and writes (SPEC §3)."""

    project_id: UUID
    run_after: datetime
    kind: str = "build"
    state: str = "ready"
    phase: str | None = None
    attempts: int = 0
    max_attempts: int = 7
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    finished_at: datetime | None = None
    idempotency_key: str | None = None
    updated_at: datetime | None = None
    #: The dispatch generation (outbox dispatch): 0, never dispatched.
    dispatch_seq: int = 0
    id: UUID = field(default_factory=uuid4)

    def still_as_read(self, lease: HeldLease, now: datetime) -> bool:
        """The guard every lease move re-checks: still leased, in the same project, by the
        same owner, with the same expiry and attempts, and still expired."""
        return (
            self.state == "leased"
            and self.project_id == lease.project_id
            and self.lease_owner == lease.lease_owner
            and self.lease_expires_at == lease.lease_expires_at
            and self.attempts == lease.attempts
            and self.lease_expires_at is not None
            and self.lease_expires_at < now
        )


@dataclass(kw_only=True)
class OutboxRow:
    """A ``job_outbox`` row (SPEC §3): one dispatch episode, for the host's relay to publish."""

    key: str
    job_id: UUID
    project_id: UUID
    payload: dict[str, object]
    not_before: datetime
    created_at: datetime
    sent_at: datetime | None = None


class Records:
    """The tables of the in-memory job queue (``jobs``, ``gates``, ``ledger``... as the
    PostgreSQL contract names them) and the writes every method shares."""

    def __init__(
        self,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        outbox: bool = False,
    ) -> None:
        #: The database's clock, as the double keeps it (tests pin it).
        self.clock = clock
        self.jobs: dict[UUID, JobRow] = {}
        self.dependencies: set[tuple[UUID, UUID]] = set()
        self.gates: dict[UUID, Gate] = {}
        #: Handled dead letters by identity, and what became of each: parked, pointer_parked,
        #: stale_pointer (the dead_letter table).
        self.letters: dict[str, ParkedDeadLetter] = {}
        self.dispositions: dict[str, str] = {}
        self.ledger: dict[UUID, list[LedgerEvent]] = {}
        #: ``job_outbox``, or None when the host's schema has none (polling dispatch).
        self.outbox: list[OutboxRow] | None = [] if outbox else None
        #: ``reaper_observation``: what is watched across passes, per vhost.
        self.observed: dict[str, list[Observation]] = {}
        #: ``reaper_quiet_mark``: each owned dead-letter queue's quiet mark, by (vhost, queue).
        self.quiet_marks: dict[tuple[str, str], QuietMark] = {}
        #: ``reaper_turn``: each turn's ``taken_at`` and ``taken_by``.
        self.turns: dict[str, tuple[datetime, str]] = {}
        #: Jobs whose lease move fails, with the reason it gives: what a trigger raising for
        #: that one row does on the real store (the move is named in ``failed``, the rest move).
        self.refused_moves: dict[UUID, str] = {}
        self.closed = False

    def add_job(self, row: JobRow) -> UUID:
        """Insert a job; its id."""
        self.jobs[row.id] = row
        return row.id

    def add_dependency(self, job_id: UUID, depends_on: UUID) -> None:
        self.dependencies.add((job_id, depends_on))

    def _dispatch(self, job: JobRow, now: datetime) -> None:
        """A new dispatch episode: the generation bumped, one outbox row (``dispatch_jobs``)."""
        if self.outbox is None:
            raise StoreUnavailable("outbox dispatch, but the in-memory schema has no job_outbox")
        job.dispatch_seq += 1
        key = f"dispatch:{job.id}:{job.dispatch_seq}"
        if any(row.key == key for row in self.outbox):
            return
        payload: dict[str, object] = {
            "schema": DISPATCH_SCHEMA,
            "job_id": str(job.id),
            "project_id": str(job.project_id),
            "dispatch_seq": job.dispatch_seq,
            "kind": job.kind,
            "not_before": job.run_after.isoformat(),
        }
        self.outbox.append(
            OutboxRow(
                key=key,
                job_id=job.id,
                project_id=job.project_id,
                payload=payload,
                not_before=job.run_after,
                created_at=now,
            )
        )

    def _raise_gate(
        self,
        job: JobRow,
        kind: str,
        prompt: str,
        choices: Sequence[str],
        identity: str,
        now: datetime,
    ) -> None:
        if any(g.identity == identity for g in self.gates.values()):
            return  # one gate per episode
        gate = Gate(
            uuid4(), job.project_id, job.id, kind, prompt, tuple(choices), None, None, identity, now
        )
        self.gates[gate.id] = gate

    # ----------------------------------------------------------------------- ledger

    async def events(self, project_id: UUID) -> list[LedgerEvent]:
        self._open()
        return list(self.ledger.get(project_id, ()))

    async def read_events(self, chosen: EventFilter) -> list[LedgerEvent]:
        found = self._selected(chosen)
        return found[-chosen.limit :] if chosen.limit > 0 else []

    async def count_events(self, chosen: EventFilter) -> int:
        return len(self._selected(chosen))

    async def streams_between(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        self._open()
        return sorted(p for p in self.ledger if low <= p <= high)[:limit]

    async def jobs_between(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        self._open()
        return sorted(j for j in self.jobs if low <= j <= high)[:limit]

    def _selected(self, chosen: EventFilter) -> list[LedgerEvent]:
        self._open()
        wanted = {
            "condition": chosen.condition,
            "object": chosen.object,
            "action": chosen.action,
            "source": chosen.source,
        }
        found = [
            e
            for events in self.ledger.values()
            for e in events
            if (chosen.since is None or e.created_at >= chosen.since)
            and (chosen.project_id is None or e.project_id == chosen.project_id)
            and (chosen.kind is None or e.kind == chosen.kind)
            and all(v is None or e.payload.get(k) == v for k, v in wanted.items())
        ]
        found.sort(key=lambda e: (e.created_at, str(e.project_id), e.seq))
        return found

    def _append(
        self,
        stream: UUID,
        payload: dict[str, object],
        trusted: bool,
        now: datetime,
        kind: str = EVENT_KIND,
    ) -> None:
        events = self.ledger.setdefault(stream, [])
        canonical = canonical_json(payload_for_storage(payload))  # as the store escapes it
        digest = digest_of(canonical)
        stored = json.loads(canonical)  # as read back from the ledger
        events.append(LedgerEvent(stream, len(events) + 1, kind, stored, digest, trusted, now))

    async def close(self) -> None:
        self.closed = True

    def _open(self) -> None:
        if self.closed:
            raise StoreUnavailable("the in-memory job queue is closed")
