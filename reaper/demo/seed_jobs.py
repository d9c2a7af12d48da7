"""The scenario's PostgreSQL side: the jobs it inserts, with every time relative to ``now``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID, uuid4

from reaper.demo.admin import run_scenario_query
from reaper.demo.scenario import SeededProject
from reaper.jobqueue.postgres import PostgresStore

__all__ = ["JobPlan", "Jobs", "plan_jobs"]

#: How long ago the scenario's expired leases ran out (beyond the grace), cycled.
_EXPIRED_AGO = (300, 2820, 7200, 720, 10800, 1560, 4500, 95)
#: A live lease expires this long after ``now``: an hour, so that it is still live at the end
#: of the longest run that seeds it (the chaos test, under the whole suite on a slow machine),
#: and inside the default ``longest_lease_seconds`` (two hours).
_LIVE_LEASE_SECONDS = 3600

_Row = dict[str, object]


@dataclass
class JobPlan:
    """The jobs seeded for each role the scenario gives them."""

    expired: list[UUID] = field(default_factory=list)
    poison: list[UUID] = field(default_factory=list)
    live: list[UUID] = field(default_factory=list)
    stale_heads: dict[UUID, UUID] = field(default_factory=dict)
    not_claimable: list[UUID] = field(default_factory=list)
    fresh: list[UUID] = field(default_factory=list)


class Jobs:
    """Job rows to insert, and their dependencies."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.rows: list[_Row] = []
        self.dependencies: list[tuple[UUID, UUID]] = []

    def add(
        self,
        project: SeededProject,
        kind: str,
        state: str,
        *,
        phase: str = "build",
        run_after: float = 0,
        attempts: int = 0,
        max_attempts: int = 7,
        owner: str | None = None,
        lease_expires: float | None = None,
        finished: float | None = None,
        depends_on: Sequence[UUID] = (),
    ) -> UUID:
        """One job; times are seconds relative to ``now`` (negative: in the past)."""
        job_id = uuid4()
        at = self.at
        created = min(run_after, finished if finished is not None else 0) - 60
        self.rows.append(
            {
                "id": job_id,
                "project_id": project.id,
                "kind": kind,
                "phase": phase,
                "state": state,
                "priority": 0,
                "run_after": at(run_after),
                "attempts": attempts,
                "max_attempts": max_attempts,
                "lease_owner": owner,
                "lease_expires_at": at(lease_expires) if lease_expires is not None else None,
                "idempotency_key": f"{project.name}/{kind}/{len(self.rows):06d}",
                "finished_at": at(finished) if finished is not None else None,
                "created_at": at(created),
                "updated_at": at(max(run_after, finished if finished is not None else run_after)),
            }
        )
        self.dependencies.extend((job_id, d) for d in depends_on)
        return job_id

    def at(self, seconds: float) -> datetime:
        return self.now + timedelta(seconds=seconds)

    async def insert(self, store: PostgresStore) -> None:
        columns = list(self.rows[0])
        await run_scenario_query(
            store, "scenario_insert_jobs", *([row[c] for row in self.rows] for c in columns)
        )
        if self.dependencies:
            await run_scenario_query(
                store,
                "scenario_insert_dependencies",
                [job for job, _ in self.dependencies],
                [dep for _, dep in self.dependencies],
            )


_KINDS = ("render.thumbnail", "index.document", "send.invoice", "sync.calendar")


def plan_jobs(
    jobs: Jobs,
    projects: Sequence[SeededProject],
    now: datetime,
    grace: int,
    old: int,
    fresh: int,
    expired_count: int,
) -> JobPlan:
    """The scenario's jobs, added to ``jobs`` in order, and what each is for."""
    workers = [p for p in projects if p.has_worker]
    plan = JobPlan()
    _plan_expired(jobs, plan, workers, projects[0], grace, expired_count)
    for project in workers:
        # A live lease and fresh work in every project with a worker: left alone, not stale.
        plan.live.append(
            jobs.add(
                project,
                "index.document",
                "leased",
                run_after=-120,
                attempts=1,
                owner=f"worker-{project.name}-3/pid-5100",
                lease_expires=_LIVE_LEASE_SECONDS,
            )
        )
        plan.fresh.append(jobs.add(project, "send.invoice", "ready", run_after=-fresh))
        jobs.add(project, "sync.calendar", "succeeded", run_after=-3600, attempts=1, finished=-600)
    _plan_waiting(jobs, plan, projects[1], projects[-1], old)
    return plan


def _plan_expired(
    jobs: Jobs,
    plan: JobPlan,
    workers: Sequence[SeededProject],
    alpha: SeededProject,
    grace: int,
    expired_count: int,
) -> None:
    """Expired leases, requeued by a pass, and the poison job it parks."""
    # Expired leases, round robin over the projects with workers; every third has no owner
    # on record (a worker that died before writing it).
    for i in range(expired_count):
        project = workers[i % len(workers)]
        ago = grace + _EXPIRED_AGO[i % len(_EXPIRED_AGO)] + i // len(_EXPIRED_AGO)
        owner = None if i % 3 == 2 else f"worker-{project.name}-{i % 2 + 1}/pid-{4100 + i}"
        attempts = 1 + i % 5  # below max_attempts: requeued, not parked
        plan.expired.append(
            jobs.add(
                project,
                _KINDS[i % len(_KINDS)],
                "leased",
                run_after=-(ago + 600),
                attempts=attempts,
                owner=owner,
                lease_expires=-ago,
            )
        )
    # Poison: its seventh lease ran out as well.
    plan.poison.append(
        jobs.add(
            alpha,
            "render.video",
            "leased",
            phase="render",
            run_after=-(grace + 5400),
            attempts=7,
            max_attempts=7,
            owner=f"worker-{alpha.name}-1/pid-4242",
            lease_expires=-(grace + 1200),
        )
    )


def _plan_waiting(
    jobs: Jobs, plan: JobPlan, beta: SeededProject, idle: SeededProject, old: int
) -> None:
    """Ready work waiting: behind dependencies in the second project, and in the project with
    no worker."""
    # Dependencies in the second project: its oldest ready job waits on a job still running
    # (not claimable); the next waits on one that succeeded long ago, and that one is stale.
    running = jobs.add(
        beta,
        "build.image",
        "leased",
        run_after=-(old + 9000),
        attempts=1,
        owner=f"worker-{beta.name}-2/pid-6200",
        lease_expires=_LIVE_LEASE_SECONDS,
    )
    plan.live.append(running)
    plan.not_claimable.append(
        jobs.add(
            beta,
            "deploy.image",
            "ready",
            phase="deploy",
            run_after=-(old + 7200),
            depends_on=[running],
        )
    )
    built = jobs.add(
        beta, "build.docs", "succeeded", run_after=-(old + 5400), attempts=1, finished=-old
    )
    plan.stale_heads[beta.id] = jobs.add(
        beta, "publish.docs", "ready", phase="deploy", run_after=-(old + 3600), depends_on=[built]
    )
    # The project with no worker: ready work nobody has claimed; the oldest is its head.
    head = jobs.add(idle, "render.thumbnail", "ready", run_after=-old)
    for ago in (old // 2, old // 4):
        jobs.add(idle, "render.thumbnail", "ready", run_after=-ago)
    plan.stale_heads[idle.id] = head
