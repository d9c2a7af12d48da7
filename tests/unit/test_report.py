"""Every report validates against the shipped JSON Schema, and the human report puts
problems first."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from reaper.broker.port import BrokerPolicy
from reaper.core.domain import Action, BrokerFacts, Condition, Source, Unit, Verdict
from reaper.edges.report import render_text, to_json
from reaper.policies.declarations import PolicyParameters, load_declarations
from reaper.policies.reconcile import PolicyOutcome, reconcile
from reaper.policies.render import render
from reaper.reap.dead_letters import DeadLetterOutcome, DeadLettersOutcome
from reaper.reap.policies import PoliciesOutcome
from reaper.reap.progress import RecordedVerdict, RowNotMoved, Unreadable
from reaper.reap.result import PassResult
from reaper.reap.sightings import GatesOutcome
from tests.support.cli import validate_report
from tests.support.fake_broker import FakeBroker
from tests.support.lease_moves import every_move
from tests.support.queues import queue_stats
from tests.support.verdicts import broker_finding
from tests.support.verdicts import stale as stale_job

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


@settings(deadline=None)  # validation time varies with the machine's load
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
        verdicts=tuple(tuple(RecordedVerdict(v, rec) for v, rec in items)),
        policies=PoliciesOutcome(
            (PolicyOutcome("vibey-reap-quorum", "updated", True, 3, (), "restored"),)
        ),
        dead_letters=DeadLettersOutcome((DeadLetterOutcome("vibey.jobs.dead", 5, 2, 3, 0, None),)),
        unreadable=() if broker_known else (Unreadable("broker", "connection refused"),),
        notes=("a note",),
    )
    report = to_json(r)
    validate_report(report)
    assert report["ok"] is broker_known
    render_text(r)  # total


def test_problems_come_first_and_name_numbers_against_thresholds() -> None:
    stale = stale_job(UUID(int=7), "job-1", 1200.5)
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
            verdicts=((RecordedVerdict(moved, True), RecordedVerdict(stale, True))),
            unreadable=(Unreadable("job_queue", "connection refused"),),
        )
    )
    lines = text.splitlines()
    assert lines[0].startswith("queue-reaper pass: NOT OK: 1 source unreadable   ")
    problems = lines.index("NOT OK (1):")
    findings = lines.index("Findings (1), worst first:")
    done = lines.index("Done (1):")
    assert problems < findings < done
    assert lines[problems + 1] == "  UNREADABLE  job_queue: connection refused"
    # the measurement against its threshold, said once, readable, with the next step
    assert lines[findings + 1] == (
        "  stale_ready  job job-1 (project 00000000): 20 m (threshold 15 m); no worker claims "
        "it: check the project's workers  [new]"
    )
    assert (
        lines[done + 1] == "  requeue  lease_expired job job-2 (project 00000000): expired 30 s ago"
    )


def test_a_dry_run_says_it_wrote_nothing() -> None:
    text = render_text(result(dry_run=True))
    assert text.splitlines()[0].startswith("queue-reaper dry-run audit (nothing written): OK   ")
    assert "Would do" not in text and "Done" not in text
    assert text.endswith("\nNothing found, nothing to do.")


async def test_a_policy_write_is_listed_whole_under_would_do_and_under_done() -> None:
    # drifted on both its keys: the line names both, before the write and after it
    broker = FakeBroker(version="4.0.5")
    broker.queues["vibey.jobs.main"] = queue_stats(
        "vibey.jobs.main", consumers=1, arguments={"x-dead-letter-exchange": "dlx"}
    )
    broker.policies["vibey-reap-quorum"] = BrokerPolicy(
        "vibey-reap-quorum",
        "^vibey\\.",
        "quorum_queues",
        0,
        {"delivery-limit": 100, "consumer-timeout": 1},
    )
    desired = render(
        load_declarations(), PolicyParameters(), await broker.facts(), await broker.list_queues()
    )

    def quorum(outcomes: tuple[PolicyOutcome, ...]) -> tuple[PolicyOutcome, ...]:
        return tuple(o for o in outcomes if o.name == "vibey-reap-quorum")

    def under(r: PassResult, heading: str) -> list[str]:
        lines = render_text(r).splitlines()
        at = lines.index(heading)
        return list(itertools.takewhile(lambda line: line.startswith("  "), lines[at + 1 :]))

    planned = quorum((await reconcile(broker, desired, dry_run=True)).outcomes)
    [would] = under(result(dry_run=True, policies=PoliciesOutcome(planned)), "Would do (1):")
    assert would.startswith("  update   policy        vibey-reap-quorum: ")
    assert "delivery-limit 100 → 20" in would and "consumer-timeout 1 → 21600000" in would

    written = quorum((await reconcile(broker, desired, verify_wait_seconds=0)).outcomes)
    [done] = under(result(policies=PoliciesOutcome(written)), "Done (1):")
    assert done == would
    [shown] = to_json(result(policies=PoliciesOutcome(written)))["policies"]
    assert (shown["write"], shown["change"]) == ("update", done.split(": ", 1)[1])
    assert "would" not in shown["detail"]


def _lease_result(expired: int, poison: int) -> PassResult:
    """A pass that moved ``expired`` leases over three projects and parked ``poison``."""
    from reaper.core.domain import HeldLease, Thresholds
    from reaper.core.judge_leases import judge_lease_page
    from tests.support.lease_moves import lease_outcome

    projects = [UUID(int=p + 1) for p in range(3)]
    rows = [
        HeldLease(
            UUID(int=1000 + n),
            projects[n % 3] if n % 3 != 2 or n < 6 else projects[0],
            "build",
            f"worker-{n % 4}",
            T0 - timedelta(seconds=n + 1),
            7 if n >= expired else 1,
            7,
        )
        for n in range(expired + poison)
    ]
    verdicts = judge_lease_page(rows, Thresholds(), T0)
    return result(leases=lease_outcome(verdicts, T0))


def test_many_lease_moves_are_summarised_and_the_summary_says_what_it_left_out() -> None:
    r = _lease_result(expired=40, poison=3)
    text = render_text(r)
    lines = text.splitlines()
    assert "Done (43):" in lines
    summary = next(i for i, line in enumerate(lines) if "lease_expired 40 job(s)" in line)
    assert " ".join(lines[summary].split()) == (
        "requeue lease_expired 40 job(s) in 3 project(s), expired 1 s to 40 s ago"
    )
    # the per-project counts add up to every move, the project with the most first
    assert len(lines[summary + 1].split("by project: ")[1].split(", ")) == 3
    parts = lines[summary + 1].split("by project: ")[1].split(", ")
    counts = [int(part.rsplit(" ", 1)[1]) for part in parts]
    assert sum(counts) == 40 and counts == sorted(counts, reverse=True)
    first = lines[summary + 2 : summary + 7]
    assert [line.split()[1] for line in first] == [str(UUID(int=1000 + n))[:8] for n in range(5)]
    # every verdict is in the ledger: the summary points there, never at a new pass
    assert lines[summary + 7].strip() == (
        "35 more not listed here; each is a QueueReaped event in the ledger: "
        "reaper events --condition lease_expired --limit 40"
    )
    # -o wide: every move on a line of its own, whole ids, nothing "not listed"
    wide = render_text(r, wide=True, listed=every_move(r.leases.listing))
    assert "not listed" not in wide
    listed = [
        line for line in wide.splitlines() if line.split()[:2] == ["requeue", "lease_expired"]
    ]
    assert [line.split()[3] for line in listed] == [str(UUID(int=1000 + n)) for n in range(40)]
    # a dry run wrote nothing: it says what a real pass would do
    dry = render_text(replace(r, dry_run=True)).splitlines()
    assert dry[summary + 7].strip() == (
        "35 more not listed here: `reaper reap --dry-run -o wide` lists every one; "
        "a real pass would record each as a QueueReaped event"
    )
    # a condition with few moves is listed in full, one line each
    parks = [line for line in lines if line.split()[:2] == ["park", "poison"]]
    assert len(parks) == 3
    assert len(lines) < 25


def test_a_pass_that_parks_more_than_it_lists_names_the_command_that_lists_every_gate() -> None:
    r = _lease_result(expired=0, poison=20)
    gates = {str(UUID(int=1000 + n)): UUID(int=(0xABC0 + n) << 96) for n in range(20)}
    r = replace(r, gates=GatesOutcome(gates))
    lines = render_text(r).splitlines()
    summary = next(i for i, line in enumerate(lines) if "poison        20 job(s)" in line)
    # each job the summary lists names its gate
    for n, line in enumerate(lines[summary + 2 : summary + 7]):
        assert line.strip().startswith(f"job {str(UUID(int=1000 + n))[:8]} ")
        assert line.endswith(f"; gate {str(gates[str(UUID(int=1000 + n))])[:8]}")
    since = "2026-11-29T12:00:00.000Z"  # the pass's instant: every gate it raised carries it
    assert [line.strip() for line in lines[summary + 7 : summary + 10]] == [
        "15 more not listed here; each is a QueueReaped event in the ledger: "
        "reaper events --condition poison --limit 20",
        f"their gates: reaper gates list --kind poison --since {since} (with any raised since)",
        f"answer them at once: reaper gates answer --kind poison --since {since} "
        "--choice retry (or cancel)",
    ]
    # -o wide: every park on its own line with its whole gate id and the command
    whole = render_text(r, wide=True, listed=every_move(r.leases.listing))
    wide = [line for line in whole.splitlines() if " park " in line]
    assert len(wide) == 20 and "not listed" not in whole
    for n, line in enumerate(wide):
        gate = gates[str(UUID(int=1000 + n))]
        command = f"reaper gates answer {gate} --choice retry (or cancel)"
        assert line.endswith(f"; gate {gate}: {command}")


def test_the_json_report_lists_every_lease_verdict_and_streams_the_same_text() -> None:
    import io

    from reaper.edges.report import verdict_json, write_json

    r = _lease_result(expired=40, poison=3)
    out = io.StringIO()
    asyncio.run(write_json(r, out))
    report = json.loads(out.getvalue())
    validate_report(report)
    # the same text as the whole object encoded at once, the moves read back listed first
    whole = to_json(r)
    moves = [verdict_json(m.verdict, m.recorded, m.applied) for m in every_move(r.leases.listing)]
    whole["verdicts"] = moves + whole["verdicts"]  # type: ignore[operator]
    whole["lease_reap"] = {**whole["lease_reap"], "listed": True}  # type: ignore[dict-item]
    assert out.getvalue() == json.dumps(whole, indent=2) + "\n"
    assert len(report["verdicts"]) == 43
    assert [v["object"] for v in report["verdicts"]] == [str(UUID(int=1000 + n)) for n in range(43)]
    assert all(v["recorded"] for v in report["verdicts"])
    counted = report["lease_reap"]
    assert (counted["moved"], counted["lease_expired"], counted["poison"]) == (43, 40, 3)
    assert counted["recorded"] and counted["listed"] and counted["unlisted"] is None
    assert sum(p["lease_expired"] + p["poison"] for p in counted["projects"]) == 43
    assert counted["oldest_expiry"] == "2026-11-29T11:59:17.000Z"
    assert counted["newest_expiry"] == "2026-11-29T11:59:59.000Z"


def test_text_and_json_list_the_same_findings_worst_first_and_a_drop_is_not_ok() -> None:
    def broker(queue: str, condition: Condition, measured: int, **kw: object) -> RecordedVerdict:
        unit = Unit.SECONDS if condition is Condition.STALE_READY else Unit.MESSAGES
        v = broker_finding(queue, condition, measured, threshold=900, unit=unit, trusted=True, **kw)
        return RecordedVerdict(v, False)

    drops = broker_finding(
        "vibey.jobs.main",
        Condition.UNBOUNDED,
        20,
        threshold=None,
        unit=Unit.ATTEMPTS,
        detail="a delivery limit of 20 would drop, not dead-letter; fix: declare it",
        drops=True,
        trusted=True,
    )
    r = result(
        verdicts=(
            (
                broker("vibey.a", Condition.STALE_READY, 1000),
                broker("vibey.b", Condition.STALE_READY, 5000),
                broker("vibey.c", Condition.HOLDER_GONE, 3),
                RecordedVerdict(drops, True),
            )
        )
    )
    report = to_json(r)
    validate_report(report)
    assert report["status"] == "NOT OK: 1 queue would drop messages"
    [problem] = report["problems"]  # type: ignore[misc]
    assert (problem["kind"], problem["fix"]) == ("would_drop", "declare it")
    subjects = [f["subject"] for f in report["findings"]]  # type: ignore[union-attr]
    assert subjects == ["vibey.c", "vibey.b", "vibey.a"]  # worst first; the drop is a problem

    lines = render_text(r).splitlines()
    start = lines.index("Findings (3), worst first:")
    # worst first; the two stale queues share a next step: one line, each with its age, the
    # threshold once
    assert lines[start + 1].split()[2].rstrip(":") == "vibey.c"
    assert lines[start + 2] == (
        "  stale_ready  2 queues: vibey.b 1 h 23 m, vibey.a 16 m (threshold 15 m); no consumer "
        "takes them: start each queue's consumer  [not recorded]"
    )
    wide = render_text(r, wide=True).splitlines()
    listed = [line.split()[2].rstrip(":") for line in wide if line.startswith("  stale_ready")]
    assert listed == ["vibey.b", "vibey.a"]  # -o wide: each on its own line
    assert (
        "  WOULD DROP  queue vibey.jobs.main: a delivery limit of 20 would drop, not dead-letter"
    ) in lines
    assert "              fix: declare it" in lines


def test_a_line_of_several_findings_says_its_next_step_of_them_all() -> None:
    # one finding's step speaks of it; the line that names several says "them", "each"
    one = render_text(result(verdicts=(RecordedVerdict(stale_job(UUID(int=1)), True),)))
    assert "no worker claims it: check the project's workers" in one
    jobs = tuple(RecordedVerdict(stale_job(UUID(int=n), f"job-{n}"), True) for n in (1, 2))
    queues = tuple(
        RecordedVerdict(
            broker_finding(f"vibey.{n}", Condition.HUNG_HANDLER, 2, action=Action.SURFACE), True
        )
        for n in (1, 2)
    )
    lines = render_text(result(verdicts=jobs + queues)).splitlines()

    def step_of(group: str) -> str:  # on the group's line, or alone on the next when long
        [at] = [n for n, line in enumerate(lines) if line.startswith(group)]
        return lines[at] if "; " in lines[at] else lines[at + 1].strip()

    assert "no worker claims them: check each project's workers" in step_of(
        "  stale_ready  2 findings"
    )
    assert "consumers hold deliveries without acking: restart their handlers" in step_of(
        "  hung_handler 2 queues"
    )
    assert not [line for line in lines if " it:" in line or "restart its" in line], lines


def test_the_header_counts_what_it_says() -> None:
    # one source whose reads failed twice is one source; a queue on a lost node is a queue
    twice = (
        Unreadable("job_queue", 'relation "job" does not exist'),
        Unreadable("job_queue", 'relation "event" does not exist'),
        Unreadable("broker", "node down", queue="vibey.jobs"),
        Unreadable("broker", "node down", queue="vibey.mail"),
    )
    status = result(unreadable=twice).status()
    assert status == "NOT OK: 1 source unreadable, 2 queues unreadable"


def test_the_json_report_has_every_key_spec_5_names_failed_among_them() -> None:
    r = result(not_moved=(RowNotMoved("job 1", "permission denied (SQLSTATE 42501)"),))
    report = to_json(r)
    validate_report(report)
    spec = (
        "ok dry_run started_at finished_at target inventory broker verdicts policies "
        "dead_letters unreadable failed notes"
    )
    assert set(spec.split()) <= set(report)
    [failed] = report["failed"]  # type: ignore[misc]
    assert failed["kind"] == "row_not_moved" and failed["subject"] == "job 1"
    assert failed["reason"] == "permission denied (SQLSTATE 42501)"
    assert to_json(result())["failed"] == []
