"""The in-memory double's tables, and the writes and reads its methods share.

The in-memory double's tables, and what it does with them whatever the method: arranging
jobs, raising and answering gates (by the rules any store follows, :mod:`reaper.jobqueue.rules`),
appending to the ledger, starting a dispatch episode. The job queue port's other methods are in
:mod:`reaper.testing.memory`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from uuid import UUID, uuid4

from reaper.core.canonical import canonical_json, digest_of
from reaper.core.dead_letters import DISPATCH_SCHEMA, QuietMark
from reaper.core.domain import EVENT_KIND, Dispatch, HeldLease
from reaper.core.observation import Observation
from reaper.core.records import Gate, LedgerEvent
from reaper.core.storable import payload_for_storage
from reaper.errors import GateError, StoreUnavailable
from reaper.jobqueue import rules
from reaper.jobqueue.port import (
    OPEN_GATES,
    EventFilter,
    GateChoice,
    GateCount,
    GateFilter,
    ParkedDeadLetter,
    ReplaySender,
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

    # ----------------------------------------------------------------------- gates

    async def list_gates(self, chosen: GateFilter = OPEN_GATES) -> list[Gate]:
        c = chosen
        self._open()
        found = (
            g
            for g in self.gates.values()
            if (not c.open_only or g.is_open)
            and (c.kind is None or g.kind == c.kind)
            and (c.project_id is None or g.project_id == c.project_id)
            and (c.raised_before is None or g.created_at < c.raised_before)
            and (c.raised_since is None or g.created_at >= c.raised_since)
        )
        return [self._with_latest(g) for g in sorted(found, key=_raised)[: c.limit]]

    async def gates_between(self, low: UUID, high: UUID, limit: int) -> list[Gate]:
        self._open()
        found = sorted((g for g in self.gates.values() if low <= g.id <= high), key=lambda g: g.id)
        return [self._with_latest(g) for g in found[:limit]]

    async def open_gate_counts(self) -> list[GateCount]:
        self._open()
        by_kind: dict[str, list[datetime]] = {}
        for g in self.gates.values():
            if g.is_open:
                by_kind.setdefault(g.kind, []).append(g.created_at)
        return [GateCount(k, len(v), min(v)) for k, v in sorted(by_kind.items())]

    async def open_dead_letter_gates(self) -> dict[str, int]:
        self._open()
        waiting: dict[str, int] = {}
        for g in self.gates.values():
            if not g.is_open or g.job_id is None:
                continue
            for letter in self.letters.values():
                if letter.job_id == g.job_id:
                    queue = letter.letter.queue
                    waiting[queue] = waiting.get(queue, 0) + 1
        return dict(sorted(waiting.items()))

    async def parked_dead_letters(self, job_ids: Sequence[UUID]) -> dict[UUID, ParkedDeadLetter]:
        self._open()
        return {
            job_id: parked for job_id in job_ids if (parked := self._parked_of(job_id)) is not None
        }

    async def answer_gate(
        self, answer: GateChoice, *, dispatch: Dispatch = Dispatch.POLLING
    ) -> Gate:
        gate = self._gate_for_answer(answer)
        state = rules.job_after(gate, answer.choice)
        job = self.jobs.get(gate.job_id) if gate.job_id else None
        if state != rules.READY:
            self._settle(job, state, answer.now)
        elif job is not None and job.state == "awaiting_human":
            job.state, job.run_after, job.updated_at = rules.READY, answer.now, answer.now
            if dispatch is Dispatch.OUTBOX:
                self._dispatch(job, answer.now)
        return self._answer(gate, answer)

    async def answer_dead_letter_gate(
        self, answer: GateChoice, *, replay: ReplaySender | None = None
    ) -> tuple[Gate, ParkedDeadLetter | None]:
        gate = self._gate_for_answer(answer)
        settled = rules.dead_letter_settled(gate, answer.choice)
        job = self.jobs.get(gate.job_id) if gate.job_id else None
        parked = self._parked_of(gate.job_id) if gate.job_id else None
        published = None
        if answer.choice == rules.DEAD_LETTER_REPLAY:
            published = await rules.publish_replay(gate, replay, parked)
        self._settle(job, settled, answer.now)
        return self._answer(gate, answer, published), parked

    def _parked_of(self, job_id: UUID) -> ParkedDeadLetter | None:
        job = self.jobs.get(job_id)
        parked = next(
            (
                p
                for identity, p in self.letters.items()
                if p.job_id == job_id and self.dispositions.get(identity) == "parked"
            ),
            None,
        )
        if parked is not None and job is not None:
            parked = replace(parked, job_state=job.state)
        return parked

    def _with_latest(self, gate: Gate) -> Gate:
        if gate.job_id is None:
            return gate
        latest = max((g for g in self.gates.values() if g.job_id == gate.job_id), key=_raised)
        job = self.jobs.get(gate.job_id)
        return replace(
            gate,
            superseded_by=None if latest.id == gate.id else latest.id,
            job_kind=None if job is None else job.kind,
        )

    def _gate_for_answer(self, answer: GateChoice) -> Gate:
        self._open()
        gate = self.gates.get(answer.gate_id)
        if gate is None:
            raise GateError(f"gate {answer.gate_id} does not exist")
        rules.check_answerable(gate, answer.choice)
        if gate.job_id is not None:
            latest = max((g for g in self.gates.values() if g.job_id == gate.job_id), key=_raised)
            if latest.id != gate.id:
                raise GateError(
                    rules.not_the_latest(gate, latest.id, latest.kind, latest.created_at)
                )
        return gate

    def _answer(
        self, gate: Gate, answer: GateChoice, published: tuple[str, str] | None = None
    ) -> Gate:
        answered = replace(
            gate, answer=answer.choice, answered_at=answer.now, answered_by=answer.answered_by
        )
        self.gates[gate.id] = answered
        payload = rules.answered_payload(gate, answer, published)
        self._append(gate.project_id, payload, published is None, answer.now, rules.GATE_ANSWERED)
        return self._with_latest(answered)

    @staticmethod
    def _settle(job: JobRow | None, state: str, now: datetime) -> None:
        if job is not None and job.state == "awaiting_human":
            job.state, job.finished_at, job.updated_at = state, now, now

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


def _raised(gate: Gate) -> tuple[datetime, str]:
    """Gates in the order they were raised (ties by id), as the store orders them."""
    return (gate.created_at, str(gate.id))
