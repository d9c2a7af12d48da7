"""A realistic scenario, seeded on both sides of a job queue.

It is what `reaper demo` shows, what the dry-run proof audits, and what chaos and load tests
start from. :func:`reaper.demo.seed.seed` writes into a database and a vhost the caller made for
it (migrated, empty) and returns a :class:`Scenario` naming everything it put there and what a
real pass must do with it (:attr:`Scenario.expected`). Every time is relative to the ``now``
given, and every age is scaled to the configured thresholds, so a first real pass finds each
condition and a second pass soon after finds nothing new. What is seeded on each side, and what
is left out (what only a live AMQP consumer can produce), is in ``docs/architecture.md`` ("The
demo").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from reaper.core.domain import BrokerFacts

__all__ = [
    "DELAY_TTL_MS",
    "PROJECT_NAMES",
    "Expected",
    "Scenario",
    "SeededLetter",
    "SeededProject",
]

#: The projects' names, in order; past these, ``p<n>``.
PROJECT_NAMES = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")

#: The delay tier's message TTL (5 minutes).
DELAY_TTL_MS = 300_000


@dataclass(frozen=True)
class SeededProject:
    name: str
    id: UUID
    #: Its quorum work queue on the broker.
    work_queue: str
    #: False for the project nobody works on.
    has_worker: bool


@dataclass(frozen=True)
class SeededLetter:
    """A dead letter published to the owned dead-letter queue."""

    message_id: str | None
    body: str
    is_json: bool
    origin_queue: str
    reason: str


@dataclass(frozen=True)
class Expected:
    """What a real pass over the fresh scenario must do (and a dry run must only report)."""

    #: Job ids requeued (``lease_expired``).
    requeued: frozenset[str]
    #: Job ids parked (``poison``).
    parked: frozenset[str]
    #: Project id -> the job surfaced as its stale claimable head (``stale_ready``).
    stale_heads: Mapping[str, str]
    #: ``(condition, queue)`` of every broker verdict surfaced.
    surfaced_queues: frozenset[tuple[str, str]]
    #: Owned dead-letter queue -> how many dead letters a pass parks from it.
    parked_dead_letters: Mapping[str, int]
    #: The policy a real pass updates (drifted), if any.
    updated_policy: str | None


@dataclass(frozen=True)
class Scenario:
    now: datetime
    vhost: str
    broker: BrokerFacts
    projects: tuple[SeededProject, ...]
    #: Every job row inserted.
    jobs: int
    expired_leases: tuple[UUID, ...]
    poison: tuple[UUID, ...]
    #: Leased, not expired: left alone.
    live_leases: tuple[UUID, ...]
    #: Project id -> the job that is its stale claimable head.
    stale_heads: Mapping[UUID, UUID]
    #: Ready and due, but a dependency is still running: not claimable.
    not_claimable: tuple[UUID, ...]
    #: Ready and due, recently: claimable, not stale.
    fresh_ready: tuple[UUID, ...]
    #: Every queue declared: name -> type.
    queues: Mapping[str, str]
    #: Messages published per queue.
    messages: Mapping[str, int]
    dead_letter_queue: str
    dead_letters: tuple[SeededLetter, ...]
    #: Queues of another tenant: never read, never touched.
    foreign_queues: tuple[str, ...]
    foreign_dead_letter_queue: str
    #: Queues whose head message is older than the threshold, with no consumer.
    stale_queues: tuple[str, ...]
    delay_queue: str
    #: The policies written as a first reconcile would, and the one then changed by hand.
    policies_written: tuple[str, ...]
    drifted_policy: str | None
    drift: str = ""

    @property
    def no_worker_project(self) -> SeededProject:
        return next(p for p in self.projects if not p.has_worker)

    @property
    def expected(self) -> Expected:
        surfaced = {("stale_ready", q) for q in self.stale_queues}
        surfaced.add(("dead_letter", self.foreign_dead_letter_queue))
        # where the version enforces no consumer timeout on classic queues (4.3), each owned
        # classic queue is unbounded: the reaper's own observation is its guard
        enforcement = self.broker.timeout_enforcement("classic")
        if enforcement is None or not enforcement.enforced:
            foreign = {*self.foreign_queues, self.foreign_dead_letter_queue}
            surfaced |= {
                ("unbounded", name)
                for name, kind in self.queues.items()
                if kind == "classic" and name not in foreign
            }
        return Expected(
            requeued=frozenset(str(j) for j in self.expired_leases),
            parked=frozenset(str(j) for j in self.poison),
            stale_heads={str(p): str(j) for p, j in self.stale_heads.items()},
            surfaced_queues=frozenset(surfaced),
            parked_dead_letters={self.dead_letter_queue: len(self.dead_letters)},
            updated_policy=self.drifted_policy,
        )

    def describe(self) -> list[str]:
        """A few lines saying what was seeded, for a person."""
        worker = [p.name for p in self.projects if p.has_worker]
        idle = [p.name for p in self.projects if not p.has_worker]
        queues = [
            f"{name} ({kind}, {self.messages.get(name, 0)}{_queue_role(self, name)})"
            for name, kind in self.queues.items()
        ]
        return [
            f"PostgreSQL: {self.jobs} jobs in {len(self.projects)} projects "
            f"({', '.join(worker)} with workers; {', '.join(idle)} with none): "
            + ", ".join(f"{p.name} {str(p.id)[:8]}" for p in self.projects),
            f"  {len(self.expired_leases)} expired leases, {len(self.poison)} poison, "
            f"{len(self.live_leases)} live leases, {len(self.fresh_ready)} fresh ready, "
            f"{len(self.stale_heads)} stale claimable heads (one behind an old dependency), "
            f"{len(self.not_claimable)} waiting on a running dependency",
            f"{self.broker.name}, vhost {self.vhost!r}: {len(self.queues)} queues "
            "(type, messages, role):",
            *_wrapped(queues, "  "),
            "  policies: "
            + (", ".join(self.policies_written) or "none writable on this version")
            + (f"; drifted by hand: {self.drift}" if self.drifted_policy else ""),
        ]


def _wrapped(items: list[str], pad: str, width: int = 156) -> list[str]:
    """``items`` joined by ``; `` on as few lines of ``width`` as they fit."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) <= width:
            lines[-1] += f"; {item}"
        else:
            lines.append(pad + item)
    return lines


def _queue_role(scenario: Scenario, name: str) -> str:
    if name == scenario.dead_letter_queue:
        return ", owned dead letters, JSON and not"
    if name == scenario.foreign_dead_letter_queue:
        return ", foreign dead letters"
    if name in scenario.foreign_queues:
        return ", foreign, no consumer, old"
    if name == scenario.delay_queue:
        return f", delay tier, ttl {DELAY_TTL_MS // 1000} s"
    if name in scenario.stale_queues:
        return ", owned, no consumer, old"
    idle = scenario.no_worker_project.work_queue
    return ", work, no worker" if name == idle else ", work"
