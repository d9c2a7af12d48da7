"""Verdicts to record as sightings, shared by the ledger's sighting tests
(``test_sightings_ledger.py``, ``test_open_sightings.py``)."""

from __future__ import annotations

import uuid

from reaper.core.domain import Action, Condition, Source, Unit, Verdict

BOTH = frozenset({Source.JOB_QUEUE, Source.BROKER})


def stale(project: uuid.UUID, job: str = "job", age: int = 1000) -> Verdict:
    return Verdict(
        source=Source.JOB_QUEUE,
        object=job,
        condition=Condition.STALE_READY,
        measured=age,
        threshold=900,
        unit=Unit.SECONDS,
        action=Action.SURFACE,
        project_id=project,
    )


def broker_finding(queue: str, condition: Condition = Condition.HOLDER_GONE) -> Verdict:
    return Verdict(
        source=Source.BROKER,
        object=queue,
        condition=condition,
        measured=3,
        threshold=0,
        unit=Unit.MESSAGES,
        action=Action.SURFACE,
        queue=queue,
        trusted=False,
    )
