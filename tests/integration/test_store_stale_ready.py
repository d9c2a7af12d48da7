"""Stale ready (d): per project, the claimable job that has waited longest, index-driven."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import asyncpg
import pytest

from reaper.core.domain import ClaimableHead
from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import QUERIES
from tests.support.store import NOW, Job, add_dependency, insert_jobs

pytestmark = pytest.mark.postgres

H = timedelta(hours=1)


def _by_project(heads: list[ClaimableHead]) -> dict[uuid.UUID, ClaimableHead]:
    assert len({h.project_id for h in heads}) == len(heads), "one head per project"
    return {h.project_id: h for h in heads}


async def test_every_project_reports_its_oldest_claimable_job(
    pg_dsn: str, store: PostgresStore
) -> None:
    a, b, idle = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    a_old, a_new = Job(a, run_after=NOW - 3 * H), Job(a, run_after=NOW - H)
    a_leased = Job(
        a, state="leased", run_after=NOW - 9 * H, lease_owner="w", lease_expires_at=NOW + H
    )
    a_done = Job(a, state="succeeded", run_after=NOW - 9 * H, finished_at=NOW - 8 * H)
    b_only = Job(b, run_after=NOW - 2 * H, kind="deploy")
    idle_future = Job(idle, run_after=NOW + H)  # not due: nothing claimable
    # a project nobody works on (no worker, no lease ever) is measured like any other
    await insert_jobs(pg_dsn, [a_new, a_old, a_leased, a_done, b_only, idle_future])

    heads = _by_project(await store.claimable_heads(NOW, frozenset()))

    assert set(heads) == {a, b}
    assert heads[a] == ClaimableHead(a, a_old.id, "build", a_old.run_after)
    assert heads[b] == ClaimableHead(b, b_only.id, "deploy", b_only.run_after)
    only_b = await store.claimable_heads(NOW, frozenset(), project_id=b)
    assert only_b == [heads[b]]
    assert await store.claimable_heads(NOW, frozenset(), project_id=idle) == []


async def test_dependencies_gate_and_date_claimability(pg_dsn: str, store: PostgresStore) -> None:
    p = uuid.uuid4()
    dep_running = Job(p, state="leased", lease_owner="w", lease_expires_at=NOW + H)
    dep_done = Job(p, state="succeeded", finished_at=NOW - 30 * timedelta(minutes=1))
    dep_failed = Job(p, state="failed", finished_at=NOW - 5 * H)
    blocked = Job(p, run_after=NOW - 5 * H)  # waits on a running dependency
    doomed = Job(p, run_after=NOW - 6 * H)  # waits on a failed one: never claimable
    after_dep = Job(p, run_after=NOW - 4 * H)  # claimable since its dependency succeeded
    await insert_jobs(pg_dsn, [dep_running, dep_done, dep_failed, blocked, doomed, after_dep])
    await add_dependency(pg_dsn, blocked.id, dep_running.id)
    await add_dependency(pg_dsn, doomed.id, dep_failed.id)
    await add_dependency(pg_dsn, after_dep.id, dep_done.id)

    [head] = await store.claimable_heads(NOW, frozenset())
    assert head.job_id == after_dep.id
    assert head.claimable_since == dep_done.finished_at  # the later of run_after and success

    # a job that came due later but was claimable earlier is the one that waited longest
    plain = Job(p, run_after=NOW - 2 * H)
    await insert_jobs(pg_dsn, [plain])
    [head] = await store.claimable_heads(NOW, frozenset())
    # after_dep came due first but became claimable 30 minutes ago; plain, 2 hours ago
    assert (head.job_id, head.claimable_since) == (plain.id, plain.run_after)


async def test_the_head_is_the_earliest_claimable_not_the_earliest_run_after(
    pg_dsn: str, store: PostgresStore
) -> None:
    p = uuid.uuid4()
    dep = Job(p, state="succeeded", finished_at=NOW - H)
    first_due = Job(p, run_after=NOW - 3 * H)  # due first, claimable only an hour ago
    plain = Job(p, run_after=NOW - 2 * H)  # due later, claimable two hours ago
    await insert_jobs(pg_dsn, [dep, first_due, plain])
    await add_dependency(pg_dsn, first_due.id, dep.id)
    [head] = await store.claimable_heads(NOW, frozenset())
    assert (head.job_id, head.claimable_since) == (plain.id, plain.run_after)


async def test_only_known_phases_are_claimable_when_declared(
    pg_dsn: str, store: PostgresStore
) -> None:
    p = uuid.uuid4()
    unknown = Job(p, run_after=NOW - 5 * H, phase="from_a_newer_release")
    build = Job(p, run_after=NOW - 2 * H, phase="build")
    await insert_jobs(pg_dsn, [unknown, build])
    assert (await store.claimable_heads(NOW, frozenset()))[0].job_id == unknown.id
    known = frozenset({"build", "review"})
    assert (await store.claimable_heads(NOW, known))[0].job_id == build.id
    assert await store.claimable_heads(NOW, frozenset({"review"})) == []


async def test_the_measurement_is_index_driven(pg_dsn: str, store: PostgresStore) -> None:
    projects = [uuid.uuid4() for _ in range(40)]
    jobs = []
    for i in range(6000):
        p = projects[i % 40]
        state = ["succeeded", "succeeded", "succeeded", "ready", "leased", "failed"][i // 40 % 6]
        jobs.append(
            Job(
                p,
                state=state,
                run_after=NOW - timedelta(minutes=i % 500),
                lease_owner="w" if state == "leased" else None,
                lease_expires_at=NOW + H if state == "leased" else None,
                finished_at=NOW - H if state in ("succeeded", "failed") else None,
            )
        )
    await insert_jobs(pg_dsn, jobs)
    for job in [j for j in jobs if j.state == "ready"][
        :100
    ]:  # some ready jobs wait on a finished one
        await add_dependency(pg_dsn, job.id, jobs[0].id)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("ANALYZE job; ANALYZE job_dependency")
        for phases in ([], ["build"]):
            plan = await conn.fetchval(
                f"EXPLAIN (FORMAT JSON) {QUERIES['claimable_heads']}".rstrip(";"),
                NOW,
                phases,
                None,
            )
            nodes = list(_nodes(json.loads(plan)[0]["Plan"]))
            on_job = [n for n in nodes if n.get("Relation Name") == "job"]
            assert on_job and all(n["Node Type"] != "Seq Scan" for n in on_job), on_job
            assert any(n.get("Index Name") == "job_ready_project_run_after_idx" for n in on_job)
    finally:
        await conn.close()
    heads = await store.claimable_heads(NOW, frozenset())
    assert len(heads) == 40


def _nodes(plan: dict) -> list[dict]:  # type: ignore[type-arg]
    out = [plan]
    for child in plan.get("Plans", []):
        out.extend(_nodes(child))
    return out
