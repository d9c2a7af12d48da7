"""``run_pass`` over the in-memory job queue and a broker in memory: the pass's own logic (its
steps, its record, its result and report), with no service. The same behaviour is proven live
on PostgreSQL and every broker in ``tests/integration``."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest

from reaper.config import Settings
from reaper.core.domain import FLEET_PROJECT_ID, Action, Condition, Source
from reaper.edges.commands import clear_notes
from reaper.edges.report import render_text, to_json
from reaper.errors import BrokerUnavailable
from reaper.jobqueue.port import GateChoice
from reaper.reap.context import Mode
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources
from reaper.reap.stopping import StopRequest
from reaper.testing.memory import JobRow, MemoryJobQueue
from tests.support.fake_broker import FakeBroker
from tests.support.lease_moves import every_verdict
from tests.support.leases import add_expired_leases, lease_row

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ISO_NOW = "2026-11-30T12:00:00.000Z"


def settings() -> Settings:
    return Settings.model_validate(
        {"queue": {"reap": {"policy_verify_wait_seconds": 0, "stale_ready_seconds": 900}}}
    )


def world() -> tuple[MemoryJobQueue, dict[str, uuid.UUID], uuid.UUID]:
    store = MemoryJobQueue(clock=lambda: NOW)
    project = uuid.uuid4()
    jobs = {
        "expired": lease_row(project, "worker-1", NOW - timedelta(minutes=5), now=NOW),
        "poison": lease_row(project, "worker-2", NOW - timedelta(minutes=5), now=NOW, attempts=7),
        "live": lease_row(project, "worker-3", NOW + timedelta(minutes=5), now=NOW),
        "stale": JobRow(project_id=project, run_after=NOW - timedelta(hours=2)),
    }
    return store, {name: store.add_job(row) for name, row in jobs.items()}, project


B = TypeVar("B", bound=FakeBroker)


def letter(message_id: str) -> dict[str, object]:
    body = json.dumps({"n": message_id})
    return {
        "payload": body,
        "payload_encoding": "string",
        "payload_bytes": len(body),
        "properties": {"message_id": message_id},
    }


def with_dead_letters(broker: B, *message_ids: str) -> B:
    """``broker`` with a quorum queue ``vibey.jobs.dead`` holding a letter of each id."""
    broker.declare("vibey.jobs.dead", "quorum")
    broker.put_letters("vibey.jobs.dead", [letter(m) for m in message_ids])
    return broker


async def test_a_pass_requeues_parks_and_surfaces_each_once_with_its_event() -> None:
    store, ids, project = world()

    result = await run_pass(settings(), Sources(store=store, broker=None), clock=lambda: NOW)

    by_action = {(r.verdict.condition, r.verdict.action): r for r in await every_verdict(result)}
    assert by_action[(Condition.LEASE_EXPIRED, Action.REQUEUE)].recorded
    assert by_action[(Condition.POISON, Action.PARK)].recorded
    assert by_action[(Condition.STALE_READY, Action.SURFACE)].recorded
    assert store.jobs[ids["expired"]].state == "ready"
    assert store.jobs[ids["poison"]].state == "awaiting_human"
    assert store.jobs[ids["live"]].state == "leased"
    events = await store.events(project)
    assert [e.seq for e in events] == [1, 2, 3]
    assert sorted(e.payload["action"] for e in events) == ["park", "requeue", "surface"]
    # the broker could not be opened: named, the pass is not ok, and says so in its report
    assert not result.ok
    assert [(p.kind, p.subject) for p in result.problems()] == [("unreadable", "broker")]
    assert to_json(result)["problems"] == [
        {"kind": "unreadable", "subject": "broker", "detail": "not connected", "fix": ""}
    ]

    again = await run_pass(settings(), Sources(store=store, broker=None), clock=lambda: NOW)
    assert [r.recorded for r in await every_verdict(again)] == [False]  # the stale sighting
    assert len(await store.events(project)) == 3


async def test_a_dry_run_judges_everything_and_writes_nothing() -> None:
    store, ids, _ = world()
    broker = with_dead_letters(FakeBroker(), "m-1")

    result = await run_pass(
        settings(), Sources(store=store, broker=broker), mode=Mode.AUDIT, clock=lambda: NOW
    )

    verdicts = await every_verdict(result)
    assert {r.verdict.condition for r in verdicts} >= {
        Condition.LEASE_EXPIRED,
        Condition.POISON,
        Condition.STALE_READY,
    }
    assert not any(r.recorded for r in verdicts)
    assert result.leases.listing.changed() is None  # listed as counted
    assert store.jobs[ids["expired"]].state == "leased" and store.gates == {}
    assert store.ledger == {} and broker.policies == {} and broker.reads == []
    assert {p.action for p in result.policies.outcomes} == {"planned"}


async def test_a_dry_run_says_which_findings_are_on_record_and_since_when() -> None:
    store, _, project = world()
    await run_pass(
        settings(), Sources(store=store, broker=None), clock=lambda: NOW
    )  # opens the sighting
    store.add_job(JobRow(project_id=uuid.uuid4(), run_after=NOW - timedelta(hours=3)))
    events = {stream: list(e) for stream, e in store.ledger.items()}

    dry = await run_pass(
        settings(), Sources(store=store, broker=None), mode=Mode.AUDIT, clock=lambda: NOW
    )

    stale = [r for r in dry.verdicts if r.verdict.condition is Condition.STALE_READY]
    on_record = next(r for r in stale if r.verdict.project_id == project)
    new = next(r for r in stale if r.verdict.project_id != project)
    assert not on_record.recorded and not new.recorded  # a dry run records nothing
    text = render_text(dry)
    lines = {line.split("job ")[1][:8]: line for line in text.splitlines() if "stale_ready" in line}
    assert lines[str(on_record.verdict.object)[:8]].endswith("[seen since 12:00Z]")
    assert lines[str(new.verdict.object)[:8]].endswith("[would record]")
    assert to_json(dry)["verdicts"][0]["recorded"] is False
    assert {s: list(e) for s, e in store.ledger.items()} == events  # nothing written


async def test_a_pass_parks_each_owned_dead_letter_once_and_never_reads_a_foreign_queue() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = with_dead_letters(FakeBroker(), "m-1", "m-2")
    broker.declare("celery.dead")
    broker.put_letters("celery.dead", [letter("theirs")])

    first = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    second = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)

    assert first.ok, [p.line() for p in first.problems()]
    assert [(d.parked_new, d.already_parked, d.unread) for d in first.dead_letters.queues] == [
        (2, 0, 0)
    ]
    assert [(d.parked_new, d.already_parked, d.unread) for d in second.dead_letters.queues] == [
        (0, 2, 0)
    ]
    assert set(broker.reads) == {"vibey.jobs.dead"}
    foreign = [r for r in first.verdicts if r.verdict.queue == "celery.dead"]
    assert [(r.verdict.action, r.recorded) for r in foreign] == [(Action.SURFACE, True)]
    parks = [e for e in await store.events(FLEET_PROJECT_ID) if e.payload["action"] == "park"]
    assert len(parks) == 2 and len(await store.list_gates()) == 2


async def test_the_pass_returns_the_board_it_read_and_the_notes_come_from_it() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = with_dead_letters(FakeBroker(), "m-1", "m-2")
    parking = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    board = parking.gates.board
    assert board is not None and board.total_open == 2 and board.waiting == {"vibey.jobs.dead": 2}
    for gate in await store.list_gates():
        await store.answer_dead_letter_gate(GateChoice(gate.id, "dismiss", NOW))

    answered = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)

    board = answered.gates.board
    assert board is not None and board.total_open == 0 and board.waiting == {}
    [note] = clear_notes(settings(), answered)  # no source opened: the pass's board
    assert note.startswith("Safe to clear: vibey.jobs.dead (2 letter(s), every one parked")


async def test_the_ledger_unread_means_nothing_is_written_and_nothing_is_cleared() -> None:
    broker = with_dead_letters(FakeBroker(), "m-1")

    result = await run_pass(
        settings(), Sources(store=None, broker=broker, store_error="refused"), clock=lambda: NOW
    )

    assert [u.source for u in result.unreadable] == [Source.JOB_QUEUE.value]
    assert "the ledger (PostgreSQL) could not be read: nothing was written" in result.notes
    [outcome] = result.dead_letters.queues
    assert outcome.read_blocked is not None and broker.reads == []
    assert result.gates.board is None
    assert result.gates.board_error == "the job queue could not be read"


class Interrupted(MemoryJobQueue):
    """Moves one lease, then the database goes away while the rest commit."""

    lost_after = 1

    def __init__(self) -> None:
        super().__init__(clock=lambda: NOW)


async def test_moves_cut_short_are_reported_as_far_as_they_are_known() -> None:
    store = Interrupted()
    _, _, project = world()
    for n in range(3):
        store.add_job(lease_row(project, f"w-{n}", NOW - timedelta(minutes=n + 1), now=NOW))

    result = await run_pass(settings(), Sources(store=store, broker=None), clock=lambda: NOW)

    listing = result.leases.listing  # counted as committed; not read back, the store gone
    assert listing.recorded and listing.reap.moves == {(project, False): 1}
    kinds = [p.kind for p in result.problems()]
    assert kinds == ["unreadable", "unreadable", "outcome_unknown"]
    text = render_text(result)
    assert "2 lease move(s)" in text
    assert (
        "1 lease move(s) committed, each with its QueueReaped event; they could not be read back"
        in text
    )
    assert f"reaper events --kind QueueReaped --source job_queue --since {ISO_NOW}" in text


async def test_a_failed_row_is_named_in_the_json_report_as_in_the_human_one() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    job = store.add_job(lease_row(uuid.uuid4(), "w", NOW - timedelta(minutes=1), now=NOW))
    store.refused_moves[job] = "a trigger said no (SQLSTATE P0001)"

    result = await run_pass(settings(), Sources(store=store, broker=None), clock=lambda: NOW)

    problem = next(p for p in to_json(result)["problems"] if p["kind"] == "row_not_moved")
    assert problem == {
        "kind": "row_not_moved",
        "subject": f"job {job}",
        "detail": "a trigger said no (SQLSTATE P0001)",
        "fix": "",
    }
    text = render_text(result)
    assert f"NOT DONE    job {str(job)[:8]}: a trigger said no" in text
    # a move that did not commit is never listed as done, nor as unreadable: it is named
    assert "Done (" not in text and "UNREADABLE  job_queue" not in text
    verdicts = to_json(result)["verdicts"]
    assert not [v for v in verdicts if v["object"] == str(job)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("dry_run", [False, True])
async def test_a_pass_over_nothing_is_quiet(dry_run: bool) -> None:
    store, broker = MemoryJobQueue(clock=lambda: NOW), FakeBroker()
    result = await run_pass(
        settings(),
        Sources(store=store, broker=broker),
        mode=Mode.AUDIT if dry_run else Mode.FULL,
        clock=lambda: NOW,
    )
    assert (
        list(result.verdicts) == [] and result.dead_letters.queues == () and result.unreadable == ()
    )
    assert store.ledger == {}


class ConnectionLost(MemoryJobQueue):
    """Moves the first lease, then the connection is lost: the batch in flight is neither
    known moved nor known not (its COMMIT got no answer)."""

    lost_after = 1

    def __init__(self) -> None:
        super().__init__(clock=lambda: NOW)


def expired_leases(store: MemoryJobQueue, n: int) -> None:
    add_expired_leases(
        store, n, now=NOW, owner=lambda k: f"w-{k}", expired_ago=lambda k: timedelta(minutes=k + 1)
    )


async def test_moves_a_lost_connection_left_undone_are_not_moved_never_changed() -> None:
    store = ConnectionLost()
    expired_leases(store, 4)

    result = await run_pass(settings(), Sources(store=store, broker=None), clock=lambda: NOW)

    text = render_text(result, wide=True)
    assert "changed after it was read" not in text
    [unknown] = [p for p in result.problems() if p.kind == "outcome_unknown"]
    assert unknown.subject == "3 lease move(s)"
    assert any(
        "3 expired lease(s) not moved after the connection to PostgreSQL was lost" in note
        for note in result.notes
    ), result.notes
    assert result.leases.remaining == 3
    assert not result.ok and result.leases.expired == 4


async def test_a_pass_asked_to_stop_ends_its_moves_in_flight_and_runs_no_later_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("reaper.testing.memory_leases.BATCH", 2)
    store = MemoryJobQueue(clock=lambda: NOW)
    expired_leases(store, 5)
    broker = with_dead_letters(FakeBroker(), "m-1")
    stop = StopRequest()
    stop.request("SIGTERM")

    result = await run_pass(
        settings(), Sources(store=store, broker=broker), clock=lambda: NOW, stop=stop
    )

    verdicts = await every_verdict(result)
    moved = [r for r in verdicts if r.verdict.action is Action.REQUEUE and r.recorded]
    assert len(moved) == 2  # the batch in flight, and no more
    assert result.leases.remaining == 3 and result.leases.expired == 5
    assert (
        broker.reads == [] and result.policies.outcomes == () and result.dead_letters.queues == ()
    )
    [stopped] = [p for p in result.problems() if p.kind == "stopped"]
    assert stopped.detail.startswith("stopped by SIGTERM before its end")
    assert not result.ok and result.status() == "NOT OK: 1 stopped early"
    assert any("3 more expired lease(s) left unread when the pass" in n for n in result.notes)


class SlowToRead(FakeBroker):
    """A broker whose read of a dead-letter queue times out (letters with large headers)."""

    async def get_messages(self, queue, count, **kwargs):  # type: ignore[no-untyped-def]
        raise BrokerUnavailable(
            "RabbitMQ management API at http://broker timed out after 10 s on POST "
            f"/api/queues/v/{queue}/get (ReadTimeout): not sent to another node, whether it "
            "took effect is unknown"
        )


async def test_a_dead_letter_read_that_times_out_is_that_queues_problem_with_its_fix() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = with_dead_letters(SlowToRead(), "m-1", "m-2")

    result = await run_pass(settings(), Sources(store=store, broker=broker), clock=lambda: NOW)

    assert result.unreadable == ()  # the rest of the broker was read and judged
    [problem] = result.problems()
    assert (problem.kind, problem.subject) == ("dead_letter", "vibey.jobs.dead")
    assert (
        "timed out after 10 s" in problem.detail and "raise bus.timeout_seconds" in problem.detail
    )
    [outcome] = result.dead_letters.queues
    assert (outcome.parked_new, outcome.unread) == (0, 2)


class SlowToList(FakeBroker):
    """A broker whose listing outlasts the client's timeout (a vhost of many queues on a
    loaded node: one page of 25,000 queues took up to 9.7 s)."""

    async def queue_pages(self, vhost=None):  # type: ignore[no-untyped-def]
        raise BrokerUnavailable(
            "RabbitMQ management API at http://broker timed out after 10 s on GET "
            "/api/queues/v (ReadTimeout)"
        )
        yield []  # pragma: no cover - an async generator that fails on its first page


async def test_a_listing_that_times_out_says_to_raise_the_timeout() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)

    result = await run_pass(
        settings(), Sources(store=store, broker=SlowToList()), clock=lambda: NOW
    )

    [problem] = [p for p in result.problems() if p.kind == "unreadable"]
    assert problem.subject == "broker" and "timed out after 10 s" in problem.detail
    assert "raise it (REAPER_BUS__TIMEOUT_SECONDS)" in problem.fix
    assert "raise it (REAPER_BUS__TIMEOUT_SECONDS)" in render_text(result)
    assert not result.ok
