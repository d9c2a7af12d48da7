"""The job queue as the pass sees it, in the domain's words: a Protocol and its typed results.

:class:`~reaper.jobqueue.postgres.PostgresStore` is the real implementation and
:class:`~reaper.testing.memory.MemoryJobQueue` the in-memory double; both are held to the same
contract tests (``tests/contract/``). The pass depends only on this module, so it never imports
a driver. Every method returns a named, typed result; a failure of the database itself is
:class:`~reaper.errors.StoreUnavailable`, and a write cut short carries what it had committed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol
from uuid import UUID

from reaper.core.dead_letters import DispatchPointer, ParkedLetter, QuietMark
from reaper.core.domain import (
    ClaimableHead,
    DeadLetter,
    Dispatch,
    SightingKey,
    UnsentDispatch,
    Verdict,
)
from reaper.core.lease_reap import FIRST_KEY, LeaseKey, LeaseReap, LeaseReapRun
from reaper.core.observation import Observation
from reaper.core.records import Gate, LedgerEvent
from reaper.core.sightings import SightingsPass
from reaper.errors import StoreUnavailable

__all__ = [
    "FIRST_KEY",
    "OPEN_GATES",
    "DatabaseFacts",
    "DeadLetterParks",
    "EventFilter",
    "GateChoice",
    "GateCount",
    "GateFilter",
    "JobQueue",
    "LeaseKey",
    "LeaseReap",
    "LeaseReapInterrupted",
    "LeaseReapRun",
    "LetterPointer",
    "ParkRules",
    "ParkedDeadLetter",
    "ReplaySender",
    "SightingsRecorded",
    "Turn",
]


#: A dead-lettered dispatch pointer: the letter, and the pointer its body holds.
LetterPointer = tuple[DeadLetter, DispatchPointer]


class LeaseReapInterrupted(StoreUnavailable):
    """The database went away in the middle of a lease reap; ``reap`` is what had committed."""

    def __init__(self, reason: str, reap: LeaseReap) -> None:
        super().__init__(reason)
        self.reap = reap


@dataclass(frozen=True)
class DatabaseFacts:
    """What the pass learns of the database before it reads anything else."""

    #: The database's clock: every time the host wrote (a lease's expiry, ``run_after``, a
    #: dependency's success) is compared with it, never with the reaper's own (SPEC §10).
    now: datetime
    #: Whether the host's schema has ``job.dispatch_seq`` and ``job_outbox``.
    outbox_schema: bool


@dataclass(frozen=True)
class Turn:
    """The fleet's turn to run a whole pass (SPEC §10 "A fleet shares one pass"), as one
    :meth:`JobQueue.take_turn` found it: taken by this caller now, or held by another since
    ``taken_at``. Times are the database's."""

    #: Whether this caller took the turn.
    mine: bool
    #: When the turn in force was taken (by this caller when ``mine``).
    taken_at: datetime
    #: Who holds it: the ``holder`` text its taker gave.
    taken_by: str
    #: The database's clock when the turn was asked for.
    now: datetime
    #: Seconds from ``now`` until the turn is free again (0 when it is free already; the
    #: whole interval for the caller that just took it).
    free_in_seconds: float

    @classmethod
    def as_found(
        cls,
        mine: bool,
        taken_at: datetime | None,
        taken_by: str | None,
        now: datetime,
        interval_seconds: float,
    ) -> Turn:
        """The turn as one ask found it. A turn row gone between the ask's two reads (the
        reaper never deletes it; a person may) reads as free now."""
        if taken_at is None:
            return cls(False, now, taken_by or "", now, 0.0)
        if mine:
            return cls(True, taken_at, taken_by or "", now, float(interval_seconds))
        free_in = interval_seconds - (now - taken_at).total_seconds()
        return cls(False, taken_at, taken_by or "", now, max(0.0, free_in))


@dataclass(frozen=True)
class SightingsRecorded:
    """What :meth:`JobQueue.record_sightings` wrote (the observed verdicts that opened a
    sighting, the very objects passed in, and the ``cleared`` records), and since when each
    observed sighting that was open already has been open, by its key: read under the same
    lock as the records, so the report's "seen since" needs no second read."""

    records: list[Verdict]
    since: dict[SightingKey, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class DeadLetterParks:
    """What :meth:`JobQueue.park_dead_letters` did with the letters given."""

    #: The ``park`` verdicts recorded, in the order given (the job's id as ``object``).
    parked: tuple[Verdict, ...] = ()
    #: Identities parked before (an earlier pass, or another reaper just now): nothing written.
    already_parked: tuple[str, ...] = ()
    #: Identities the database refused, each with the reason; each rolled back alone.
    failed: tuple[tuple[str, str], ...] = ()
    #: Dispatch pointers recorded as stale (their job had moved on): nothing moved, each
    #: recorded once, with its event.
    stale: tuple[Verdict, ...] = ()


@dataclass(frozen=True)
class ParkRules:
    """What a dead-letter park needs to know of the configuration: the depth it records
    against ``min_depth``, and the patterns the gate's replay answer is judged by."""

    depth: int
    min_depth: int
    owned_queue_pattern: str
    dead_letter_queue_pattern: str
    #: A dispatch pointer parks a leased job only once its lease is past this grace, as the
    #: lease reap judges it (``[queue.reap] lease_grace_seconds``).
    lease_grace_seconds: int = 0


@dataclass(frozen=True)
class ParkedDeadLetter:
    """A parked ``bus.dead_letter`` job: what it keeps of its letter, and the job's state."""

    letter: ParkedLetter
    job_id: UUID
    parked_at: datetime
    job_state: str


@dataclass(frozen=True)
class GateCount:
    """The open gates of one kind: how many, and when the oldest was raised."""

    kind: str
    open: int
    oldest: datetime


@dataclass(frozen=True)
class GateFilter:
    """Which gates :meth:`JobQueue.list_gates` lists, oldest first: each field narrows (None:
    any), at most ``limit``; ``raised_since`` includes its own instant, ``raised_before`` not."""

    open_only: bool = True
    kind: str | None = None
    project_id: UUID | None = None
    raised_before: datetime | None = None
    raised_since: datetime | None = None
    limit: int | None = None


#: Every open gate.
OPEN_GATES = GateFilter()


@dataclass(frozen=True)
class GateChoice:
    """A person's answer to one gate (SPEC §1): the choice, when, by whom and why."""

    gate_id: UUID
    choice: str
    now: datetime
    answered_by: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class EventFilter:
    """Which ledger events ``reaper events`` reads: each field narrows (None: any), newest
    ``limit`` of them."""

    since: datetime | None = None
    project_id: UUID | None = None
    kind: str | None = None
    condition: str | None = None
    object: str | None = None
    limit: int = 100
    action: str | None = None
    source: str | None = None

    def values(self) -> tuple[datetime | UUID | str | None, ...]:
        """The narrowing values, in the order the ledger's queries take them."""
        c = self
        return (c.since, c.project_id, c.kind, c.condition, c.object, c.action, c.source)


#: Publishes a parked dead letter's body back (``reaper gates answer``) and returns the message
#: id it was published with; raises to refuse.
ReplaySender = Callable[[Gate, ParkedDeadLetter], Awaitable[str]]


class JobQueue(Protocol):
    """The job queue's record and the ledger (SPEC §3)."""

    async def database_facts(self) -> DatabaseFacts:
        """The database's clock, and whether the host's schema dispatches through an outbox."""
        ...

    async def take_turn(self, name: str, interval_seconds: float, holder: str) -> Turn:
        """Take the turn ``name`` if nobody took it in the last ``interval_seconds`` (by the
        database's clock), in one short statement; else say who holds it and for how long."""
        ...

    async def hand_back_turn(self, name: str, turn: Turn, interval_seconds: float) -> bool:
        """Free the turn ``name`` as ``turn`` (taken by this caller, its pass over) for the
        next ask at once, if nobody took it since; whether it was handed back. A pass that
        left expired leases behind gives the next pass its turn now, one pass at a time."""
        ...

    async def observations(self, scope: str) -> list[Observation]:
        """What was watched across passes on the vhost ``scope``."""
        ...

    async def keep_observations(self, scope: str, observations: Sequence[Observation]) -> None:
        """Replace what is watched on ``scope`` with ``observations``."""
        ...

    async def quiet_mark(self, scope: str, queue: str) -> QuietMark | None:
        """What the last pass that read the dead-letter queue ``queue`` of the vhost ``scope``
        saw of it (:mod:`reaper.core.dead_letters.quiet`); None when no pass read it yet."""
        ...

    async def keep_quiet_mark(self, scope: str, mark: QuietMark) -> None:
        """Keep ``mark`` for its queue on the vhost ``scope``, replacing the last."""
        ...

    async def unsent_dispatches(self, project_id: UUID | None = None) -> list[UnsentDispatch]:
        """Per project, the oldest unsent outbox row of a ready job's current dispatch
        episode (outbox dispatch only)."""
        ...

    async def reap_leases(self, run: LeaseReapRun) -> LeaseReap:
        """Rule on every lease expired past the grace as the lease judge rules, oldest first,
        and (``run.write``) requeue or park each with its event; a park refunds an attempt and
        raises one ``delivery_exhausted`` gate per episode; with outbox dispatch a requeue
        starts a dispatch episode. A dry run rules the same and writes nothing. ``stopped``
        once the deadline passed or ``run.stopping()`` (asked after each batch). A row that
        cannot move is named in ``failed``; :class:`LeaseReapInterrupted` when the database
        goes. No value per lease is returned: the moves are read again by
        :meth:`lease_listing`."""
        ...

    def lease_listing(self, run: LeaseReapRun, reap: LeaseReap) -> AsyncGenerator[Verdict, None]:
        """Every move ``reap`` made, as the ledger recorded it (its runs of events, streamed,
        never all held); a dry run's rulings asked again, read only, over the keys it ruled on
        (the host may have changed rows in between: the caller compares the counts)."""
        ...

    async def count_expired_leases(
        self, now: datetime, grace_seconds: int, project_id: UUID | None = None
    ) -> int:
        """How many leases are expired beyond the grace."""
        ...

    async def claimable_heads(
        self, now: datetime, known_phases: frozenset[str], project_id: UUID | None = None
    ) -> list[ClaimableHead]:
        """Per project with ready work, the claimable job that has waited longest."""
        ...

    async def record_sightings(
        self, observed: Sequence[Verdict], seen_by: SightingsPass
    ) -> SightingsRecorded:
        """Record what this pass's surfaced verdicts mean for the ledger's sightings; return
        the records written (opened sightings and ``cleared`` records) and since when each
        observed sighting already open has been open. A sighting about a broker queue in
        ``unread_queues`` is never cleared."""
        ...

    async def sightings_open_since(
        self, observed: Sequence[Verdict]
    ) -> dict[SightingKey, datetime]:
        """Which sightings of the surfaced verdicts ``observed`` are open, and since when (their
        surface record's ``created_at``); reads only (a dry run)."""
        ...

    async def count_parked_dead_letters(self, queue: str) -> int:
        """How many dead letters read from ``queue`` are parked, answered or not."""
        ...

    async def parked_identities(self, identities: Sequence[str]) -> set[str]:
        """Which of these dead-letter identities are already parked."""
        ...

    async def parked_envelopes(self, envelopes: Sequence[str]) -> dict[str, int]:
        """How many handled dead letters carry each of these envelopes (absent: none)."""
        ...

    async def keep_envelopes(self, seen: Sequence[tuple[str, str]]) -> int:
        """Note the envelope each handled letter (by identity) was just read whole with, where
        its record holds another or none; how many changed."""
        ...

    async def park_dead_letters(
        self, letters: Sequence[DeadLetter], *, now: datetime, rules: ParkRules
    ) -> DeadLetterParks:
        """Park each letter not parked yet, once, each with its gate and event."""
        ...

    async def park_dispatch_pointers(
        self, pointers: Sequence[LetterPointer], *, now: datetime, rules: ParkRules
    ) -> DeadLetterParks:
        """Dead-lettered dispatch pointers (outbox dispatch): park each one's job behind a
        ``delivery_exhausted`` gate while it is still at that generation and ready (or its
        lease expired), else record the pointer as stale; once per letter, with its event."""
        ...

    async def list_gates(self, chosen: GateFilter = OPEN_GATES) -> list[Gate]:
        """The gates ``chosen`` selects, oldest first, each with the job's later gate where it
        has one."""
        ...

    async def gates_between(self, low: UUID, high: UUID, limit: int) -> list[Gate]:
        """Gates whose ids lie between ``low`` and ``high`` (an id's prefix), by id."""
        ...

    async def open_gate_counts(self) -> list[GateCount]:
        """Per kind, the open gates and the oldest's raising time."""
        ...

    async def open_dead_letter_gates(self) -> dict[str, int]:
        """Per dead-letter queue, how many open gates wait on a letter read from it."""
        ...

    async def parked_dead_letters(self, job_ids: Sequence[UUID]) -> dict[UUID, ParkedDeadLetter]:
        """What each of these parked dead-letter jobs keeps of its letter, by job."""
        ...

    async def answer_gate(
        self, answer: GateChoice, *, dispatch: Dispatch = Dispatch.POLLING
    ) -> Gate:
        """A person's answer (SPEC §1): recorded with its ``GateAnswered`` event and what it
        means for the gate's kind done (with outbox dispatch, a job made ready again starts a
        new dispatch episode), at once, the gate locked. ``GateError`` for an unknown gate, one
        answered already, a choice it does not offer, a gate its job has a newer one than, or a
        kind answered only with the broker (a dead letter's ``replay``)."""
        ...

    async def answer_dead_letter_gate(
        self, answer: GateChoice, *, replay: ReplaySender | None = None
    ) -> tuple[Gate, ParkedDeadLetter | None]:
        """Answer a ``bus_dead_lettered`` gate: ``dismiss`` settles the parked job
        ``cancelled``; ``replay`` runs ``replay(gate, letter)`` first, under the gate's lock,
        and records the answer (with the queue and message id sent) and settles the job
        ``succeeded`` only once it returns; if it raises, nothing is recorded. ``replay`` None
        refuses a replay; refused like :meth:`answer_gate` otherwise, and a gate of another
        kind too. Returns the answered gate and the letter its job keeps."""
        ...

    async def events(self, project_id: UUID) -> list[LedgerEvent]:
        """One stream's events, in sequence order."""
        ...

    async def read_events(self, chosen: EventFilter) -> list[LedgerEvent]:
        """The newest ``chosen.limit`` events ``chosen`` selects, oldest first."""
        ...

    async def count_events(self, chosen: EventFilter) -> int:
        """How many events ``chosen`` selects in all, whatever its limit."""
        ...

    async def streams_between(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        """The ledger's streams (projects) whose ids lie between ``low`` and ``high``, by id."""
        ...

    async def jobs_between(self, low: UUID, high: UUID, limit: int) -> list[UUID]:
        """The jobs whose ids lie between ``low`` and ``high`` (an id's prefix), by id."""
        ...

    async def close(self) -> None: ...
