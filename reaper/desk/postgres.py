"""``PostgresDesk``: a person's answers to gates, over the job queue's own
:class:`~reaper.jobqueue.database.Database` (the same pool and driver seam as the store), as the
:class:`~reaper.desk.port.GateDesk` port says. Each method is its module's function
(:mod:`~reaper.desk.answers`, :mod:`~reaper.desk.dead_letters`) bound to the database."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from reaper.core.domain import Dispatch
from reaper.core.records import Gate
from reaper.desk import answers, dead_letters
from reaper.desk.port import ReplaySender
from reaper.jobqueue.database import Database
from reaper.jobqueue.port import ParkedDeadLetter

__all__ = ["PostgresDesk"]


class PostgresDesk:
    """Gates answered in PostgreSQL; closing it is the store's (it holds no pool of its own)."""

    def __init__(self, database: Database) -> None:
        self.database = database

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
        return await answers.answer_gate(
            self.database,
            gate_id,
            choice,
            now,
            answered_by=answered_by,
            dispatch=dispatch,
            reason=reason,
        )

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
        return await dead_letters.answer_gate(
            self.database,
            gate_id,
            choice,
            now,
            replay=replay,
            answered_by=answered_by,
            reason=reason,
        )
