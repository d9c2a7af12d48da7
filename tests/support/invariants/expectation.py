"""What a proof test seeded (:class:`Seeded`, its lease :class:`Episode` s) and what the checks
counted (:class:`Summary`), with the names of the queues the scenarios use."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import reaper
from reaper.core.domain import (
    GATE_DELIVERY_EXHAUSTED,
)

#: The directory holding the ``reaper`` package this test process imported: the processes a
#: test starts run that very code.
PACKAGE_ROOT = str(Path(reaper.__file__).resolve().parents[1])

#: How often ``run_reaper`` asks its ``kill_when`` whether to kill the process now.
KILL_POLL_SECONDS = 0.005

#: Requests at once when publishing through the management API (no batch publish there).
PUBLISHERS = 8

#: How long the broker's statistics may lag behind what a queue holds.
STATS_WAIT_SECONDS = 30.0

#: The default owned quorum dead-letter queue and the classic queue its letters died on.
OWNED_DLQ = "vibey.jobs.dead"
OWNED_ORIGIN = "vibey.jobs"
#: A foreign dead-letter queue: surfaced, never read, never touched.
FOREIGN_DLQ = "celery.dead"

DEAD_LETTER_PREFIX = "dead_letter:"


@dataclass(frozen=True)
class Episode:
    """One lease a test seeded as expired: the reaper must move it exactly once."""

    job_id: uuid.UUID
    project_id: uuid.UUID
    lease_owner: str | None
    lease_expires_at: datetime
    attempts: int
    max_attempts: int

    @property
    def action(self) -> str:
        return "park" if self.attempts >= self.max_attempts else "requeue"

    @property
    def condition(self) -> str:
        return "poison" if self.action == "park" else "lease_expired"

    @property
    def gate_identity(self) -> str:
        expired = self.lease_expires_at.astimezone(UTC).isoformat()
        return f"{GATE_DELIVERY_EXHAUSTED}:{self.job_id}:{expired}"


@dataclass
class Seeded:
    """What a proof test seeded, and so what the invariants expect."""

    #: Each seeded job's lease episodes, in the order they were seeded.
    episodes: dict[uuid.UUID, list[Episode]] = field(default_factory=dict)
    #: Owned dead-letter queue -> every body it holds (distinct bodies).
    dead_letters: dict[str, list[str]] = field(default_factory=dict)
    #: Queue -> how many messages it holds, for queues the reaper must never read nor touch
    #: (a foreign tenant's, an owned consumerless backlog): depth unchanged, nothing
    #: redelivered.
    untouched: dict[str, int] = field(default_factory=dict)

    @property
    def all_episodes(self) -> list[Episode]:
        return [e for episodes in self.episodes.values() for e in episodes]

    def expected_moves(self) -> Counter[str]:
        return Counter(e.action for e in self.all_episodes)

    @property
    def dead_letter_count(self) -> int:
        return sum(len(bodies) for bodies in self.dead_letters.values())


@dataclass
class Summary:
    """What :func:`check_invariants` counted (for non-vacuity assertions and reports)."""

    events: int = 0
    streams: int = 0
    lease_events: Counter[str] = field(default_factory=Counter)
    episodes_moved: int = 0
    episodes_pending: int = 0
    delivery_exhausted_gates: int = 0
    dead_letter_gates: int = 0
    dead_letter_parks: int = 0
    sightings: Counter[str] = field(default_factory=Counter)
    dead_letters_on_broker: dict[str, int] = field(default_factory=dict)
    untouched_on_broker: dict[str, int] = field(default_factory=dict)
