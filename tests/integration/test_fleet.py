"""A fleet of workers sharing one PostgreSQL, on real PostgreSQL and one broker (SPEC §10 "A
fleet shares one pass"): every project reaped from any worker, one whole pass per interval
fleet-wide (a turn taken in PostgreSQL, shared with ``reaper serve``), a taker that dies
holding the turn no longer than its interval, the lease reap that never switches off, and a
connection budget: the worker's own pool borrowed, none held between passes.

``bench/fleet.py`` measures the same with 64 worker processes; these prove the behaviour."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from reaper.config import Settings, load_config
from reaper.edges.hook import TURN, HookRun, QueueReaper
from reaper.jobqueue.postgres import PostgresStore
from tests.support.cli import CLOSED_BROKER_URL, reaper_env
from tests.support.services import BrokerUnderTest, on_one_broker
from tests.support.store import Job, insert_jobs, leased, query

#: The turn, the hook and its connections are PostgreSQL's; the broker is only a pass's other
#: source, so one version is enough.
pytestmark = [pytest.mark.broker, pytest.mark.postgres, on_one_broker]

#: Short enough for a test, long enough for a whole pass on a fresh vhost (its policies are
#: written, and verification waits at most half of it) on a busy 2-core machine.
INTERVAL = 6


def fleet_settings(pg_dsn: str, broker: BrokerUnderTest, **extra: str) -> Settings:
    env = reaper_env(
        pg_dsn,
        broker.management_url,
        broker.vhost,
        REAPER_QUEUE__REAP__INTERVAL_SECONDS=str(INTERVAL),
        REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS="1",
        **extra,
    )
    return load_config(None, env).settings


async def reaper_connections(pg_dsn: str) -> int:
    """Connections the reaper has open on the test database right now."""
    rows = await query(
        pg_dsn,
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = 'queue-reaper'",
    )
    return int(rows[0]["n"])


class PeakConnections:
    """Samples the reaper's connections to the test database until stopped: the peak."""

    def __init__(self, pg_dsn: str) -> None:
        self.pg_dsn = pg_dsn
        self.peak = 0
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PeakConnections:
        conn = await asyncpg.connect(self.pg_dsn)

        async def sample() -> None:
            try:
                while True:
                    n = await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND application_name = 'queue-reaper'"
                    )
                    self.peak = max(self.peak, int(n))
                    self.samples += 1
                    await asyncio.sleep(0.002)
            finally:
                await conn.close()

        self._task = asyncio.create_task(sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def events_per_job(pg_dsn: str, job_ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    rows = await query(
        pg_dsn,
        "SELECT (payload ->> 'object')::uuid AS job_id, count(*) AS n FROM event "
        "WHERE kind = 'QueueReaped' AND payload ->> 'action' IN ('requeue', 'park') "
        "AND (payload ->> 'object')::uuid = ANY($1::uuid[]) GROUP BY 1",
        job_ids,
    )
    return {r["job_id"]: int(r["n"]) for r in rows}


async def idle_loop(
    reaper: QueueReaper, project_id: uuid.UUID, until: float, runs: list[HookRun]
) -> None:
    """A worker that never finds work: it calls the hook every 0.1 s until ``until``."""
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        run = await reaper.run_if_due(project_id)
        if run.due:
            runs.append(run)
        await asyncio.sleep(0.1)


# --------------------------------------------------------------------------- every project


async def test_a_project_without_a_worker_is_reaped_by_another_projects_worker(
    pg_dsn: str, broker: BrokerUnderTest
) -> None:
    worker_project, orphan_project = uuid.uuid4(), uuid.uuid4()
    orphan = leased(orphan_project, owner="a-worker-that-died")
    stale = Job(project_id=orphan_project)  # claimable for months: stale_ready
    await insert_jobs(pg_dsn, [orphan, stale])
    reaper = QueueReaper(fleet_settings(pg_dsn, broker))

    run = await reaper.run_if_due(worker_project)

    assert run.ran and run.error is None and run.result is not None, run
    assert not run.result.unreadable, run.result.unreadable
    (job,) = await query(pg_dsn, "SELECT state, lease_owner FROM job WHERE id = $1", orphan.id)
    assert (job["state"], job["lease_owner"]) == ("ready", None)
    recorded = await query(
        pg_dsn,
        "SELECT project_id, payload ->> 'condition' AS condition FROM event "
        "WHERE kind = 'QueueReaped' AND project_id = ANY($1::uuid[]) ORDER BY seq",
        [worker_project, orphan_project],
    )
    # each verdict on its own project's stream; nothing on the calling worker's
    assert [(r["project_id"], r["condition"]) for r in recorded] == [
        (orphan_project, "lease_expired"),
        (orphan_project, "stale_ready"),
    ]


# --------------------------------------------------------------------------- one pass per interval


async def test_a_fleet_runs_one_whole_pass_per_interval_and_moves_each_lease_once(
    pg_dsn: str, broker: BrokerUnderTest
) -> None:
    settings = fleet_settings(pg_dsn, broker)
    projects = [uuid.uuid4() for _ in range(12)]
    first = [leased(projects[n % 12], owner=f"w{n}") for n in range(300)]
    await insert_jobs(pg_dsn, first)
    fleet = [QueueReaper(settings, holder=f"worker-{n}") for n in range(12)]
    runs: list[list[HookRun]] = [[] for _ in fleet]
    loop = asyncio.get_running_loop()
    until = loop.time() + 3.5 * INTERVAL

    async def more_work_later() -> list[Job]:
        await asyncio.sleep(1.5 * INTERVAL)  # leases that expire while the fleet idles
        later = [leased(projects[n % 12], owner=f"late{n}") for n in range(300)]
        await insert_jobs(pg_dsn, later)
        return later

    later, *_ = await asyncio.gather(
        more_work_later(),
        *(idle_loop(r, projects[n], until, runs[n]) for n, r in enumerate(fleet)),
    )

    passes = sorted(
        (run.turn.taken_at, n)
        for n, worker in enumerate(runs)
        for run in worker
        if run.ran
        if run.turn is not None
    )
    errors = [run.error for worker in runs for run in worker if run.error]
    assert errors == [], errors
    # over 3.5 intervals: a pass at once, then one per interval (4), never two in one
    assert len(passes) == 4, passes
    gaps = [(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(passes)]
    assert all(gap >= INTERVAL for gap in gaps), gaps
    # every worker asked, the turn went to one at a time, and the losers only asked
    asked = sum(len(worker) for worker in runs)
    lost = [run for worker in runs for run in worker if not run.ran]
    assert asked == len(passes) + len(lost)
    assert all(run.turn is not None and not run.turn.mine for run in lost)
    moved = await events_per_job(pg_dsn, [j.id for j in [*first, *later]])
    assert sorted(set(moved.values())) == [1] and len(moved) == 600, "each lease moved once"
    assert await reaper_connections(pg_dsn) == 0  # none held between passes


async def test_a_taker_that_dies_mid_pass_holds_the_turn_one_interval_at_most(
    pg_dsn: str, broker: BrokerUnderTest
) -> None:
    settings = fleet_settings(pg_dsn, broker)
    job = leased(uuid.uuid4())
    await insert_jobs(pg_dsn, [job])
    store = await PostgresStore.connect(pg_dsn, pool_size=1)
    try:
        died = await store.take_turn(TURN, INTERVAL, "a-worker-killed-mid-pass")
    finally:
        await store.close()
    assert died.mine
    survivor = QueueReaper(settings, holder="survivor", jitter=lambda: 0.0)

    refused = await survivor.run_if_due()
    assert not refused.ran and refused.turn is not None
    assert refused.turn.taken_by == "a-worker-killed-mid-pass"
    assert 0 < refused.turn.free_in_seconds <= INTERVAL
    assert not survivor.is_due()  # it comes back when the turn frees, not before
    await asyncio.sleep(survivor.seconds_until_due())

    taken = await survivor.run_if_due()
    assert taken.ran and taken.turn is not None and taken.turn.mine, taken
    assert (taken.turn.taken_at - died.taken_at) >= timedelta(seconds=INTERVAL)
    assert (taken.turn.taken_at - died.taken_at) < timedelta(seconds=INTERVAL + 1)
    assert await events_per_job(pg_dsn, [job.id]) == {job.id: 1}


async def test_serve_and_the_hooks_share_one_turn(pg_dsn: str, broker: BrokerUnderTest) -> None:
    settings = fleet_settings(pg_dsn, broker)
    serve = QueueReaper(settings, holder="serve")
    hook = QueueReaper(settings, holder="worker")

    by_serve = await serve.run_turn()
    by_hook = await hook.run_if_due()

    assert by_serve.ran and by_serve.turn is not None and by_serve.turn.mine
    assert not by_hook.ran and by_hook.turn is not None and by_hook.turn.taken_by == "serve"
    # serve comes back the moment the turn frees; a hook a little later (jitter)
    assert serve.seconds_until_due() <= INTERVAL + 0.1
    rows = await query(pg_dsn, "SELECT name, taken_by FROM reaper_turn")
    assert [(r["name"], r["taken_by"]) for r in rows] == [(TURN, "serve")]


# --------------------------------------------------------------------------- the lease reap


async def test_a_hook_switched_off_still_reaps_leases_and_reads_no_broker(
    pg_dsn: str, broker: BrokerUnderTest
) -> None:
    # The broker is unreachable: a hook switched off must not even try it.
    settings = fleet_settings(
        pg_dsn,
        broker,
        REAPER_QUEUE__REAP__ENABLED="false",
        REAPER_BUS__MANAGEMENT_URL=CLOSED_BROKER_URL,
    )
    project = uuid.uuid4()
    expired = leased(project)
    poison = leased(project, attempts=7, max_attempts=7)
    stale = Job(project_id=project)
    await insert_jobs(pg_dsn, [expired, poison, stale])

    run = await QueueReaper(settings).run_if_due(project)

    assert run.ran and run.ok and run.result is not None, run
    assert run.result.broker is None and not run.result.unreadable
    states = {
        r["id"]: r["state"]
        for r in await query(pg_dsn, "SELECT id, state FROM job WHERE project_id = $1", project)
    }
    assert states == {expired.id: "ready", poison.id: "awaiting_human", stale.id: "ready"}
    read_back = run.result.leases.listing.sample  # the moves the pass read back as it ended
    conditions = sorted(r.verdict.condition.value for r in (*read_back, *run.result.verdicts))
    assert conditions == ["lease_expired", "poison"]  # no stale_ready, nothing of the broker


# --------------------------------------------------------------------------- the connection budget


async def test_the_hook_holds_no_connection_between_passes_and_one_during(
    pg_dsn: str, broker: BrokerUnderTest
) -> None:
    await insert_jobs(pg_dsn, [leased(uuid.uuid4(), owner=f"w{n}") for n in range(2000)])
    reaper = QueueReaper(fleet_settings(pg_dsn, broker))

    async with PeakConnections(pg_dsn) as peak:
        run = await reaper.run_if_due()

    assert run.ran and run.error is None and run.result is not None, run
    assert run.result.verdict_count == 2000
    assert peak.samples > 10 and peak.peak == 1  # [database] hook_connections = 1
    assert await reaper_connections(pg_dsn) == 0


async def test_the_hook_borrows_the_workers_own_pool(pg_dsn: str, broker: BrokerUnderTest) -> None:
    jobs = [leased(uuid.uuid4(), owner=f"w{n}") for n in range(500)]
    await insert_jobs(pg_dsn, jobs)
    worker_pool = await asyncpg.create_pool(pg_dsn, min_size=2, max_size=2)
    try:
        before = await worker_pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        )
        reaper = QueueReaper(fleet_settings(pg_dsn, broker), pool=worker_pool)
        run = await reaper.run_if_due()
        after = await worker_pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        )
        # the worker's connections come back as the worker had them
        settings = await worker_pool.fetch(
            "SELECT current_setting('statement_timeout') AS timeout, "
            "current_setting('application_name') AS app, current_setting('jit') AS jit, "
            "current_setting('plan_cache_mode') AS plans"
        )
        await reaper.aclose()
        still_open = not worker_pool.is_closing()
    finally:
        await worker_pool.close()

    assert run.ran and run.error is None, run
    assert await events_per_job(pg_dsn, [j.id for j in jobs]) == {j.id: 1 for j in jobs}
    assert before == after  # not one connection opened beside the worker's own
    assert [(r["timeout"], r["app"], r["jit"], r["plans"]) for r in settings] == [
        ("0", "", "on", "auto")
    ]
    assert still_open  # closing the reaper leaves the worker's pool alone


async def test_the_hook_opens_through_the_workers_connection_factory(
    pg_dsn: str, broker: BrokerUnderTest
) -> None:
    job = leased(uuid.uuid4())
    await insert_jobs(pg_dsn, [job])
    opened: list[Any] = []

    async def factory() -> Any:
        conn = await asyncpg.connect(pg_dsn)
        opened.append(conn)
        return conn

    reaper = QueueReaper(fleet_settings(pg_dsn, broker), connection_factory=factory)
    run = await reaper.run_if_due()

    assert run.ran and run.error is None, run
    assert len(opened) == 1 and all(c.is_closed() for c in opened)  # one, closed after
    assert await events_per_job(pg_dsn, [job.id]) == {job.id: 1}
