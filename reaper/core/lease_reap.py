"""A lease reap in values: the question a pass asks, and the store's answer in a few numbers.

The question is a :class:`LeaseReapRun`; the answer, a :class:`LeaseReap`, holds a few numbers
a batch, never a value a lease (:mod:`reaper.jobqueue.port` words the job queue with them)."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final
from uuid import UUID

from reaper.core.domain import Dispatch

__all__ = ["FIRST_KEY", "LeaseKey", "LeaseReap", "LeaseReapRun"]

#: Before a lease reap's first batch: every lease's key (its expiry, its job) sorts after it.
FIRST_KEY: Final = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))


def _never() -> bool:
    return False


@dataclass(frozen=True)
class LeaseReapRun:
    """One lease reap as the pass asks for it: rule on every lease expired past the grace at
    ``now`` (of ``project_id`` alone, or all), and (``write``) move each; until ``deadline``
    (by ``monotonic``) has passed or ``stopping()`` (asked after each batch)."""

    now: datetime
    grace_seconds: int
    project_id: UUID | None
    dispatch: Dispatch
    write: bool
    deadline: float = math.inf
    monotonic: Callable[[], float] = time.monotonic
    stopping: Callable[[], bool] = _never


#: A lease's key, as a lease reap orders and pages them: its expiry, its job.
LeaseKey = tuple[datetime, UUID]


@dataclass
class LeaseReap:
    """What a lease reap did (a dry run: would do), in a few numbers a batch, never a value a
    lease: moves per (project, poison), the oldest and newest expiry moved per poison, the
    leases named instead of moved (and why), the leases whose commit got no answer, whether
    the time budget stopped it, and where its moves can be read again: per stream, the runs of
    event numbers it appended (first, last; adjacent runs merged), and (a dry run) per lane of
    ``lanes`` the key of the last lease it ruled on."""

    moves: Counter[tuple[UUID, bool]] = field(default_factory=Counter)
    spans: dict[bool, tuple[datetime, datetime]] = field(default_factory=dict)
    failed: list[tuple[UUID, str]] = field(default_factory=list)
    unknown: int = 0
    stopped: bool = False
    runs: dict[UUID, list[tuple[int, int]]] = field(default_factory=dict)
    lanes: dict[tuple[int, int], LeaseKey] = field(default_factory=dict)

    @property
    def moved(self) -> int:
        return sum(self.moves.values())

    @property
    def oldest(self) -> datetime | None:
        return min((old for old, _ in self.spans.values()), default=None)

    @property
    def newest(self) -> datetime | None:
        return max((new for _, new in self.spans.values()), default=None)

    def add(self, moves: Iterable[tuple[UUID, bool, int, datetime, datetime]]) -> None:
        """A batch's moves: (project, poison, how many, oldest and newest expiry) each."""
        for project, poison, n, oldest, newest in moves:
            self.moves[(project, poison)] += n
            old, new = self.spans.get(poison, (oldest, newest))
            self.spans[poison] = (min(old, oldest), max(new, newest))

    def appended(self, stream: UUID, first: int, last: int) -> None:
        """Events ``first`` to ``last`` of ``stream`` were appended by this reap."""
        runs = self.runs.setdefault(stream, [])
        if runs and runs[-1][1] + 1 == first:
            runs[-1] = (runs[-1][0], last)
        else:
            runs.append((first, last))
