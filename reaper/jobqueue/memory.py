"""``MemoryJobQueue``: the job queue and ledger in memory, for tests of everything above the
store (the pass, the hook, the commands) without a database.

It keeps the same contract as :class:`~reaper.jobqueue.postgres.PostgresStore`, and
``tests/contract/`` holds both to the same tests: guarded moves (still leased, same owner, same
expiry, same attempts), one event per move on a gapless stream, one gate per park episode,
sightings recorded once and cleared once, dead letters parked once by identity, gates that
cannot be answered twice. What it does not model: concurrency between processes (it has none)
and the database's own failures. Jobs are arranged with :meth:`add_job` and
:meth:`add_dependency`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

from reaper.core import dead_letters, sightings
from reaper.core.canonical import canonical_json, digest_of
from reaper.core.domain import (
    DEAD_LETTER_JOB_KIND,
    EVENT_KIND,
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
    Action,
    ClaimableHead,
    DeadLetter,
    Gate,
    HeldLease,
    LedgerEvent,
    Source,
    Verdict,
)
from reaper.errors import GateError, StoreUnavailable
from reaper.jobqueue.port import (
    DeadLetterParks,
    LeaseMoves,
    ParkedDeadLetter,
    ParkRules,
    ReplaySender,
)
from reaper.jobqueue.rules import (
    DEAD_LETTER_REPLAY,
    DEAD_LETTER_SETTLED,
    DELIVERY_EXHAUSTED_CHOICES,
    REPLAY_NEEDS_BROKER,
    check_lease_move,
    dead_letter_key,
    not_the_latest,
    park_identity,
    park_prompt,
)

__all__ = ["JobRow", "MemoryJobQueue"]


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
    id: UUID = field(default_factory=uuid4)


class MemoryJobQueue:
    """The :class:`~reaper.jobqueue.port.JobQueue` port, in memory."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        #: The database's clock, as the double keeps it (tests pin it).
        self.clock = clock
        self.jobs: dict[UUID, JobRow] = {}
        self.dependencies: set[tuple[UUID, UUID]] = set()
        self.gates: dict[UUID, Gate] = {}
        self.letters: dict[str, ParkedDeadLetter] = {}
        self.ledger: dict[UUID, list[LedgerEvent]] = {}
        self.closed = False

    # ----------------------------------------------------------------------- arranging

    def add_job(self, row: JobRow) -> UUID:
        """Insert a job; its id."""
        self.jobs[row.id] = row
        return row.id

    def add_dependency(self, job_id: UUID, depends_on: UUID) -> None:
        self.dependencies.add((job_id, depends_on))

    async def database_now(self) -> datetime:
        self._open()
        return self.clock()

    # ----------------------------------------------------------------------- leases

    async def expired_leases(
        self, now: datetime, grace_seconds: int, limit: int, project_id: UUID | None = None
    ) -> list[HeldLease]:
        found = sorted(self._expired(now, grace_seconds, project_id), key=lambda x: x[:2])
        return [
            HeldLease(j.id, j.project_id, j.kind, j.lease_owner, expiry, j.attempts, j.max_attempts)
            for expiry, _, j in found[:limit]
        ]

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

    async def claimable_heads(
        self, now: datetime, known_phases: frozenset[str], project_id: UUID | None = None
    ) -> list[ClaimableHead]:
        self._open()
        best: dict[UUID, tuple[datetime, datetime, str, JobRow]] = {}
        for job in self.jobs.values():
            if job.state != "ready" or (project_id is not None and job.project_id != project_id):
                continue
            run_after = job.run_after
            if run_after > now or (known_phases and job.phase not in known_phases):
                continue
            deps = [self.jobs.get(d) for j, d in self.dependencies if j == job.id]
            if any(d is None or d.state != "succeeded" for d in deps):
                continue
            finished = [d.finished_at for d in deps if d is not None and d.finished_at]
            since = max([run_after, *finished])
            key = (since, run_after, str(job.id), job)
            kept = best.get(job.project_id)
            if kept is None or key[:3] < kept[:3]:
                best[job.project_id] = key
        return [
            ClaimableHead(project, row.id, row.kind, since)
            for project, (since, _, _, row) in sorted(best.items(), key=lambda kv: str(kv[0]))
        ]

    async def apply_lease_verdicts(self, verdicts: Sequence[Verdict], now: datetime) -> LeaseMoves:
        leases = [check_lease_move(v) for v in verdicts]
        self._open()
        requeued: list[UUID] = []
        parked: list[UUID] = []
        skipped: list[UUID] = []
        seen: set[UUID] = set()
        for verdict, lease in zip(verdicts, leases, strict=True):
            job = self.jobs.get(lease.job_id)
            if lease.job_id in seen or job is None or not _still_as_read(job, lease, now):
                skipped.append(lease.job_id)
                continue
            seen.add(lease.job_id)
            job.lease_owner = job.lease_expires_at = None
            job.updated_at = now
            if verdict.action is Action.PARK:
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
                requeued.append(lease.job_id)
            self._append(lease.project_id, verdict.payload(), True, now)
        return LeaseMoves(tuple(requeued), tuple(parked), tuple(skipped))

    # ----------------------------------------------------------------------- sightings

    async def record_sightings(
        self,
        observed: Sequence[Verdict],
        *,
        now: datetime,
        sources_read: frozenset[Source],
        project_id: UUID | None = None,
    ) -> list[Verdict]:
        self._open()
        seen = sightings.observed_sightings(observed)
        latest: dict[sightings.SightingRef, Verdict] = {}
        for stream, events in self.ledger.items():
            for event in events:
                if event.kind != EVENT_KIND or event.payload.get("action") not in (
                    "surface",
                    "cleared",
                ):
                    continue
                record = sightings.verdict_from_record(stream, event.payload, event.trusted)
                latest[sightings.ref_of(record)] = record  # events are in seq order
        wanted = {
            ref: record
            for ref, record in latest.items()
            if ref in seen
            or (sightings.is_open(record) and sightings.is_read(ref, sources_read, project_id))
        }
        records = sightings.records_to_write(seen, wanted, sources_read, project_id)
        for record in records:
            self._append(record.stream, record.payload(), record.trusted, now)
        return records

    # ----------------------------------------------------------------------- dead letters

    async def count_parked_dead_letters(self, queue: str) -> int:
        self._open()
        raised = {g.identity for g in self.gates.values() if g.kind == GATE_BUS_DEAD_LETTERED}
        return sum(
            1
            for identity, parked in self.letters.items()
            if parked.letter.queue == queue and dead_letter_key(identity) in raised
        )

    async def parked_identities(self, identities: Sequence[str]) -> set[str]:
        self._open()
        raised = {g.identity for g in self.gates.values()}
        return {i for i in identities if dead_letter_key(i) in raised}

    async def park_dead_letters(
        self, letters: Sequence[DeadLetter], *, now: datetime, rules: ParkRules
    ) -> DeadLetterParks:
        self._open()
        parked: list[Verdict] = []
        already: list[str] = []
        failed: list[tuple[str, str]] = []
        for letter in letters:
            key = dead_letter_key(letter.identity)
            if any(j.idempotency_key == key for j in self.jobs.values()):
                already.append(letter.identity)
                continue
            if letter.identity in self.letters or any(
                g.identity == key for g in self.gates.values()
            ):
                reason = (
                    f"a gate with identity {key!r} exists without its {DEAD_LETTER_JOB_KIND} job"
                )
                failed.append((letter.identity, reason))
                continue
            job = JobRow(
                project_id=FLEET_PROJECT_ID,
                kind=DEAD_LETTER_JOB_KIND,
                state="awaiting_human",
                run_after=now,
                idempotency_key=key,
                updated_at=now,
            )
            job_id = self.add_job(job)
            self.letters[letter.identity] = ParkedDeadLetter(
                dead_letters.park_fields(letter), job_id, now, "awaiting_human"
            )
            prompt = dead_letters.gate_prompt(
                letter,
                owned_queue_pattern=rules.owned_queue_pattern,
                dead_letter_queue_pattern=rules.dead_letter_queue_pattern,
            )
            self._raise_gate(
                self.jobs[job_id],
                GATE_BUS_DEAD_LETTERED,
                prompt,
                dead_letters.GATE_CHOICES,
                key,
                now,
            )
            verdict = dead_letters.park_verdict(
                letter, depth=rules.depth, min_depth=rules.min_depth, job_id=job_id
            )
            self._append(verdict.stream, verdict.payload(), verdict.trusted, now)
            parked.append(verdict)
        return DeadLetterParks(tuple(parked), tuple(already), tuple(failed))

    # ----------------------------------------------------------------------- gates

    async def list_gates(self, *, open_only: bool = True, kind: str | None = None) -> list[Gate]:
        self._open()
        return sorted(
            (
                g
                for g in self.gates.values()
                if (not open_only or g.is_open) and (kind is None or g.kind == kind)
            ),
            key=lambda g: (g.created_at, str(g.id)),
        )

    async def answer_gate(
        self, gate_id: UUID, choice: str, now: datetime, *, answered_by: str | None = None
    ) -> Gate:
        gate = self._gate_for_answer(gate_id, choice)
        job = self.jobs.get(gate.job_id) if gate.job_id else None
        if gate.kind == GATE_DELIVERY_EXHAUSTED:
            if job is not None and job.state == "awaiting_human":
                job.state, job.run_after, job.updated_at = "ready", now, now
        elif gate.kind == GATE_BUS_DEAD_LETTERED:
            if choice == DEAD_LETTER_REPLAY:
                raise GateError(REPLAY_NEEDS_BROKER.format(gate=gate.id))
            self._settle(job, DEAD_LETTER_SETTLED[choice], now)
        else:
            raise GateError(f"gate {gate.id} is a {gate.kind} gate: this store cannot answer it")
        return self._answer(gate, choice, now, answered_by)

    async def answer_dead_letter_gate(
        self,
        gate_id: UUID,
        choice: str,
        now: datetime,
        *,
        replay: ReplaySender | None = None,
        answered_by: str | None = None,
    ) -> tuple[Gate, ParkedDeadLetter | None]:
        gate = self._gate_for_answer(gate_id, choice)
        if gate.kind != GATE_BUS_DEAD_LETTERED:
            raise GateError(
                f"gate {gate.id} is a {gate.kind} gate, not a {GATE_BUS_DEAD_LETTERED} gate"
            )
        job = self.jobs.get(gate.job_id) if gate.job_id else None
        parked = next((p for p in self.letters.values() if p.job_id == gate.job_id), None)
        if parked is not None and job is not None:
            parked = replace(parked, job_state=job.state)
        if choice == DEAD_LETTER_REPLAY:
            if replay is None:
                raise GateError(REPLAY_NEEDS_BROKER.format(gate=gate.id))
            if parked is None:
                raise GateError(
                    f"gate {gate.id}: its job keeps no dead letter, so there is nothing to replay"
                )
            await replay(gate, parked)
        self._settle(job, DEAD_LETTER_SETTLED[choice], now)
        return self._answer(gate, choice, now, answered_by), parked

    def _gate_for_answer(self, gate_id: UUID, choice: str) -> Gate:
        self._open()
        gate = self.gates.get(gate_id)
        if gate is None:
            raise GateError(f"gate {gate_id} does not exist")
        if gate.answered_at is not None:
            raise GateError(
                f"gate {gate.id} was already answered at {gate.answered_at.isoformat()} "
                f"with {gate.answer!r}"
            )
        if choice not in gate.choices:
            offered = ", ".join(repr(c) for c in gate.choices) or "nothing"
            raise GateError(f"{choice!r} is not an answer gate {gate.id} offers: choose {offered}")
        if gate.job_id is not None:
            latest = max(
                (g for g in self.gates.values() if g.job_id == gate.job_id),
                key=lambda g: (g.created_at, str(g.id)),
            )
            if latest.id != gate.id:
                raise GateError(not_the_latest(gate, latest.id, latest.kind, latest.created_at))
        return gate

    def _answer(self, gate: Gate, choice: str, now: datetime, answered_by: str | None) -> Gate:
        answered = replace(gate, answer=choice, answered_at=now, answered_by=answered_by)
        self.gates[gate.id] = answered
        return answered

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

    def _append(
        self, stream: UUID, payload: dict[str, object], trusted: bool, now: datetime
    ) -> None:
        events = self.ledger.setdefault(stream, [])
        canonical = canonical_json(payload)
        digest = digest_of(canonical)
        stored = json.loads(canonical)  # as read back from the ledger
        events.append(
            LedgerEvent(stream, len(events) + 1, EVENT_KIND, stored, digest, trusted, now)
        )

    async def close(self) -> None:
        self.closed = True

    def _open(self) -> None:
        if self.closed:
            raise StoreUnavailable("the in-memory job queue is closed")


def _still_as_read(job: JobRow, lease: HeldLease, now: datetime) -> bool:
    """The guard every move re-checks: still leased, in the same project, by the same owner,
    with the same expiry and attempts, and still expired."""
    return (
        job.state == "leased"
        and job.project_id == lease.project_id
        and job.lease_owner == lease.lease_owner
        and job.lease_expires_at == lease.lease_expires_at
        and job.attempts == lease.attempts
        and job.lease_expires_at is not None
        and job.lease_expires_at < now
    )
