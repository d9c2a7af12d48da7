"""Verdicts as the judges return them, for the tests of sightings, the ledger and the
dead letters: a project's stale job and a finding on a broker queue."""

from __future__ import annotations

import uuid
from typing import Any

from reaper.core.domain import Action, Condition, Source, Unit, Verdict

BOTH = frozenset({Source.JOB_QUEUE, Source.BROKER})


def stale(project: uuid.UUID, job: str = "job", age: int = 1000, detail: str = "") -> Verdict:
    """The project's oldest claimable job, ``age`` seconds unclaimed (threshold 900)."""
    return Verdict(
        source=Source.JOB_QUEUE,
        object=job,
        condition=Condition.STALE_READY,
        measured=age,
        threshold=900,
        unit=Unit.SECONDS,
        action=Action.SURFACE,
        project_id=project,
        detail=detail,
    )


def broker_finding(
    queue: str,
    condition: Condition = Condition.HOLDER_GONE,
    measured: float = 3,
    *,
    threshold: float = 0,
    unit: Unit = Unit.MESSAGES,
    trusted: bool = False,
    **more: Any,
) -> Verdict:
    """A finding on ``queue`` (by default: 3 messages held by a consumer that is gone)."""
    return Verdict(
        source=Source.BROKER,
        object=queue,
        condition=condition,
        measured=measured,
        threshold=threshold,
        unit=unit,
        action=Action.SURFACE,
        queue=queue,
        trusted=trusted,
        **more,
    )
