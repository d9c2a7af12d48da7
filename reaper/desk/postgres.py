"""``PostgresDesk``: a person's answers to gates, over the job queue's own
:class:`~reaper.jobqueue.database.Database` (the same pool and driver seam as the store), as the
:class:`~reaper.desk.port.GateDesk` port says. Each method is its module's function
(:mod:`~reaper.desk.answers`, :mod:`~reaper.desk.dead_letters`, what a person reads beside
them in :mod:`~reaper.desk.reading`) bound to the database."""

from __future__ import annotations

from reaper.desk import answers, dead_letters, reading
from reaper.jobqueue.bound import OnDatabase
from reaper.jobqueue.database import Database

__all__ = ["PostgresDesk"]


class PostgresDesk:
    """Gates answered in PostgreSQL; closing it is the store's (it holds no pool of its own)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    answer_gate = OnDatabase(answers.answer_gate)
    answer_dead_letter_gate = OnDatabase(dead_letters.answer_gate)
    count_events = OnDatabase(reading.count_events)
    streams_between = OnDatabase(reading.streams_between)
    jobs_between = OnDatabase(reading.jobs_between)
