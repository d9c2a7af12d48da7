"""What a step of a pass found and did, and the small result types it is made of.

What a step of a pass found and did (:class:`Found`), and the small result types it is made
of. :func:`reaper.reap.run.run_pass` adds up its steps' and turns the sum into a
:class:`~reaper.reap.result.PassResult` at the end."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from reaper.core.domain import Action, Source, Verdict
from reaper.errors import ReaperError, SourceUnreadable, scrub

__all__ = [
    "SIGHTINGS_WRITE",
    "Found",
    "RecordedVerdict",
    "RowNotMoved",
    "Unreadable",
    "unreadable_from",
    "write_fix",
    "written",
]

T = TypeVar("T")

#: The write that records a pass's sightings, as NOT DONE names it when it fails.
SIGHTINGS_WRITE = "the sightings' ledger events"


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

    @property
    def applied(self) -> bool:
        """Whether the verdict's write committed: a move (requeue, park) or a clearance is
        recorded in the same transaction as its event, so recorded is committed. A surface
        writes nothing but its record, and a dry run writes nothing at all."""
        return self.recorded and self.verdict.action is not Action.SURFACE


@dataclass(frozen=True)
class RowNotMoved:
    """Something the pass meant to write and could not: a job whose move the database refused,
    a dead letter it could not park, or a move whose commit got no answer (``unknown``: it is
    either moved with its event or not at all; the next pass finds out)."""

    subject: str  # "job <id>" or "dead letter <identity>"
    reason: str
    unknown: bool = False

    @property
    def fix(self) -> str:
        """What a person does about it, where the database's reason says."""
        return write_fix(self.reason)


def write_fix(reason: str) -> str:
    """The fix for a write the database refused, read from its reason; empty when the reason
    names none (the next pass tries again)."""
    if "42501" in reason or "permission denied" in reason or "InsufficientPrivilege" in reason:
        table = re.search(r"permission denied for (?:table|relation|sequence) (\S+)", reason)
        what = f"on {table[1]}" if table else "on the tables the reaper writes"
        return (
            f"grant the reaper's database role INSERT and UPDATE {what} (it lacks the privilege: "
            "SQLSTATE 42501), or run the pass as a role that has them"
        )
    return ""


def unreadable_from(source: Source, exc: BaseException) -> Unreadable:
    """How a failure to read ``source`` reads in the report."""
    if isinstance(exc, ReaperError):
        return Unreadable(source.value, exc.reason)
    if isinstance(exc, TimeoutError):
        return Unreadable(source.value, f"reading the {source.value} timed out")
    return Unreadable(source.value, scrub(f"{type(exc).__name__}: {exc}"))


@dataclass(frozen=True)
class Found:
    """What one step of a pass found on its way, beside its own result: the sources it could
    not read, its notes, the verdicts it recorded (or could not) and the writes it could not
    make. Steps return it; the pass adds them up in the order the steps ran."""

    unreadable: tuple[Unreadable, ...] = ()
    notes: tuple[str, ...] = ()
    verdicts: tuple[RecordedVerdict, ...] = ()
    not_moved: tuple[RowNotMoved, ...] = ()

    def __add__(self, other: Found) -> Found:
        return Found(
            self.unreadable + other.unreadable,
            self.notes + other.notes,
            self.verdicts + other.verdicts,
            self.not_moved + other.not_moved,
        )

    @classmethod
    def failed(cls, exc: SourceUnreadable) -> Found:
        """A source that failed during the step: named, never raised."""
        return cls(unreadable=(Unreadable(exc.source, exc.reason),))

    @classmethod
    def noted(cls, *notes: str) -> Found:
        return cls(notes=notes)

    @classmethod
    def recorded(cls, verdicts: Iterable[Verdict], recorded: bool) -> Found:
        return cls(verdicts=tuple(RecordedVerdict(v, recorded) for v in verdicts))


async def written(awaitable: Awaitable[T], what: str) -> tuple[T | None, Found]:
    """Await a write: one that fails is named as not done (with the database's reason), never
    as a source that could not be read, since the source was read. None: it failed."""
    try:
        return await awaitable, Found()
    except SourceUnreadable as exc:
        return None, Found(not_moved=(RowNotMoved(what, exc.reason),))
