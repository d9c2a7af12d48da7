"""Verdicts as the judges return them, for the tests of sightings, the ledger and the
dead letters: a project's stale job and a finding on a broker queue."""

from __future__ import annotations

import uuid
from typing import Any

from reaper.core.domain import Action, Condition, Source, Unit, Verdict

BOTH = frozenset({Source.JOB_QUEUE, Source.BROKER})


def stale(project: uuid.UUID, job: str = "job", age: float = 1000, detail: str = "") -> Verdict:
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
    measured: float | None = 3,
    *,
    threshold: float | None = 0,
    unit: Unit = Unit.MESSAGES,
    action: Action = Action.SURFACE,
    trusted: bool = False,
    **more: Any,
) -> Verdict:
    """A finding on ``queue`` (by default: 3 messages held by a consumer that is gone, to
    surface, read from a broker not trusted)."""
    return Verdict(
        source=Source.BROKER,
        object=queue,
        condition=condition,
        measured=measured,
        threshold=threshold,
        unit=unit,
        action=action,
        queue=queue,
        trusted=trusted,
        **more,
    )


def stale_queue(queue: str, age: float = 2000, **more: Any) -> Verdict:
    """``queue``'s head message ``age`` seconds old (threshold 900): a broker finding."""
    return broker_finding(
        queue, Condition.STALE_READY, age, threshold=900, unit=Unit.SECONDS, **more
    )
