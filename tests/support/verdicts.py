"""Verdicts as the judges return them, for the tests of sightings, the ledger and the
dead letters: a project's stale job, a finding on a broker queue, and any verdict at all."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

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


#: A measurement or threshold as a judge gives it: none, an integer (past 64 bits too) or
#: any finite float.
MEASURES = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
#: ... and as a payload may carry it: a boolean too (JSON's, not a number).
NUMBERS = MEASURES | st.booleans()


def verdicts(
    action: st.SearchStrategy[Action] | None = None, numbers: st.SearchStrategy[Any] = NUMBERS
) -> st.SearchStrategy[Verdict]:
    """Any verdict (of ``action``'s actions, else any action; measured and threshold from
    ``numbers``): every source, condition and unit; texts of any characters; a project or
    none."""
    text = st.text(max_size=30)
    return st.builds(
        Verdict,
        source=st.sampled_from(Source),
        object=text,
        condition=st.sampled_from(Condition),
        measured=numbers,
        threshold=numbers,
        unit=st.sampled_from(Unit),
        action=st.sampled_from(Action) if action is None else action,
        queue=st.none() | text,
        project_id=st.none() | st.uuids(),
        detail=text,
    )
