"""Every report validates against the shipped JSON Schema, and the human report puts
problems first."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from importlib import resources
from uuid import UUID

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from reaper.core.domain import Action, BrokerFacts, Condition, Source, Unit, Verdict
from reaper.edges.report import render_text, to_json
from reaper.policies.reconcile import PolicyOutcome
from reaper.reap.dead_letters import DeadLetterOutcome
from reaper.reap.progress import RecordedVerdict, Unreadable
from reaper.reap.result import PassResult

SCHEMA = json.loads(resources.files("reaper.edges").joinpath("schema/report.json").read_text())
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FACTS = BrokerFacts("RabbitMQ", "4.0.5", True, True, True, 20, 21600000, "test")

verdicts = st.builds(
    Verdict,
    source=st.sampled_from(Source),
    object=st.text(max_size=40),
    condition=st.sampled_from(Condition),
    measured=st.one_of(st.none(), st.integers(-10, 10**6), st.floats(0, 1e6)),
    threshold=st.one_of(st.none(), st.integers(0, 10**6)),
    unit=st.sampled_from(Unit),
    action=st.sampled_from(Action),
    queue=st.one_of(st.none(), st.text(max_size=40)),
    project_id=st.one_of(st.none(), st.uuids()),
    detail=st.text(max_size=80),
    trusted=st.booleans(),
)


def result(**kwargs: object) -> PassResult:
    base: dict[str, object] = {
        "dry_run": False,
        "started_at": T0,
        "finished_at": T0 + timedelta(seconds=1),
        "broker": FACTS,
        "verdicts": (),
    }
    base.update(kwargs)
    return PassResult(**base)  # type: ignore[arg-type]


@settings(deadline=None)  # jsonschema's first validation compiles the schema
@given(
    st.lists(st.tuples(verdicts, st.booleans()), max_size=8),
    st.booleans(),
    st.booleans(),
)
def test_every_report_validates_against_the_schema(
    items: list[tuple[Verdict, bool]], dry_run: bool, broker_known: bool
) -> None:
    r = result(
        dry_run=dry_run,
        broker=FACTS if broker_known else None,
        verdicts=tuple(RecordedVerdict(v, rec) for v, rec in items),
        policies=(PolicyOutcome("vibey-reap-quorum", "updated", True, 3, (), "restored"),),
        dead_letters=(DeadLetterOutcome("vibey.jobs.dead", 5, 2, 3, 0, None),),
        unreadable=() if broker_known else (Unreadable("broker", "connection refused"),),
        notes=("a note",),
    )
    report = to_json(r)
    jsonschema.validate(report, SCHEMA)
    assert report["ok"] is broker_known
    render_text(r)  # total


def test_problems_come_first_and_name_numbers_against_thresholds() -> None:
    stale = Verdict(
        Source.JOB_QUEUE,
        "job-1",
        Condition.STALE_READY,
        1200.5,
        900,
        Unit.SECONDS,
        Action.SURFACE,
        project_id=UUID(int=7),
    )
    moved = Verdict(
        Source.JOB_QUEUE,
        "job-2",
        Condition.LEASE_EXPIRED,
        30,
        0,
        Unit.SECONDS,
        Action.REQUEUE,
        project_id=UUID(int=7),
    )
    text = render_text(
        result(
            verdicts=(RecordedVerdict(moved, True), RecordedVerdict(stale, True)),
            unreadable=(Unreadable("job_queue", "connection refused"),),
        )
    )
    lines = text.splitlines()
    assert "NOT OK" in lines[0]
    problems = lines.index("Problems (2):")
    done = lines.index("Done (1):")
    assert problems < done
    assert any("UNREADABLE  job_queue: connection refused" in line for line in lines[problems:done])
    assert any(
        "stale_ready" in line and "1200.5 seconds (threshold 900)" in line
        for line in lines[problems:done]
    )
    assert any("requeue" in line and "job-2" in line for line in lines[done:])


def test_a_dry_run_says_it_wrote_nothing() -> None:
    text = render_text(result(dry_run=True))
    assert "dry-run audit (nothing written)" in text.splitlines()[0]
    assert "Would do (0):" in text
