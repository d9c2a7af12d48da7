"""``MemoryJobQueue``: the job queue and ledger in memory, for tests above the store.

It keeps the same contract as :class:`~reaper.jobqueue.postgres.PostgresStore`, gates answered
included; ``tests/contract/`` holds them to the same
tests: guarded moves (still leased, same owner, same expiry, same attempts), one event per move
on a gapless stream, one gate per park episode, sightings recorded once and cleared once, dead
letters parked once by identity, gates that cannot be answered twice. What it does not model:
concurrency between processes (it has none) and the database's own failures. Jobs are arranged
with :meth:`add_job` and :meth:`add_dependency`; ``MemoryJobQueue(outbox=True)`` is a host that
dispatches through an outbox (its tables: :mod:`reaper.testing.memory_records`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from uuid import UUID, uuid4

from reaper.core import dead_letters, sightings
from reaper.core.dead_letters import QuietMark
from reaper.core.domain import (
    DEAD_LETTER_JOB_KIND,
    EVENT_KIND,
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
    ClaimableHead,
    DeadLetter,
    SightingKey,
    UnsentDispatch,
    Verdict,
)
from reaper.core.observation import Observation
from reaper.core.storable import payload_from_storage
from reaper.jobqueue.port import (
    DatabaseFacts,
    DeadLetterParks,
    LetterPointer,
    ParkedDeadLetter,
    ParkRules,
    SightingsRecorded,
    Turn,
)
from reaper.jobqueue.rules import (
    DELIVERY_EXHAUSTED_CHOICES,
    dead_letter_key,
)
from reaper.testing.memory_gates import MemoryGates
from reaper.testing.memory_leases import LeaseReaps
from reaper.testing.memory_records import JobRow, OutboxRow

__all__ = ["JobRow", "MemoryJobQueue", "OutboxRow"]


class MemoryJobQueue(LeaseReaps, MemoryGates):
    """The :class:`~reaper.jobqueue.port.JobQueue` port, in memory."""

    async def database_facts(self) -> DatabaseFacts:
        self._open()
        return DatabaseFacts(self.clock(), self.outbox is not None)

    async def take_turn(self, name: str, interval_seconds: float, holder: str) -> Turn:
        self._open()
        now = self.clock()
        held = self.turns.get(name)
        if held is None or held[0] <= now - timedelta(seconds=interval_seconds):
            self.turns[name] = (now, holder)
            return Turn.as_found(True, now, holder, now, interval_seconds)
        return Turn.as_found(False, held[0], held[1], now, interval_seconds)

    async def hand_back_turn(self, name: str, turn: Turn, interval_seconds: float) -> bool:
        self._open()
        if self.turns.get(name) != (turn.taken_at, turn.taken_by):
            return False
        self.turns[name] = (
            turn.taken_at - timedelta(seconds=interval_seconds),
            turn.taken_by,
        )
        return True

    async def observations(self, scope: str) -> list[Observation]:
        self._open()
        return list(self.observed.get(scope, ()))

    async def keep_observations(self, scope: str, kept: Sequence[Observation]) -> None:
        self._open()
        self.observed[scope] = list(kept)

    async def quiet_mark(self, scope: str, queue: str) -> QuietMark | None:
        self._open()
        return self.quiet_marks.get((scope, queue))

    async def keep_quiet_mark(self, scope: str, mark: QuietMark) -> None:
        self._open()
        self.quiet_marks[(scope, mark.queue)] = mark

    async def unsent_dispatches(self, project_id: UUID | None = None) -> list[UnsentDispatch]:
        self._open()
        oldest: dict[UUID, UnsentDispatch] = {}
        for row in self.outbox or ():
            job = self.jobs.get(row.job_id)
            if row.sent_at is not None or job is None or job.state != "ready":
                continue
            if row.key != f"dispatch:{job.id}:{job.dispatch_seq}":
                continue  # an older episode's row
            if project_id is not None and job.project_id != project_id:
                continue
            found = UnsentDispatch(
                job.project_id, job.id, job.kind, job.dispatch_seq, row.created_at
            )
            kept = oldest.get(job.project_id)
            if kept is None or (found.written_at, str(found.job_id)) < (
                kept.written_at,
                str(kept.job_id),
            ):
                oldest[job.project_id] = found
        return [oldest[p] for p in sorted(oldest, key=str)]

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

    # ----------------------------------------------------------------------- sightings

    async def record_sightings(
        self, observed: Sequence[Verdict], seen_by: sightings.SightingsPass
    ) -> SightingsRecorded:
        now, sources_read = seen_by.now, seen_by.sources_read
        project_id, unread_queues = seen_by.project_id, seen_by.unread_queues
        self._open()
        seen = sightings.observed_sightings(observed)
        latest, opened_at = self._latest_sightings()
        wanted = {
            ref: record
            for ref, record in latest.items()
            if ref in seen
            or (
                sightings.is_open(record)
                and sightings.is_read(record, sources_read, project_id, unread_queues)
            )
        }
        records = sightings.records_to_write(seen, wanted, sources_read, project_id, unread_queues)
        for record in records:
            self._append(record.stream, record.payload(), record.trusted, now)
        since = {
            ref.key: opened_at[ref]
            for ref in seen
            if ref in wanted and sightings.is_open(wanted[ref])
        }
        return SightingsRecorded(records, since)

    async def sightings_open_since(
        self, observed: Sequence[Verdict]
    ) -> dict[SightingKey, datetime]:
        self._open()
        latest, opened_at = self._latest_sightings()
        return {
            ref.key: opened_at[ref]
            for ref in sightings.observed_sightings(observed)
            if ref in latest and sightings.is_open(latest[ref])
        }

    def _latest_sightings(
        self,
    ) -> tuple[dict[sightings.SightingRef, Verdict], dict[sightings.SightingRef, datetime]]:
        """Each sighting's latest record (surface or cleared) and when it was written."""
        latest: dict[sightings.SightingRef, Verdict] = {}
        opened_at: dict[sightings.SightingRef, datetime] = {}
        for stream, events in self.ledger.items():
            for event in events:
                payload = payload_from_storage(event.payload)
                if event.kind != EVENT_KIND or payload.get("action") not in ("surface", "cleared"):
                    continue
                record = sightings.verdict_from_record(stream, payload, event.trusted)
                ref = sightings.ref_of(record)
                latest[ref], opened_at[ref] = record, event.created_at  # events in seq order
        return latest, opened_at

    # ----------------------------------------------------------------------- dead letters

    async def count_parked_dead_letters(self, queue: str) -> int:
        self._open()
        return sum(1 for parked in self.letters.values() if parked.letter.queue == queue)

    async def parked_identities(self, identities: Sequence[str]) -> set[str]:
        self._open()
        raised = {g.identity for g in self.gates.values()}
        return {i for i in identities if dead_letter_key(i) in raised or i in self.dispositions}

    async def parked_envelopes(self, envelopes: Sequence[str]) -> dict[str, int]:
        self._open()
        wanted = set(envelopes)
        found: dict[str, int] = {}
        for parked in self.letters.values():
            envelope = parked.letter.envelope
            if envelope is not None and envelope in wanted:
                found[envelope] = found.get(envelope, 0) + 1
        return found

    async def keep_envelopes(self, seen: Sequence[tuple[str, str]]) -> int:
        self._open()
        changed = 0
        for identity, envelope in dict(seen).items():
            parked = self.letters.get(identity)
            if parked is not None and parked.letter.envelope != envelope:
                self.letters[identity] = replace(
                    parked, letter=replace(parked.letter, envelope=envelope)
                )
                changed += 1
        return changed

    async def park_dispatch_pointers(
        self, pointers: Sequence[LetterPointer], *, now: datetime, rules: ParkRules
    ) -> DeadLetterParks:
        self._open()
        parked: list[Verdict] = []
        stale: list[Verdict] = []
        already: list[str] = []
        for letter, pointer in pointers:
            if letter.identity in self.dispositions:
                already.append(letter.identity)
                continue
            job = self.jobs.get(pointer.job_id)
            if job is not None and job.project_id != pointer.project_id:
                job = None
            current = (
                job is not None
                and job.dispatch_seq == pointer.dispatch_seq
                and (
                    job.state == "ready"
                    or (
                        job.state == "leased"
                        and job.lease_expires_at is not None
                        and job.lease_expires_at
                        < now - timedelta(seconds=rules.lease_grace_seconds)
                    )
                )
            )
            found = (
                "it points to does not exist (in that project)"
                if job is None
                else f"is {job.state} at generation {job.dispatch_seq}"
            )
            if current and job is not None:
                job.state, job.updated_at = "awaiting_human", now
                job.lease_owner = job.lease_expires_at = None
                self._raise_gate(
                    job,
                    GATE_DELIVERY_EXHAUSTED,
                    dead_letters.pointer_prompt(letter, pointer),
                    DELIVERY_EXHAUSTED_CHOICES,
                    dead_letter_key(letter.identity),
                    now,
                )
            kept = dead_letters.park_fields(letter)
            self.letters[letter.identity] = ParkedDeadLetter(
                kept, job.id if job is not None else uuid4(), now, job.state if job else "none"
            )
            self.dispositions[letter.identity] = "pointer_parked" if current else "stale_pointer"
            verdict = dead_letters.pointer_verdict(
                letter,
                pointer,
                depth=rules.depth,
                min_depth=rules.min_depth,
                parked=current,
                found=found,
            )
            self._append(verdict.stream, verdict.payload(), verdict.trusted, now)
            (parked if current else stale).append(verdict)
        return DeadLetterParks(tuple(parked), tuple(already), (), tuple(stale))

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
            if letter.identity in self.dispositions or any(
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
            self.dispositions[letter.identity] = "parked"
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
