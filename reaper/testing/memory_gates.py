"""The in-memory double's gates: listed, found, counted and answered as any store answers them.

What an answer makes of the parked job, a replay published through the caller's sender, and
the ``GateAnswered`` event's payload are the rules any store follows
(:mod:`reaper.jobqueue.rules`); the tables are :class:`~reaper.testing.memory_records.Records`'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from uuid import UUID

from reaper.core.domain import Dispatch
from reaper.core.records import Gate
from reaper.errors import GateError
from reaper.jobqueue import port, rules
from reaper.testing.memory_records import JobRow, Records

__all__ = ["MemoryGates"]


class MemoryGates(Records):
    """The gates of the in-memory job queue: read, and answered."""

    async def list_gates(self, chosen: port.GateFilter = port.OPEN_GATES) -> list[Gate]:
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

    async def open_gate_counts(self) -> list[port.GateCount]:
        self._open()
        by_kind: dict[str, list[datetime]] = {}
        for g in self.gates.values():
            if g.is_open:
                by_kind.setdefault(g.kind, []).append(g.created_at)
        return [port.GateCount(k, len(v), min(v)) for k, v in sorted(by_kind.items())]

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

    async def parked_dead_letters(
        self, job_ids: Sequence[UUID]
    ) -> dict[UUID, port.ParkedDeadLetter]:
        self._open()
        return {
            job_id: parked for job_id in job_ids if (parked := self._parked_of(job_id)) is not None
        }

    async def answer_gate(
        self, answer: port.GateChoice, *, dispatch: Dispatch = Dispatch.POLLING
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
        self, answer: port.GateChoice, *, replay: port.ReplaySender | None = None
    ) -> tuple[Gate, port.ParkedDeadLetter | None]:
        gate = self._gate_for_answer(answer)
        settled = rules.dead_letter_settled(gate, answer.choice)
        job = self.jobs.get(gate.job_id) if gate.job_id else None
        parked = self._parked_of(gate.job_id) if gate.job_id else None
        published = None
        if answer.choice == rules.DEAD_LETTER_REPLAY:
            published = await rules.publish_replay(gate, replay, parked)
        self._settle(job, settled, answer.now)
        return self._answer(gate, answer, published), parked

    def _parked_of(self, job_id: UUID) -> port.ParkedDeadLetter | None:
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

    def _gate_for_answer(self, answer: port.GateChoice) -> Gate:
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
        self, gate: Gate, answer: port.GateChoice, published: tuple[str, str] | None = None
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


def _raised(gate: Gate) -> tuple[datetime, str]:
    """Gates in the order they were raised (ties by id), as the store orders them."""
    return (gate.created_at, str(gate.id))
