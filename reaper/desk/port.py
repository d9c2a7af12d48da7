"""The desk as its callers see it: where a person's answer to a gate is taken, in the domain's
words. :class:`~reaper.desk.postgres.PostgresDesk` is the real one, over the job queue's
database; :class:`~reaper.testing.memory.MemoryJobQueue` answers on its own tables too, and
``tests/contract/`` holds both to the same answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Protocol
from uuid import UUID

from reaper.core.domain import Dispatch
from reaper.core.records import Gate
from reaper.jobqueue.port import EventFilter, ParkedDeadLetter

__all__ = ["GateDesk", "ReplaySender"]

#: Publishes a parked dead letter's body back (``reaper gates answer``) and returns the message
#: id it was published with; raises to refuse.
ReplaySender = Callable[[Gate, ParkedDeadLetter], Awaitable[str]]


class GateDesk(Protocol):
    """Answers to the gates a pass raised (SPEC §1): each with its ``GateAnswered`` event."""

    async def answer_gate(
        self,
        gate_id: UUID,
        choice: str,
        now: datetime,
        *,
        answered_by: str | None = None,
        dispatch: Dispatch = Dispatch.POLLING,
        reason: str | None = None,
    ) -> Gate:
        """Answer a gate and do what the answer means for its kind (with outbox dispatch, a
        job made ready again starts a new dispatch episode), with its ``GateAnswered`` event."""
        ...

    async def answer_dead_letter_gate(
        self,
        gate_id: UUID,
        choice: str,
        now: datetime,
        *,
        replay: ReplaySender | None = None,
        answered_by: str | None = None,
        reason: str | None = None,
    ) -> tuple[Gate, ParkedDeadLetter | None]:
        """Answer a ``bus_dead_lettered`` gate (``replay`` publishes first), with its event."""
        ...

    async def count_events(self, chosen: EventFilter) -> int:
        """How many events ``chosen`` selects in all, whatever its limit."""
        ...

    async def streams_between(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        """The ledger's streams (projects) whose ids lie between ``low`` and ``high``."""
        ...

    async def jobs_between(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        """The jobs whose ids lie between ``low`` and ``high`` (an id's prefix), by id."""
        ...
