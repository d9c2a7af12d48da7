"""What the ledger holds, as the reaper reads it back: a gate, and one event of a stream.

What the ledger holds, as the reaper reads it back: a gate a person answers, and one event
of a stream. Frozen values, like the rest of :mod:`reaper.core`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

__all__ = ["Gate", "LedgerEvent"]


@dataclass(frozen=True)
class Gate:
    """A ``human_gate`` row: a question a person answers (a parked job waits on it)."""

    id: UUID
    project_id: UUID
    job_id: UUID | None
    kind: str
    prompt: str
    choices: tuple[str, ...]
    answer: str | None
    answered_at: datetime | None
    identity: str | None
    created_at: datetime
    answered_by: str | None = None
    #: The job's later gate, when the job has been parked again since: this one answers
    #: nothing any more (a gate answers only itself). Filled in by a listing.
    superseded_by: UUID | None = None
    #: The kind of the job it parks (filled in by a listing).
    job_kind: str | None = None

    @property
    def is_open(self) -> bool:
        return self.answered_at is None


@dataclass(frozen=True)
class LedgerEvent:
    """One ledger ``event`` row: ``seq`` is gapless per ``project_id`` (its stream), and
    ``digest`` is the sha256 of the payload's canonical JSON as written."""

    project_id: UUID
    seq: int
    kind: str
    payload: Mapping[str, Any]
    digest: str
    trusted: bool
    created_at: datetime
