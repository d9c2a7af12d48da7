"""The human report's lines say only what happened: a cleared finding's line does not end at a
colon, a dry run's dead-letter line does not claim a read, a parked letter's line does not
quote its queue's depth as if it were the letter's."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from reaper.core.domain import Action, BrokerFacts, Condition, Source, Unit, Verdict
from reaper.edges.report import render_text, to_json
from reaper.reap.dead_letters import DeadLetterOutcome, DeadLettersOutcome
from reaper.reap.leases import LeaseReapOutcome
from reaper.reap.progress import RecordedVerdict
from reaper.reap.result import PassResult
from reaper.reap.sightings import SightingsOutcome
from tests.support.verdicts import broker_finding, stale_queue

T0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
FACTS = BrokerFacts("LavinMQ", "2.9.1", False, True, False, None)


def _result(*verdicts: Verdict, dry_run: bool = False, **extra: object) -> PassResult:
    return PassResult(
        dry_run=dry_run,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
        broker=FACTS,
        verdicts=tuple([RecordedVerdict(v, True) for v in verdicts]),
        **extra,  # type: ignore[arg-type]
    )


def _line(text: str, needle: str) -> str:
    [line] = [line for line in text.splitlines() if needle in line]
    return line


def test_a_cleared_finding_ends_with_its_queue_not_a_colon() -> None:
    cleared = broker_finding(
        "vibey.jobs.got", measured=None, threshold=None, action=Action.CLEARED, trusted=True
    )
    line = _line(render_text(_result(cleared)), "cleared")
    assert line.rstrip().endswith("queue vibey.jobs.got"), line


def test_a_parked_letter_does_not_quote_its_queues_depth() -> None:
    parked = Verdict(
        Source.BROKER,
        "0b7c4c1e-3f7a-4e39-9a67-2d6f1f0f6a11",
        Condition.DEAD_LETTER,
        4,
        1,
        Unit.MESSAGES,
        Action.PARK,
        queue="vibey.jobs.dead",
    )
    line = _line(render_text(_result(parked)), "park ")
    assert "from queue vibey.jobs.dead" in line
    assert "4 messages" not in line and "threshold" not in line, line


def test_letters_left_unparked_are_counted_without_a_threshold() -> None:
    remainder = broker_finding(
        "vibey.lim.dead",
        Condition.DEAD_LETTER,
        2,
        detail="2 dead letter(s) not parked (at least 1): reading it would spend a delivery",
        bucket=1,
        trusted=True,
    )
    line = _line(render_text(_result(remainder)), "vibey.lim.dead")
    assert "queue vibey.lim.dead: 2 messages" in line
    assert "threshold" not in line, line


def test_a_dry_runs_dead_letter_line_says_nothing_was_read() -> None:
    outcome = DeadLetterOutcome("vibey.jobs.dead", 4, 0, 0, 4, None)
    # the short form lists no dead-letter queue in a dry run (its note says what a pass would
    # read); the long form does, and must not claim a read
    assert "vibey.jobs.dead" not in render_text(
        _result(dry_run=True, dead_letters=DeadLettersOutcome((outcome,)))
    )
    text = render_text(
        _result(dry_run=True, dead_letters=DeadLettersOutcome((outcome,))), wide=True
    )
    line = _line(text, "vibey.jobs.dead: depth 4")
    assert "read safely" not in line
    assert "not read (a dry run reads nothing)" in line
    real = _line(
        render_text(_result(dead_letters=DeadLettersOutcome((outcome,)))),
        "vibey.jobs.dead: depth 4",
    )
    assert real.endswith("read safely")


def test_a_finding_already_on_record_says_since_when_in_text_and_json() -> None:
    stale = stale_queue("vibey.webhooks", 3600, trusted=True)
    older = replace(stale, object="vibey.old", queue="vibey.old")
    fresh = replace(stale, object="vibey.new", queue="vibey.new")
    since = {
        stale.sighting_key: T0 - timedelta(hours=2),
        older.sighting_key: T0 - timedelta(days=3),
    }
    result = PassResult(
        dry_run=False,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
        broker=FACTS,
        verdicts=(
            (
                RecordedVerdict(stale, False),
                RecordedVerdict(older, False),
                RecordedVerdict(fresh, True),
            )
        ),
        leases=LeaseReapOutcome(expired=0),  # the ledger was read
        sightings=SightingsOutcome(since=since),
    )
    text = render_text(result)
    assert _line(text, "vibey.webhooks").endswith("[seen since 20:00Z]")
    assert _line(text, "vibey.old").endswith("[seen since 2026-11-28 22:00Z]")
    assert _line(text, "vibey.new").endswith("[new]")
    found = {f["subject"]: f["since"] for f in to_json(result)["findings"]}  # type: ignore[attr-defined]
    assert found == {
        "vibey.webhooks": "2026-12-01T20:00:00.000Z",
        "vibey.old": "2026-11-28T22:00:00.000Z",
        "vibey.new": None,
    }
