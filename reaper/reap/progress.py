"""What one pass has found and done so far: the record each step adds to, and the small result
types it is made of. :func:`reaper.reap.run.run_pass` turns it into a
:class:`~reaper.reap.result.PassResult` at the end."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from reaper.core.domain import Source, Verdict
from reaper.errors import ReaperError, SourceUnreadable, scrub

__all__ = ["Progress", "RecordedVerdict", "RowNotMoved", "Unreadable", "unreadable_from"]

T = TypeVar("T")


@dataclass(frozen=True)
class Unreadable:
    """A source the pass could not read (or that failed part-way), or with ``queue`` one queue
    of the broker it could not measure (its node is down, its replicas lost their majority):
    nothing is concluded from it, and the pass is not ok."""

    source: str
    error: str
    queue: str | None = None


@dataclass(frozen=True)
class RecordedVerdict:
    """A verdict, and whether its ledger event was written by this pass."""

    verdict: Verdict
    recorded: bool


@dataclass(frozen=True)
class RowNotMoved:
    """Something the pass meant to write and could not: a job whose move the database refused,
    a dead letter it could not park, or a move whose commit got no answer (``unknown``: it is
    either moved with its event or not at all; the next pass finds out)."""

    subject: str  # "job <id>" or "dead letter <identity>"
    reason: str
    unknown: bool = False


def unreadable_from(source: Source, exc: BaseException) -> Unreadable:
    """How a failure to read ``source`` reads in the report."""
    if isinstance(exc, ReaperError):
        return Unreadable(source.value, exc.reason)
    if isinstance(exc, TimeoutError):
        return Unreadable(source.value, f"reading the {source.value} timed out")
    return Unreadable(source.value, scrub(f"{type(exc).__name__}: {exc}"))


@dataclass
class Progress:
    """The pass's record so far: what it found on its way, what it wrote, what it could not."""

    unreadable: list[Unreadable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdicts: list[RecordedVerdict] = field(default_factory=list)
    not_moved: list[RowNotMoved] = field(default_factory=list)

    async def guarded(self, awaitable: Awaitable[T]) -> T | None:
        """Await a step against a source; a source failing mid-pass is named, never raised."""
        try:
            return await awaitable
        except SourceUnreadable as exc:
            self.unreadable.append(Unreadable(exc.source, exc.reason))
            return None

    def record(self, verdicts: list[Verdict], recorded: bool) -> None:
        self.verdicts.extend(RecordedVerdict(v, recorded) for v in verdicts)
