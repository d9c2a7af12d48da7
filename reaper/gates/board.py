"""What waits for a person at a glance: the open gates by kind, the oldest, per queue.

What waits for a person, read as a pass ends (for its notes and metrics) and by the status
page: the open gates by kind (count, oldest), the oldest open gates themselves, and how many
open gates wait on each dead-letter queue. Read from the open-gate index, so its cost is what
is open.

A dead-letter queue is **safe to clear** when the last pass read it safely and every letter on
it is parked from it (none new, none unread, none parked from another queue), and no open
gate waits on any of them: every letter has been answered. Clearing it stays a person's act;
the reaper only says so, and how.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Protocol
from uuid import UUID

from reaper.core.domain import GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED
from reaper.core.records import Gate
from reaper.jobqueue.port import GateCount, GateFilter, JobQueue, ParkedDeadLetter

__all__ = [
    "GATE_KINDS",
    "GateBoard",
    "ReadQueue",
    "SafeToClear",
    "board_of",
    "kinds_in",
    "purge_command",
    "safe_to_clear",
]

#: Every gate kind the reaper raises: the bounded label values of the gate gauges.
GATE_KINDS: Final = (GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED)

#: How many of the oldest open gates the board keeps for the status page.
BOARD_GATES: Final = 50


@dataclass(frozen=True)
class GateBoard:
    """The open gates as the database showed them at ``now`` (its clock)."""

    now: datetime
    counts: tuple[GateCount, ...]
    #: The oldest open gates (at most :data:`BOARD_GATES`), oldest first.
    oldest: tuple[Gate, ...] = ()
    #: What the dead-letter gates among them keep of their letters, by job.
    parked: Mapping[UUID, ParkedDeadLetter] = field(default_factory=dict)
    #: Per dead-letter queue, the open gates waiting on a letter read from it.
    waiting: Mapping[str, int] = field(default_factory=dict)

    def open_of(self, kind: str) -> GateCount | None:
        return next((c for c in self.counts if c.kind == kind), None)

    @property
    def total_open(self) -> int:
        return sum(c.open for c in self.counts)


class ReadQueue(Protocol):
    """What a pass found of one owned dead-letter queue, as far as clearing it goes (the
    pass's ``DeadLetterOutcome``)."""

    @property
    def queue(self) -> str: ...
    @property
    def depth(self) -> int: ...
    @property
    def parked_new(self) -> int: ...
    @property
    def already_parked(self) -> int: ...
    @property
    def unread(self) -> int: ...
    @property
    def read_blocked(self) -> str | None: ...
    @property
    def stale_pointers(self) -> int: ...
    @property
    def parked_here(self) -> int | None: ...


@dataclass(frozen=True)
class SafeToClear:
    """A dead-letter queue every letter of which is parked and answered."""

    queue: str
    letters: int
    command: str


def purge_command(queue: str, vhost: str) -> str:
    """The command a person runs to clear a dead-letter queue (never run by the reaper)."""
    return f"rabbitmqctl purge_queue {shlex.quote(queue)} -p {shlex.quote(vhost)}"


def safe_to_clear(
    outcomes: Iterable[ReadQueue], waiting: Mapping[str, int], vhost: str
) -> list[SafeToClear]:
    """The dead-letter queues a person may clear now (see the module docstring)."""
    found = []
    for d in outcomes:
        handled = d.already_parked + d.stale_pointers
        whole = d.read_blocked is None and d.unread == 0 and d.parked_new == 0
        # Only gates raised for letters read from this queue are counted in ``waiting``: a
        # letter parked from another queue (a copy a fanout made) would pass unanswered.
        here = d.parked_here is not None and d.parked_here >= d.depth
        if d.depth > 0 and whole and here and handled >= d.depth and waiting.get(d.queue, 0) == 0:
            found.append(SafeToClear(d.queue, d.depth, purge_command(d.queue, vhost)))
    return sorted(found, key=lambda s: s.queue)


async def board_of(store: JobQueue) -> GateBoard:
    """Read the board from ``store``."""
    facts = await store.database_facts()
    counts = await store.open_gate_counts()
    oldest = await store.list_gates(GateFilter(open_only=True, limit=BOARD_GATES)) if counts else []
    letters = [g.job_id for g in oldest if g.kind == GATE_BUS_DEAD_LETTERED and g.job_id]
    parked = await store.parked_dead_letters(letters) if letters else {}
    waiting = await store.open_dead_letter_gates() if counts else {}
    return GateBoard(facts.now, tuple(counts), tuple(oldest), dict(parked), dict(waiting))


def kinds_in(counts: Sequence[GateCount]) -> list[str]:
    """Every kind to export: the reaper's own, and any other a host raised."""
    return sorted({*GATE_KINDS, *(c.kind for c in counts)})
