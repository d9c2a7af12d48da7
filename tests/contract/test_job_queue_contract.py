"""The job-queue port's contract (``reaper.jobqueue.port.JobQueue``), held by both
``PostgresStore`` and ``MemoryJobQueue``: what the pass may rely on whichever it is given.

PostgreSQL-only behaviour (concurrent reapers, SKIP LOCKED, the append-only trigger, query
plans) stays in ``tests/integration``."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from reaper.core.canonical import canonical_json
from reaper.core.domain import (
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
    Action,
    DeadLetter,
    Source,
    Thresholds,
    Verdict,
)
from reaper.core.judge_leases import judge_lease_page
from reaper.core.sightings import SightingsPass
from reaper.errors import GateError
from reaper.jobqueue.port import GateChoice, GateFilter, ParkedDeadLetter, ParkRules
from tests.contract.conftest import Subject, park_poison
from tests.support.dead_letters import got_letter
from tests.support.store import NOW, Job, Reaped, lease_of, leased, reap_page
from tests.support.verdicts import broker_finding, stale

pytestmark = pytest.mark.postgres

RULES = ParkRules(
    depth=3, min_depth=1, owned_queue_pattern=r"^vibey\.", dead_letter_queue_pattern=r"\.dead$"
)


def surfaced(project: uuid.UUID) -> Verdict:
    """The project's stale head, a job of its own each time."""
    return stale(project, job=str(uuid.uuid4()))


def dead_letter(message_id: str, queue: str = "vibey.jobs.dead") -> DeadLetter:
    return got_letter('{"task": 1}', message_id, queue=queue)


# --------------------------------------------------------------------------- leases


async def test_expired_leases_past_the_grace_are_counted_and_reaped(subject: Subject) -> None:
    project, other = uuid.uuid4(), uuid.uuid4()
    old = leased(project, expired_seconds_ago=300)
    recent = leased(project, expired_seconds_ago=30)
    live = replace(leased(project), lease_expires_at=NOW + timedelta(minutes=5))
    elsewhere = leased(other, expired_seconds_ago=600)
    await subject.add(old, recent, live, elsewhere)
    store = subject.store

    assert await store.count_expired_leases(NOW, 0) == 3
    assert await store.count_expired_leases(NOW, 60) == 2
    assert await store.count_expired_leases(NOW, 60, other) == 1
    # one project's alone, past a grace of a minute: the recent lease is left
    assert await reap_page(store, project_id=project, grace=60) == Reaped(
        parked=(), requeued=(old.id,)
    )
    assert await store.count_expired_leases(NOW, 0) == 2
    assert await reap_page(store) == Reaped(requeued=tuple(sorted((elsewhere.id, recent.id))))
    assert (await subject.row(live.id)).state == "leased"


async def test_claimable_heads_are_the_oldest_claimable_job_of_each_project(
    subject: Subject,
) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    running = leased(a, expired_seconds_ago=-600)
    blocked = Job(project_id=a, run_after=NOW - timedelta(hours=5))
    built = Job(
        project_id=a,
        state="succeeded",
        run_after=NOW - timedelta(hours=6),
        finished_at=NOW - timedelta(hours=2),
    )
    behind_success = Job(project_id=a, run_after=NOW - timedelta(hours=4))
    plain = Job(project_id=a, run_after=NOW - timedelta(hours=3))
    future = Job(project_id=b, run_after=NOW + timedelta(hours=1))
    other_phase = Job(project_id=b, run_after=NOW - timedelta(hours=1), phase="deploy")
    await subject.add(running, blocked, built, behind_success, plain, future, other_phase)
    await subject.depend(blocked.id, running.id)
    await subject.depend(behind_success.id, built.id)
    store = subject.store

    heads = {h.project_id: h for h in await store.claimable_heads(NOW, frozenset())}
    # claimable since the later of run_after and the dependency's success: 2 h ago, which is
    # later than plain's 3 h; the job blocked by a running dependency is not claimable at all
    assert heads[a].job_id == plain.id
    assert heads[a].claimable_since == NOW - timedelta(hours=3)
    assert heads[b].job_id == other_phase.id
    only_build = await store.claimable_heads(NOW, frozenset({"build"}))
    assert [h.project_id for h in only_build] == []  # no job of either project is in "build"
    assert [h.job_id for h in await store.claimable_heads(NOW, frozenset(), b)] == [other_phase.id]


async def test_a_requeue_and_a_park_each_commit_with_one_event(subject: Subject) -> None:
    project = uuid.uuid4()
    expired = leased(project, attempts=2)
    poison = leased(project, attempts=7, max_attempts=7)
    await subject.add(expired, poison)
    store = subject.store

    moves = await reap_page(store)

    assert moves == Reaped(requeued=(expired.id,), parked=(poison.id,))
    requeued, parked = await subject.row(expired.id), await subject.row(poison.id)
    assert (requeued.state, requeued.run_after, requeued.lease_owner) == ("ready", NOW, None)
    assert (parked.state, parked.attempts, parked.lease_expires_at) == ("awaiting_human", 6, None)
    [gate] = await store.list_gates(GateFilter(kind=GATE_DELIVERY_EXHAUSTED))
    assert (gate.job_id, gate.choices, gate.is_open) == (poison.id, ("retry", "cancel"), True)
    events = await store.events(project)
    assert [e.seq for e in events] == [1, 2]
    assert sorted(e.payload["action"] for e in events) == ["park", "requeue"]
    for e in events:
        canonical = canonical_json(e.payload)
        assert e.digest == hashlib.sha256(canonical.encode()).hexdigest()


#: What the host may do to a lease before the reap reaches it (River #1302).
CHANGES = [
    pytest.param(
        {"state": "succeeded", "finished_at": NOW, "lease_owner": None, "lease_expires_at": None},
        id="finished",
    ),
    pytest.param(
        {"lease_owner": "worker-2", "attempts": 2, "lease_expires_at": NOW + timedelta(minutes=5)},
        id="re-leased-by-another-owner",
    ),
    pytest.param({"lease_expires_at": NOW + timedelta(minutes=5)}, id="extended-by-heartbeat"),
    pytest.param(
        {"state": "ready", "lease_owner": None, "lease_expires_at": None, "run_after": NOW},
        id="requeued-by-someone-else",
    ),
]


@pytest.mark.parametrize("change", CHANGES)
async def test_a_lease_is_ruled_on_as_it_stands_when_the_reap_reaches_it(
    subject: Subject, change: dict[str, object]
) -> None:
    project = uuid.uuid4()
    job, bystander = leased(project), leased(project, attempts=7, max_attempts=7)
    await subject.add(job, bystander)
    before = await subject.row(job.id)
    await subject.update(job.id, **change)  # the host changes the row ...
    changed = await subject.row(job.id)
    assert changed != before

    moves = await reap_page(subject.store)  # ... before the reap reaches it

    assert moves == Reaped(parked=(bystander.id,))
    assert await subject.row(job.id) == changed  # untouched
    events = await subject.store.events(project)
    assert [(e.seq, e.payload["object"]) for e in events] == [(1, str(bystander.id))]
    # a second reap (another reaper's) moves nothing, writes nothing
    assert await reap_page(subject.store) == Reaped()
    assert len(await subject.store.events(project)) == 1
    assert len(await subject.store.list_gates(GateFilter(open_only=False))) == 1


async def test_every_lease_moves_with_the_event_its_verdict_gives(subject: Subject) -> None:
    """The pass's path: every lease moved with the very event the lease judge's verdict
    gives, spread over projects of uneven size (lanes), parks included."""
    projects = [uuid.uuid4() for _ in range(4)]
    sizes = [9, 5, 2, 1]
    jobs = [
        leased(project, expired_seconds_ago=10 + n, attempts=7 if n == 0 else 1)
        for project, size in zip(projects, sizes, strict=True)
        for n in range(size)
    ]
    await subject.add(*jobs)
    verdicts = judge_lease_page([lease_of(j) for j in jobs], Thresholds(), NOW)

    moves = await reap_page(subject.store)

    assert sorted(moves.requeued) == sorted(j.id for j in jobs if j.attempts == 1)
    assert sorted(moves.parked) == sorted(j.id for j in jobs if j.attempts == 7)
    assert not moves.failed
    written = {
        e.payload["object"]: e for project in projects for e in await subject.store.events(project)
    }
    assert len(written) == len(jobs)
    for verdict in verdicts:
        event = written[verdict.object]
        canonical = canonical_json(verdict.payload())
        assert canonical_json(event.payload) == canonical
        assert event.digest == hashlib.sha256(canonical.encode()).hexdigest()
    for project, size in zip(projects, sizes, strict=True):
        assert [e.seq for e in await subject.store.events(project)] == list(range(1, size + 1))
    gates = await subject.store.list_gates()
    assert sorted(g.job_id for g in gates) == sorted(moves.parked)


async def test_a_bad_row_is_named_and_the_rest_move(subject: Subject) -> None:
    project = uuid.uuid4()
    jobs = [leased(project, expired_seconds_ago=60 - n) for n in range(5)]
    jobs += [leased(project, expired_seconds_ago=50, attempts=7, max_attempts=7)]
    bad = jobs[2]
    await subject.add(*jobs)
    await subject.refuse_moves(bad.id)

    moves = await reap_page(subject.store)

    assert set(moves.requeued) == {j.id for j in jobs[:5]} - {bad.id}
    assert moves.parked == (jobs[5].id,)
    assert [job_id for job_id, _ in moves.failed] == [bad.id]
    assert "cursed" in moves.failed[0][1]
    assert (await subject.row(bad.id)).state == "leased"
    events = await subject.store.events(project)
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert str(bad.id) not in {e.payload["object"] for e in events}
    assert len(await subject.store.list_gates()) == 1


# --------------------------------------------------------------------------- sightings


async def test_a_sighting_is_recorded_once_and_cleared_once(subject: Subject) -> None:
    project = uuid.uuid4()
    read = frozenset(Source)
    store = subject.store
    seen = surfaced(project)

    first = await store.record_sightings([seen], SightingsPass(now=NOW, sources_read=read))
    again = await store.record_sightings(
        [surfaced(project)], SightingsPass(now=NOW, sources_read=read)
    )
    unread = await store.record_sightings(
        [], SightingsPass(now=NOW, sources_read=frozenset({Source.BROKER}))
    )
    other_project = await store.record_sightings(
        [], SightingsPass(now=NOW, sources_read=read, project_id=uuid.uuid4())
    )
    cleared = await store.record_sightings([], SightingsPass(now=NOW, sources_read=read))
    after = await store.record_sightings([], SightingsPass(now=NOW, sources_read=read))

    assert first.records == [seen] and again.records == [] and unread.records == []
    assert other_project.records == []
    assert [(c.action, c.object) for c in cleared.records] == [(Action.CLEARED, seen.object)]
    assert after.records == []
    assert [e.payload["action"] for e in await store.events(project)] == ["surface", "cleared"]


async def test_an_open_sighting_says_since_when_it_has_been_open(subject: Subject) -> None:
    project, read, store = uuid.uuid4(), frozenset(Source), subject.store
    seen = surfaced(project)
    opening = await store.record_sightings([seen], SightingsPass(now=NOW, sources_read=read))
    assert opening.records == [seen] and opening.since == {}  # opened now, not open before

    later = NOW + timedelta(hours=1)
    again = await store.record_sightings(
        [surfaced(project)], SightingsPass(now=later, sources_read=read)
    )
    # still open: since the record that opened it, not the pass that saw it again
    assert again.records == [] and again.since == {seen.sighting_key: NOW}

    cleared = await store.record_sightings([], SightingsPass(now=later, sources_read=read))
    assert cleared.since == {}
    back = await store.record_sightings(
        [surfaced(project)], SightingsPass(now=later, sources_read=read)
    )
    assert [r.action for r in back.records] == [Action.SURFACE] and back.since == {}


async def test_a_dry_run_reads_which_sightings_are_open_and_writes_nothing(
    subject: Subject,
) -> None:
    project, read, store = uuid.uuid4(), frozenset(Source), subject.store
    seen, other = surfaced(project), surfaced(uuid.uuid4())  # another project's: not on record
    assert await store.sightings_open_since([seen, other]) == {}  # nothing on record yet
    await store.record_sightings([seen], SightingsPass(now=NOW, sources_read=read))
    events = await store.events(project)

    later = NOW + timedelta(hours=1)
    assert await store.sightings_open_since([surfaced(project), other]) == {seen.sighting_key: NOW}
    assert await store.events(project) == events  # read only
    await store.record_sightings([], SightingsPass(now=later, sources_read=read))  # cleared
    assert await store.sightings_open_since([seen]) == {}


async def test_broker_sightings_live_on_the_fleet_stream(subject: Subject) -> None:
    finding = broker_finding("vibey.jobs")
    await subject.store.record_sightings(
        [finding], SightingsPass(now=NOW, sources_read=frozenset(Source))
    )
    [event] = await subject.store.events(FLEET_PROJECT_ID)
    assert (event.payload["queue"], event.trusted) == ("vibey.jobs", False)


# --------------------------------------------------------------------------- dead letters


async def test_a_dead_letter_is_parked_once_by_its_identity(subject: Subject) -> None:
    store = subject.store
    one, two = dead_letter("m-1"), dead_letter("m-2")

    first = await store.park_dead_letters([one, two, one], now=NOW, rules=RULES)
    again = await store.park_dead_letters([two], now=NOW, rules=RULES)

    assert [v.action for v in first.parked] == [Action.PARK, Action.PARK]
    assert first.already_parked == (one.identity,) and again.already_parked == (two.identity,)
    assert await store.parked_identities([one.identity, "msg:never"]) == {one.identity}
    assert await store.count_parked_dead_letters("vibey.jobs.dead") == 2
    assert await store.count_parked_dead_letters("vibey.other.dead") == 0
    events = await store.events(FLEET_PROJECT_ID)
    assert len(events) == 2 and not any(e.trusted for e in events)
    gates = await store.list_gates(GateFilter(kind=GATE_BUS_DEAD_LETTERED))
    assert [g.choices for g in gates] == [("replay", "dismiss")] * 2


# --------------------------------------------------------------------------- gates


async def test_a_retry_answer_readies_the_parked_job_once(subject: Subject) -> None:
    gate = await park_poison(subject, uuid.uuid4())
    store = subject.store
    assert gate.job_id is not None
    later = NOW + timedelta(minutes=5)

    with pytest.raises(GateError, match="'dismiss' is not an answer"):
        await subject.store.answer_gate(GateChoice(gate.id, "dismiss", later))
    with pytest.raises(GateError, match="does not exist"):
        await subject.store.answer_gate(GateChoice(uuid.uuid4(), "retry", later))
    answered = await subject.store.answer_gate(
        GateChoice(gate.id, "retry", later, answered_by="ops")
    )

    assert (answered.answer, answered.answered_at, answered.answered_by) == ("retry", later, "ops")
    row = await subject.row(gate.job_id)
    assert (row.state, row.run_after, row.attempts) == ("ready", later, 6)
    with pytest.raises(GateError, match="already answered"):
        await subject.store.answer_gate(GateChoice(gate.id, "retry", later))
    assert await store.list_gates() == []
    assert len(await store.list_gates(GateFilter(open_only=False))) == 1


async def test_a_dead_letter_gate_settles_its_job_by_its_answer(subject: Subject) -> None:
    store = subject.store
    kept, replayed = dead_letter("keep"), dead_letter("again")
    parks = await store.park_dead_letters([kept, replayed], now=NOW, rules=RULES)
    job_of = {v.object for v in parks.parked}
    gates = {g.identity: g for g in await store.list_gates(GateFilter(kind=GATE_BUS_DEAD_LETTERED))}
    sent: list[ParkedDeadLetter] = []

    async def refuse(gate: object, parked: ParkedDeadLetter) -> None:
        raise GateError("refused by the test")

    async def send(gate: object, parked: ParkedDeadLetter) -> None:
        sent.append(parked)

    with pytest.raises(GateError, match="replay publishes the body"):
        await subject.store.answer_gate(
            GateChoice(gates[f"dead_letter:{replayed.identity}"].id, "replay", NOW)
        )
    with pytest.raises(GateError, match="refused by the test"):
        await subject.store.answer_dead_letter_gate(
            GateChoice(gates[f"dead_letter:{replayed.identity}"].id, "replay", NOW), replay=refuse
        )
    assert len(await store.list_gates()) == 2  # a refused replay records nothing

    dismissed, _ = await subject.store.answer_dead_letter_gate(
        GateChoice(gates[f"dead_letter:{kept.identity}"].id, "dismiss", NOW)
    )
    replay_gate, parked = await subject.store.answer_dead_letter_gate(
        GateChoice(gates[f"dead_letter:{replayed.identity}"].id, "replay", NOW), replay=send
    )

    assert (dismissed.answer, replay_gate.answer) == ("dismiss", "replay")
    assert parked is not None and [p.letter.identity for p in sent] == [replayed.identity]
    states = {str(j): (await subject.row(uuid.UUID(str(j)))).state for j in job_of}
    assert sorted(states.values()) == ["cancelled", "succeeded"]
    assert await store.parked_identities([kept.identity]) == {kept.identity}  # still parked


async def test_a_gate_answers_only_while_its_job_waits_behind_it(subject: Subject) -> None:
    first = await park_poison(subject, uuid.uuid4())
    store = subject.store
    assert first.job_id is not None
    # an operator re-readies the job by hand; it is leased again and its holder dies again
    later = NOW + timedelta(minutes=10)
    await subject.update(
        first.job_id,
        state="leased",
        attempts=7,
        lease_owner="worker-2",
        lease_expires_at=later - timedelta(minutes=1),
    )
    await reap_page(store, later)
    second = next(g for g in await store.list_gates() if g.id != first.id)

    with pytest.raises(GateError, match=f"gate {second.id} .* is, and the job waits behind"):
        await subject.store.answer_gate(GateChoice(first.id, "retry", later))

    assert {g.id for g in await store.list_gates()} == {first.id, second.id}  # nothing written
    assert (await subject.row(first.job_id)).state == "awaiting_human"
    await subject.store.answer_gate(GateChoice(second.id, "retry", later))
    assert (await subject.row(first.job_id)).state == "ready"


# --------------------------------------------------------------------------- the fleet's turn


async def test_the_turn_goes_to_the_first_asker_once_per_interval(subject: Subject) -> None:
    store = subject.store
    first = await store.take_turn("pass", 60, "worker-1")
    second = await store.take_turn("pass", 60, "worker-2")
    other = await store.take_turn("another-turn", 60, "worker-2")

    assert first.mine and first.taken_by == "worker-1" and first.free_in_seconds == 60
    assert not second.mine and second.taken_by == "worker-1"
    assert second.taken_at == first.taken_at
    assert 59 < second.free_in_seconds <= 60
    assert other.mine  # turns are independent by name
    # a turn taken longer ago than the interval is free: the next asker takes it
    free = await store.take_turn("pass", 0, "worker-3")
    assert free.mine and free.taken_by == "worker-3" and free.taken_at > first.taken_at
