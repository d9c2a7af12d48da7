"""Outbox dispatch end to end, on every supported RabbitMQ version and a real PostgreSQL (SPEC §3,
ADR-0044 §3–§5, §8): a host that dispatches through a transactional outbox, a relay with
publisher confirms and real AMQP workers whose claim is fenced on the dispatch generation
(``tests/support/outbox_world.py``), and the reaper as real processes between them
(``python -m reaper reap --json``, ``reaper gates answer``).

1. **Requeue**: a worker dies holding its lease; the reaper requeues the job at generation 2
   with one outbox row; the broker's old generation-1 message is dropped by the fence and the
   job runs once, at generation 2.
2. **delivery_exhausted retry**: the same death with the last attempt spent parks the job and
   dispatches nothing (the old message is dropped while it is parked); the gate's ``retry``
   dispatches it at a new generation and it runs once.
3. **Dead-lettered dispatch**: a consumer that dies on every delivery spends the quorum queue's
   delivery limit until the broker dead-letters the dispatch; the reaper parks the job it
   points to (not a ``bus.dead_letter`` job), the gate's ``retry`` dispatches it again and it
   runs once. A second dead-lettered pointer, whose job the reaper had requeued to a newer
   generation, is recorded as stale and moves nothing. The dead letters stay on the broker.

Each scenario prints what it measured: dispatch episodes, outbox rows, ledger events, runs and
fenced drops.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reaper.core.domain import (
    DEAD_LETTER_JOB_KIND,
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
)
from tests.support.host_schema import add_outbox_schema
from tests.support.invariants import (
    read_bodies,
    read_is_safe,
    reaper_env,
    run_reaper,
    wait_for_depths,
)
from tests.support.outbox_world import (
    Worker,
    World,
    about,
    check_dispatch_row,
    check_ledger,
    check_world,
    declare_work_queue,
    enqueue,
    fetch,
    gates_of,
    job_row,
    moves,
    outbox_rows,
    ready_count,
    relay,
)
from tests.support.services import BrokerUnderTest, poll_until

pytestmark = [pytest.mark.broker, pytest.mark.postgres]

#: Passes a scenario may need before the reaper has proven a dead-letter queue safe to read
#: (on RabbitMQ 4.x its dead-letter policy must be in force first).
READ_PASSES = 20
WAIT_SECONDS = 30.0


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
async def world(broker: BrokerUnderTest, pg_dsn: str) -> AsyncIterator[World]:
    """The host's dispatch schema in the test's database, and one project's work queue."""
    await add_outbox_schema(pg_dsn)
    project = uuid.uuid4()
    yield World(pg_dsn, broker, project, declare_work_queue(broker, project))


@pytest.fixture
def env(broker: BrokerUnderTest, pg_dsn: str, tmp_path: Path) -> dict[str, str]:
    """A real reaper's environment: this test's database and vhost, no config file."""
    config_dir = tmp_path / "conf.d"
    config_dir.mkdir()
    return reaper_env(broker, pg_dsn, config_dir)


# --------------------------------------------------------------------------- the reaper


async def reap(env: dict[str, str], workdir: Path) -> dict[str, Any]:
    """One real pass; it must have read both sources, moved every row it meant to, and found
    the outbox dispatch in force."""
    run = await run_reaper(env, workdir, limit_seconds=120)
    assert run.report is not None, run.describe()
    report = run.report
    assert not report["unreadable"], run.describe()
    kinds = {p["kind"] for p in report["problems"]}
    assert not kinds & {"row_not_moved", "outcome_unknown"}, run.describe()
    assert report["dispatch"]["in_force"] == "outbox", report["dispatch"]
    return report


async def reap_until_read(
    env: dict[str, str], workdir: Path, dlq: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Passes until one has read ``dlq`` (a pass may find the read not yet proven safe and
    say so: then another pass); every pass's report, and its outcome for ``dlq``."""
    reports: list[dict[str, Any]] = []
    outcomes: list[dict[str, Any]] = []
    for _ in range(READ_PASSES):
        report = await reap(env, workdir)
        [outcome] = [d for d in report["dead_letters"] if d["queue"] == dlq]
        reports.append(report)
        outcomes.append(outcome)
        if outcome["read_blocked"] is None:
            return reports, outcomes
        await asyncio.sleep(0.5)
    pytest.fail(f"{dlq} never read in {READ_PASSES} passes: {outcomes}")


async def answer_retry(env: dict[str, str], workdir: Path, gate_id: uuid.UUID) -> str:
    """``reaper gates answer GATE --choice retry``, a real process; what it printed."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "reaper", "gates", "answer", str(gate_id), "--choice", "retry"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=workdir,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, (process.returncode, out, err)
    return out.decode().strip()


def verdicts_on(report: dict[str, Any], job_id: uuid.UUID) -> list[tuple[str, str, bool]]:
    return [
        (v["condition"], v["action"], v["recorded"])
        for v in report["verdicts"]
        if v["object"] == str(job_id)
    ]


# --------------------------------------------------------------------------- the world


async def wait_for_ready(world: World, count: int) -> None:
    """Until the work queue holds ``count`` ready messages (a dead consumer's delivery back)."""

    async def shown() -> bool:
        return await asyncio.to_thread(ready_count, world.broker, world.queue.name) == count

    await poll_until(shown, f"{world.queue.name} to hold {count} ready message(s)", WAIT_SECONDS)


def measured(
    world: World, name: str, events: list[dict[str, Any]], jobs: dict[str, uuid.UUID], **more: Any
) -> str:
    """What a scenario measured, one line."""
    short = {v: k for k, v in jobs.items()}
    episodes = {
        k: max((r.dispatch_seq for r in world.relayed if r.job_id == v), default=0)
        for k, v in jobs.items()
    }
    figures = {
        "episodes": episodes,
        "outbox rows": [r.key.rsplit(":", 1)[1] for r in world.relayed],
        "ledger events": [
            (short[uuid.UUID(e["payload"]["object"])], *moves([e])[0])
            for e in about(events, *jobs.values())
        ],
        "ledger events in all": len(events),
        "other events (sightings)": dict(
            Counter(
                f"{e['payload']['condition']} {e['payload']['action']}"
                for e in events
                if e not in about(events, *jobs.values())
            )
        ),
        "claims": [(short[c.job_id], c.dispatch_seq, c.worker) for c in world.claims],
        "runs": dict(Counter((short[r.job_id], r.dispatch_seq) for r in world.runs)),
        "fenced drops": [
            (short[d.job_id], d.dispatch_seq, f"found {d.found_state} at {d.found_seq}")
            for d in world.drops
        ],
        **more,
    }
    return f"\nRabbitMQ {world.broker.version}, {name}: " + "; ".join(
        f"{k} {v}" for k, v in figures.items()
    )


# --------------------------------------------------------------------------- 1. requeue


async def test_a_requeued_job_is_dispatched_again_and_the_old_generation_is_fenced_off(
    world: World, env: dict[str, str], tmp_path: Path
) -> None:
    job = await enqueue(world.dsn, world.project_id)
    assert [r.key for r in await relay(world)] == [f"dispatch:{job}:1"]
    first_dispatched = (await job_row(world.dsn, job))["dispatched_at"]
    assert first_dispatched is not None

    # Worker A claims generation 1 and dies holding its lease, after the lease expired.
    claim = await asyncio.to_thread(Worker(world, "worker-A").die_holding_lease)
    assert (claim.job_id, claim.dispatch_seq, claim.attempts) == (job, 1, 1)
    await wait_for_ready(world, 1)  # the broker put the generation-1 message back

    report = await reap(env, tmp_path / "runs")
    assert verdicts_on(report, job) == [("lease_expired", "requeue", True)]
    row = await job_row(world.dsn, job)
    assert (row["state"], row["dispatch_seq"], row["attempts"], row["lease_owner"]) == (
        "ready",
        2,
        1,
        None,
    )
    rows = await outbox_rows(world.dsn, job)
    assert [r["key"] for r in rows] == [f"dispatch:{job}:1", f"dispatch:{job}:2"]
    check_dispatch_row(rows[1], job, world.project_id, 2)
    assert rows[1]["not_before"] == row["run_after"] and rows[1]["sent_at"] is None

    assert [r.key for r in await relay(world)] == [f"dispatch:{job}:2"]
    assert (await job_row(world.dsn, job))["dispatched_at"] > first_dispatched
    # Worker B receives both messages: the stale one is dropped, generation 2 runs.
    handled = await asyncio.to_thread(Worker(world, "worker-B").work, 2)
    assert sorted((d.dispatch_seq, d.message_id, d.redelivered) for d in handled) == [
        (1, f"{job}:1", True),
        (2, f"{job}:2", False),
    ]
    assert [(d.job_id, d.dispatch_seq, d.worker) for d in world.drops] == [(job, 1, "worker-B")]
    assert [(r.job_id, r.dispatch_seq, r.worker, r.committed) for r in world.runs] == [
        (job, 2, "worker-B", True)
    ]
    row = await job_row(world.dsn, job)
    assert (row["state"], row["dispatch_seq"], row["attempts"]) == ("succeeded", 2, 2)

    events = await check_world(world, dead_letters=0)
    [move] = about(events, job)
    assert moves([move]) == [("job_queue", "lease_expired", "requeue")]
    assert (move["project_id"], move["trusted"]) == (world.project_id, True)
    print(measured(world, "requeue", events, {"job": job}, problems=report["problems"]))


# --------------------------------------------------------------------------- 2. retry


async def test_an_exhausted_job_is_parked_without_a_dispatch_and_retried_at_a_new_generation(
    world: World, env: dict[str, str], tmp_path: Path
) -> None:
    job = await enqueue(world.dsn, world.project_id, max_attempts=1)
    await relay(world)
    claim = await asyncio.to_thread(Worker(world, "worker-A").die_holding_lease)
    assert (claim.attempts, claim.dispatch_seq) == (1, 1)  # attempts == max_attempts
    await wait_for_ready(world, 1)

    report = await reap(env, tmp_path / "runs")
    assert verdicts_on(report, job) == [("poison", "park", True)]
    row = await job_row(world.dsn, job)
    # parked, one attempt refunded, and no new dispatch episode
    assert (row["state"], row["dispatch_seq"], row["attempts"]) == ("awaiting_human", 1, 0)
    assert [r["key"] for r in await outbox_rows(world.dsn)] == [f"dispatch:{job}:1"]
    [gate] = await gates_of(world.dsn)
    assert (gate["kind"], gate["job_id"], gate["choices"], gate["answer"]) == (
        GATE_DELIVERY_EXHAUSTED,
        job,
        ["retry", "cancel"],
        None,
    )

    # While it is parked, the broker's generation-1 message cannot bring it back.
    await asyncio.to_thread(Worker(world, "worker-B").work, 1)
    assert [(d.dispatch_seq, d.found_state, d.found_seq) for d in world.drops] == [
        (1, "awaiting_human", 1)
    ]
    assert world.runs == []

    said = await answer_retry(env, tmp_path, gate["id"])
    assert "at a new dispatch generation" in said, said
    row = await job_row(world.dsn, job)
    assert (row["state"], row["dispatch_seq"], row["attempts"]) == ("ready", 2, 0)
    rows = await outbox_rows(world.dsn, job)
    assert [r["key"] for r in rows] == [f"dispatch:{job}:1", f"dispatch:{job}:2"]
    check_dispatch_row(rows[1], job, world.project_id, 2)
    assert [g["answer"] for g in await gates_of(world.dsn)] == ["retry"]

    assert [r.key for r in await relay(world)] == [f"dispatch:{job}:2"]
    [delivery] = await asyncio.to_thread(Worker(world, "worker-B").work, 1)
    assert (delivery.dispatch_seq, delivery.redelivered) == (2, False)
    assert [(r.job_id, r.dispatch_seq, r.committed) for r in world.runs] == [(job, 2, True)]
    assert len(world.drops) == 1
    row = await job_row(world.dsn, job)
    assert (row["state"], row["dispatch_seq"], row["attempts"]) == ("succeeded", 2, 1)

    events = await check_world(world, dead_letters=0)
    [move, answer] = about(events, job)  # the park, then the person's answer
    assert moves([move]) == [("job_queue", "poison", "park")]
    assert (answer["kind"], answer["payload"]["choice"]) == ("GateAnswered", "retry")
    assert answer["project_id"] == world.project_id
    assert (move["project_id"], move["trusted"]) == (world.project_id, True)
    print(measured(world, "delivery_exhausted retry", events, {"job": job}, answer=said))


# --------------------------------------------------------------------------- 3. dead letters


async def test_a_dead_lettered_dispatch_parks_its_job_and_a_stale_one_moves_nothing(
    world: World, broker: BrokerUnderTest, env: dict[str, str], tmp_path: Path
) -> None:
    # "stale": its worker dies holding the lease, so the reaper will requeue it to generation 2
    stale = await enqueue(world.dsn, world.project_id, kind="render.stale")
    await relay(world)
    await asyncio.to_thread(Worker(world, "worker-A").die_holding_lease)
    await wait_for_ready(world, 1)
    # "current": never claimed; every consumer that takes its dispatch dies
    current = await enqueue(world.dsn, world.project_id, kind="render.current")
    await relay(world)

    failed = await asyncio.to_thread(Worker(world, "broken").die_on_every_delivery, 2)
    assert {d.job_id for d in failed} == {current, stale}
    await wait_for_depths(broker, {world.queue.name: 0, world.queue.dead: 2})

    reports, outcomes = await reap_until_read(env, tmp_path / "runs", world.queue.dead)
    # the first pass requeued "stale" (the lease step comes before the dead letters)
    assert verdicts_on(reports[0], stale)[0] == ("lease_expired", "requeue", True)
    read = outcomes[-1]
    assert (read["depth"], read["parked_new"], read["stale_pointers"], read["unread"]) == (
        2,
        2,
        1,
        0,
    ), outcomes
    assert all(o["parked_new"] == 0 for o in outcomes[:-1]), outcomes

    # "current" is parked behind a delivery_exhausted gate, at its generation, undispatched
    row = await job_row(world.dsn, current)
    assert (row["state"], row["dispatch_seq"], row["attempts"]) == ("awaiting_human", 1, 0)
    [gate] = await gates_of(world.dsn)
    assert (gate["kind"], gate["job_id"], gate["choices"], gate["identity"]) == (
        GATE_DELIVERY_EXHAUSTED,
        current,
        ["retry", "cancel"],
        f"dead_letter:msg:{current}:1",
    )
    # ... and not as a bus.dead_letter job
    assert await fetch(world.dsn, "SELECT id FROM job WHERE kind = $1", DEAD_LETTER_JOB_KIND) == []
    letters = await fetch(world.dsn, "SELECT job_id, disposition FROM dead_letter")
    assert sorted((str(r["job_id"]), r["disposition"]) for r in letters) == sorted(
        [(str(current), "pointer_parked"), (str(stale), "stale_pointer")]
    )
    # "stale" had moved on to generation 2 when its pointer was read: recorded, nothing moved
    row = await job_row(world.dsn, stale)
    assert (row["state"], row["dispatch_seq"], row["attempts"]) == ("ready", 2, 1)
    assert [r["key"] for r in await outbox_rows(world.dsn)] == [
        f"dispatch:{stale}:1",
        f"dispatch:{current}:1",
        f"dispatch:{stale}:2",
    ]
    events = await check_ledger(world.dsn)
    assert moves(about(events, current)) == [("broker", "dead_letter", "park")]
    assert sorted(moves(about(events, stale))) == [  # two streams: no order between them
        ("broker", "dead_letter", "none"),
        ("job_queue", "lease_expired", "requeue"),
    ]
    pointers = [e for e in about(events, current, stale) if e["payload"]["source"] == "broker"]
    assert all(e["project_id"] == FLEET_PROJECT_ID and not e["trusted"] for e in pointers)

    said = await answer_retry(env, tmp_path, gate["id"])
    # parked by its dead-lettered message, not for its attempts: none was refunded
    assert "ready again, dispatched at a new generation" in said, said
    assert "one more delivery" not in said, said
    assert [r.key for r in await relay(world)] == [
        f"dispatch:{stale}:2",  # the reaper's requeue, written first
        f"dispatch:{current}:2",  # the gate's retry
    ]
    handled = await asyncio.to_thread(Worker(world, "worker-B").work, 2)
    # a new generation is a new message: its delivery budget starts afresh
    assert [(d.redelivered, d.delivery_count) for d in handled] == [(False, None)] * 2
    assert sorted((str(r.job_id), r.dispatch_seq, r.committed) for r in world.runs) == sorted(
        [(str(current), 2, True), (str(stale), 2, True)]
    )
    assert world.drops == []

    # Another pass: both letters known, nothing new, nothing moved; the broker keeps them.
    before = {(e["project_id"], e["seq"]) for e in await check_ledger(world.dsn)}
    report = await reap(env, tmp_path / "runs")
    [again] = [d for d in report["dead_letters"] if d["queue"] == world.queue.dead]
    assert (again["parked_new"], again["already_parked"], again["read_blocked"]) == (0, 2, None)
    events = await check_world(world, dead_letters=2)
    new = [e for e in events if (e["project_id"], e["seq"]) not in before]
    assert about(new, current, stale) == [], new
    assert await gates_of(world.dsn) == [{**gate, "answer": "retry"}]
    bus_gates = "SELECT id FROM human_gate WHERE kind = $1"
    assert await fetch(world.dsn, bus_gates, GATE_BUS_DEAD_LETTERED) == []
    await wait_for_depths(broker, {world.queue.name: 0, world.queue.dead: 2})
    dlq = broker.queue(world.queue.dead)
    assert read_is_safe(broker, dlq) is None, dlq  # the test's own read must not drop them
    kept = read_bodies(broker, world.queue.dead, 10)
    assert sorted(m["properties"]["message_id"] for m in kept) == sorted(
        [f"{current}:1", f"{stale}:1"]
    )
    assert [json.loads(m["payload"])["dispatch_seq"] for m in kept] == [1, 1]

    counts: dict[str, list[int | None]] = {"current": [], "stale": []}
    for d in failed:
        counts["current" if d.job_id == current else "stale"].append(d.delivery_count)
    print(
        measured(
            world,
            "dead-lettered dispatch",
            events,
            {"current": current, "stale": stale},
            **{
                "passes to read the dead-letter queue": len(outcomes),
                "blocked because": sorted({str(o["read_blocked"])[:90] for o in outcomes[:-1]}),
                "deaths (x-delivery-count seen)": counts,
                "dead letters kept": len(kept),
                "answer": said,
            },
        )
    )
