"""A realistic scenario, seeded on both sides of a job queue: what `reaper demo` shows, what
the dry-run proof audits, and what chaos and load tests start from.

:func:`seed` writes into a database and a vhost the caller made for it (migrated, empty) and
returns a :class:`Scenario` naming everything it put there and what a real pass must do with
it (:attr:`Scenario.expected`). Every time is relative to the ``now`` given, and every age is
scaled to the configured thresholds, so a first real pass finds each condition below and a
second pass soon after finds nothing new:

PostgreSQL (one row set per project; the first projects have workers, the last has none):

- expired leases across the worker projects, most with an owner, some without, expired from
  minutes to hours ago: ``lease_expired``, requeued;
- a poison job (``attempts == max_attempts``, lease expired): ``poison``, parked with a
  ``delivery_exhausted`` gate;
- live leases (expiring later) and fresh ready work: left alone, not stale;
- stale ready work with dependencies: a job whose dependency succeeded long ago (its project's
  stale head) and an older one whose dependency is still running (not claimable, so not the
  head); ``stale_ready``, surfaced once;
- a project with no worker at all: ready work nobody has claimed for long, ``stale_ready``.

RabbitMQ (the vhost of the client given):

- a quorum work queue per project, ``{prefix}.jobs.<project>``, dead-lettering to the owned
  quorum dead-letter queue ``{prefix}.jobs.dead``, which holds dead letters with realistic
  ``x-death`` headers (JSON bodies with and without a message id, and a body that is not
  JSON): each parked as a ``bus.dead_letter`` job, never deleted;
- an owned classic queue with a consumerless backlog of old messages, ``{prefix}.webhooks``:
  ``stale_ready`` (head-message age), surfaced;
- a delay tier, ``{prefix}.jobs.wait.w5m``, with ``x-message-ttl`` and messages younger than
  it: not stale;
- a foreign tenant: ``celery`` with old messages and no consumer (surfaced, never touched) and
  its dead-letter queue ``celery.dead`` (surfaced, never read);
- the declared policies as a first reconcile wrote them, then one drifted by hand: the quorum
  policy's ``delivery-limit`` changed, which the next real pass puts back.

What no management API call can produce is left out: ``holder_gone`` and the missing consumer
timeout both need unacknowledged messages, that is a live AMQP consumer.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from reaper import policies
from reaper.broker import ManagementClient
from reaper.config import Settings
from reaper.domain import BrokerFacts, QueueStats
from reaper.errors import BrokerUnavailable
from reaper.store import PostgresStore, run_scenario_query

__all__ = [
    "PROJECT_NAMES",
    "Expected",
    "Scenario",
    "SeededLetter",
    "SeededProject",
    "seed",
]

#: The projects' names, in order; past these, ``p<n>``.
PROJECT_NAMES = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")

#: How long ago the scenario's expired leases ran out (beyond the grace), cycled.
_EXPIRED_AGO = (300, 2820, 7200, 720, 10800, 1560, 4500, 95)
#: The delay tier's message TTL (5 minutes), and how old its messages are: well inside it.
_DELAY_TTL_MS = 300_000
_DELAY_MESSAGE_AGE = 30
#: A live lease expires this long after ``now``.
_LIVE_LEASE_SECONDS = 900

_Row = dict[str, Any]


@dataclass(frozen=True)
class SeededProject:
    name: str
    id: UUID
    #: Its quorum work queue on the broker.
    work_queue: str
    #: False for the project nobody works on.
    has_worker: bool


@dataclass(frozen=True)
class SeededLetter:
    """A dead letter published to the owned dead-letter queue."""

    message_id: str | None
    body: str
    is_json: bool
    origin_queue: str
    reason: str


@dataclass(frozen=True)
class Expected:
    """What a real pass over the fresh scenario must do (and a dry run must only report)."""

    #: Job ids requeued (``lease_expired``).
    requeued: frozenset[str]
    #: Job ids parked (``poison``).
    parked: frozenset[str]
    #: Project id -> the job surfaced as its stale claimable head (``stale_ready``).
    stale_heads: Mapping[str, str]
    #: ``(condition, queue)`` of every broker verdict surfaced.
    surfaced_queues: frozenset[tuple[str, str]]
    #: Owned dead-letter queue -> how many dead letters a pass parks from it.
    parked_dead_letters: Mapping[str, int]
    #: The policy a real pass updates (drifted), if any.
    updated_policy: str | None


@dataclass(frozen=True)
class Scenario:
    now: datetime
    vhost: str
    broker: BrokerFacts
    projects: tuple[SeededProject, ...]
    #: Every job row inserted.
    jobs: int
    expired_leases: tuple[UUID, ...]
    poison: tuple[UUID, ...]
    #: Leased, not expired: left alone.
    live_leases: tuple[UUID, ...]
    #: Project id -> the job that is its stale claimable head.
    stale_heads: Mapping[UUID, UUID]
    #: Ready and due, but a dependency is still running: not claimable.
    not_claimable: tuple[UUID, ...]
    #: Ready and due, recently: claimable, not stale.
    fresh_ready: tuple[UUID, ...]
    #: Every queue declared: name -> type.
    queues: Mapping[str, str]
    #: Messages published per queue.
    messages: Mapping[str, int]
    dead_letter_queue: str
    dead_letters: tuple[SeededLetter, ...]
    #: Queues of another tenant: never read, never touched.
    foreign_queues: tuple[str, ...]
    foreign_dead_letter_queue: str
    #: Queues whose head message is older than the threshold, with no consumer.
    stale_queues: tuple[str, ...]
    delay_queue: str
    #: The policies written as a first reconcile would, and the one then changed by hand.
    policies_written: tuple[str, ...]
    drifted_policy: str | None
    drift: str = ""

    @property
    def no_worker_project(self) -> SeededProject:
        return next(p for p in self.projects if not p.has_worker)

    @property
    def expected(self) -> Expected:
        surfaced = {("stale_ready", q) for q in self.stale_queues}
        surfaced.add(("dead_letter", self.foreign_dead_letter_queue))
        return Expected(
            requeued=frozenset(str(j) for j in self.expired_leases),
            parked=frozenset(str(j) for j in self.poison),
            stale_heads={str(p): str(j) for p, j in self.stale_heads.items()},
            surfaced_queues=frozenset(surfaced),
            parked_dead_letters={self.dead_letter_queue: len(self.dead_letters)},
            updated_policy=self.drifted_policy,
        )

    def describe(self) -> list[str]:
        """A few lines saying what was seeded, for a person."""
        worker = [p.name for p in self.projects if p.has_worker]
        idle = [p.name for p in self.projects if not p.has_worker]
        broker_lines = [
            f"  {name} ({kind}): {self.messages.get(name, 0)} message(s)" + _queue_role(self, name)
            for name, kind in self.queues.items()
        ]
        return [
            f"PostgreSQL: {self.jobs} jobs in {len(self.projects)} projects "
            f"({', '.join(worker)} with workers; {', '.join(idle)} with none)",
            "  "
            + ", ".join(
                f"{p.name} = {p.id}" + ("" if p.has_worker else " (no worker)")
                for p in self.projects
            ),
            f"  {len(self.expired_leases)} expired lease(s), {len(self.poison)} poison job(s), "
            f"{len(self.live_leases)} live lease(s), {len(self.fresh_ready)} fresh ready job(s)",
            f"  {len(self.stale_heads)} project(s) with stale claimable work (one behind a "
            f"dependency that succeeded long ago), {len(self.not_claimable)} job(s) waiting on a "
            "dependency still running",
            f"RabbitMQ {self.broker.version}, vhost {self.vhost!r}: {len(self.queues)} queues",
            *broker_lines,
            "  policies: "
            + (", ".join(self.policies_written) or "none writable on this version")
            + (f"; drifted by hand: {self.drift}" if self.drifted_policy else ""),
        ]


def _queue_role(scenario: Scenario, name: str) -> str:
    if name == scenario.dead_letter_queue:
        return ", owned dead-letter queue (x-death headers; JSON and non-JSON bodies)"
    if name == scenario.foreign_dead_letter_queue:
        return ", a foreign tenant's dead-letter queue"
    if name in scenario.foreign_queues:
        return ", a foreign tenant's queue, no consumer, old messages"
    if name == scenario.delay_queue:
        return f", delay tier (x-message-ttl {_DELAY_TTL_MS} ms), messages younger than it"
    if name in scenario.stale_queues:
        return ", owned, no consumer, old messages"
    idle = scenario.no_worker_project.work_queue
    return ", work queue of the project with no worker" if name == idle else ", work queue"


# --------------------------------------------------------------------------- seeding


async def seed(
    store: PostgresStore,
    broker: ManagementClient,
    *,
    now: datetime,
    settings: Settings | None = None,
    vhost: str | None = None,
    projects: int = 3,
    expired_leases: int = 4,
    dead_letters: int = 3,
    settle_seconds: float = 45.0,
) -> Scenario:
    """Seed the scenario into ``store`` (a migrated database of the caller's own) and into
    ``vhost`` (default: the client's; it must exist, empty) on ``broker``, and wait until the
    broker's statistics show all of it (a queue declared a moment ago is listed without counts
    or policy for a few seconds: a pass then would measure nothing).

    ``settings`` supplies the thresholds the ages are scaled to and the policies' parameters
    (default: the built-in defaults). ``projects`` is at least 3 (a project with leases and the
    poison job, one with dependencies, one with no worker). Raises ``ValueError`` for bad
    arguments, :class:`~reaper.errors.SourceUnreadable` when a service fails.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if projects < 3:
        raise ValueError(f"the scenario needs at least 3 projects, not {projects}")
    if expired_leases < 0 or dead_letters < 1:
        raise ValueError("expired_leases must be >= 0 and dead_letters >= 1")
    settings = settings or Settings()
    vhost = broker.vhost if vhost is None else vhost
    reap = settings.queue.reap
    prefix = settings.bus.prefix
    stale = reap.stale_ready_seconds
    # Ages: "long ago" is well past the threshold, "fresh" well inside it.
    old = max(3 * stale, 2700)
    fresh = max(1, min(60, stale // 10))

    seeded = [
        SeededProject(
            name=PROJECT_NAMES[i] if i < len(PROJECT_NAMES) else f"p{i}",
            id=uuid4(),
            work_queue=f"{prefix}.jobs."
            + (PROJECT_NAMES[i] if i < len(PROJECT_NAMES) else f"p{i}"),
            has_worker=i < projects - 1,
        )
        for i in range(projects)
    ]
    jobs = _Jobs(now)
    plan = _plan_jobs(jobs, seeded, now, reap.lease_grace_seconds, old, fresh, expired_leases)

    facts = await broker.facts(declared_consumer_timeout_ms=reap.consumer_timeout_seconds * 1000)
    queues, messages, letters, written, drifted, drift = await _seed_broker(
        broker, vhost, settings, facts, seeded, now, old, dead_letters
    )
    await jobs.insert(store)

    scenario = Scenario(
        now=now,
        vhost=vhost,
        broker=facts,
        projects=tuple(seeded),
        jobs=len(jobs.rows),
        expired_leases=tuple(plan["expired"]),
        poison=tuple(plan["poison"]),
        live_leases=tuple(plan["live"]),
        stale_heads=dict(plan["stale_heads"]),
        not_claimable=tuple(plan["not_claimable"]),
        fresh_ready=tuple(plan["fresh"]),
        queues=queues,
        messages=messages,
        dead_letter_queue=f"{prefix}.jobs.dead",
        dead_letters=tuple(letters),
        foreign_queues=("celery",),
        foreign_dead_letter_queue="celery.dead",
        stale_queues=(f"{prefix}.webhooks", "celery"),
        delay_queue=f"{prefix}.jobs.wait.w5m",
        policies_written=tuple(written),
        drifted_policy=drifted,
        drift=drift,
    )
    desired = policies.desired_for(settings, facts)
    await _settle(broker, vhost, scenario, desired, settle_seconds)
    return scenario


# --------------------------------------------------------------------------- PostgreSQL


class _Jobs:
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


def _plan_jobs(
    jobs: _Jobs,
    projects: Sequence[SeededProject],
    now: datetime,
    grace: int,
    old: int,
    fresh: int,
    expired_count: int,
) -> dict[str, Any]:
    workers = [p for p in projects if p.has_worker]
    alpha, beta, idle = projects[0], projects[1], projects[-1]
    plan: dict[str, Any] = {
        "expired": [],
        "poison": [],
        "live": [],
        "stale_heads": {},
        "not_claimable": [],
        "fresh": [],
    }
    # Expired leases, round robin over the projects with workers; every third has no owner
    # on record (a worker that died before writing it).
    for i in range(expired_count):
        project = workers[i % len(workers)]
        ago = grace + _EXPIRED_AGO[i % len(_EXPIRED_AGO)] + i // len(_EXPIRED_AGO)
        owner = None if i % 3 == 2 else f"worker-{project.name}-{i % 2 + 1}/pid-{4100 + i}"
        attempts = 1 + i % 5  # below max_attempts: requeued, not parked
        plan["expired"].append(
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
    plan["poison"].append(
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
    for project in workers:
        # A live lease and fresh work in every project with a worker: left alone, not stale.
        plan["live"].append(
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
        plan["fresh"].append(jobs.add(project, "send.invoice", "ready", run_after=-fresh))
        jobs.add(project, "sync.calendar", "succeeded", run_after=-3600, attempts=1, finished=-600)
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
    plan["live"].append(running)
    plan["not_claimable"].append(
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
    plan["stale_heads"][beta.id] = jobs.add(
        beta, "publish.docs", "ready", phase="deploy", run_after=-(old + 3600), depends_on=[built]
    )
    # The project with no worker: ready work nobody has claimed; the oldest is its head.
    head = jobs.add(idle, "render.thumbnail", "ready", run_after=-old)
    for ago in (old // 2, old // 4):
        jobs.add(idle, "render.thumbnail", "ready", run_after=-ago)
    plan["stale_heads"][idle.id] = head
    return plan


# --------------------------------------------------------------------------- RabbitMQ


async def _seed_broker(
    broker: ManagementClient,
    vhost: str,
    settings: Settings,
    facts: BrokerFacts,
    projects: Sequence[SeededProject],
    now: datetime,
    old: int,
    dead_letter_count: int,
) -> tuple[dict[str, str], dict[str, int], list[SeededLetter], list[str], str | None, str]:
    prefix = settings.bus.prefix
    dead = f"{prefix}.jobs.dead"
    webhooks = f"{prefix}.webhooks"
    delay = f"{prefix}.jobs.wait.w5m"
    idle = projects[-1]
    epoch = int(now.timestamp())

    queues: dict[str, tuple[str, dict[str, Any]]] = {
        p.work_queue: (
            "quorum",
            {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead},
        )
        for p in projects
    }
    queues[dead] = ("quorum", {})
    queues[webhooks] = ("classic", {})
    queues[delay] = (
        "classic",
        {
            "x-message-ttl": _DELAY_TTL_MS,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": projects[0].work_queue,
        },
    )
    queues["celery"] = ("classic", {})
    queues["celery.dead"] = ("classic", {})
    for name, (kind, arguments) in queues.items():
        await broker.declare_queue(name, queue_type=kind, arguments=arguments, vhost=vhost)

    written, drifted, drift = await _write_policies(broker, vhost, settings, facts)

    messages: dict[str, int] = {}

    async def publish(queue: str, body: str, properties: Mapping[str, Any]) -> None:
        if not await broker.publish(queue, body, properties=properties, vhost=vhost):
            raise BrokerUnavailable(f"a message to {queue!r} in vhost {vhost!r} was not routed")
        messages[queue] = messages.get(queue, 0) + 1

    # Work waiting on quorum queues (which report no head-message age): a little on the first
    # project's, more on the idle project's.
    for project, count in ((projects[0], 1), (idle, 3)):
        for n in range(count):
            job = str(uuid4())
            await publish(
                project.work_queue,
                json.dumps({"job_id": job, "kind": "render.thumbnail", "project": project.name}),
                _json_properties(job, epoch - 60 * (n + 1)),
            )
    # The owned classic outbox nobody consumes: its head message is long past the threshold.
    for n in range(4):
        event = str(uuid4())
        await publish(
            webhooks,
            json.dumps({"event": "invoice.paid", "id": event, "attempt": 1}),
            _json_properties(event, epoch - old - 3600 + 300 * n),
        )
    # The delay tier: messages younger than their TTL are where they should be.
    for n in range(2):
        job = str(uuid4())
        await publish(
            delay,
            json.dumps({"job_id": job, "retry_in": "5m"}),
            _json_properties(job, epoch - _DELAY_MESSAGE_AGE - n),
        )
    # The foreign tenant: Celery tasks with no worker, and its own dead letters.
    for n in range(5):
        task = str(uuid4())
        await publish(
            "celery",
            json.dumps([[n], {}, {"callbacks": None, "errbacks": None, "chain": None}]),
            {
                "content_type": "application/json",
                "content_encoding": "utf-8",
                "correlation_id": task,
                "delivery_mode": 2,
                "priority": 0,
                "timestamp": epoch - old - 60 * n,
                "headers": {"lang": "py", "task": "billing.tasks.send_reminder", "id": task},
            },
        )
    for n in range(2):
        await publish(
            "celery.dead",
            json.dumps([[n], {}, {}]),
            {
                "content_type": "application/json",
                "delivery_mode": 2,
                "headers": _death_headers("celery", "rejected", epoch - 7200 - n, count=1),
            },
        )
    # Dead letters on the owned dead-letter queue, as RabbitMQ writes them.
    letters = _dead_letters(projects, epoch, dead_letter_count)
    for letter in letters:
        properties: dict[str, Any] = {
            "delivery_mode": 2,
            "headers": _death_headers(
                letter.origin_queue,
                letter.reason,
                epoch - 3600,
                count=20 if letter.reason == "delivery_limit" else 1,
            ),
        }
        if letter.is_json:
            properties["content_type"] = "application/json"
        if letter.message_id is not None:
            properties["message_id"] = letter.message_id
        await publish(dead, letter.body, properties)

    return (
        {name: kind for name, (kind, _) in queues.items()},
        messages,
        letters,
        written,
        drifted,
        drift,
    )


def _json_properties(message_id: str, timestamp: int) -> dict[str, Any]:
    return {
        "content_type": "application/json",
        "delivery_mode": 2,
        "message_id": message_id,
        "timestamp": timestamp,
    }


def _death_headers(queue: str, reason: str, when: int, *, count: int) -> dict[str, Any]:
    """The headers RabbitMQ writes on a message it dead-letters (3.x and 4.0)."""
    return {
        "x-death": [
            {
                "count": count,
                "reason": reason,
                "queue": queue,
                "time": when,
                "exchange": "",
                "routing-keys": [queue],
            }
        ],
        "x-first-death-exchange": "",
        "x-first-death-queue": queue,
        "x-first-death-reason": reason,
    }


def _dead_letters(projects: Sequence[SeededProject], epoch: int, count: int) -> list[SeededLetter]:
    """``count`` dead letters cycling three shapes: a JSON job with a message id that hit the
    delivery limit, a JSON job without one that a consumer rejected, a body that is not JSON."""
    letters = []
    for n in range(count):
        project = projects[n % len(projects)]
        shape = n % 3
        if shape == 0:
            job = str(uuid4())
            letters.append(
                SeededLetter(
                    message_id=job,
                    body=json.dumps({"job_id": job, "kind": "render.video", "n": n}),
                    is_json=True,
                    origin_queue=project.work_queue,
                    reason="delivery_limit",
                )
            )
        elif shape == 1:
            letters.append(
                SeededLetter(
                    message_id=None,
                    body=json.dumps({"kind": "index.document", "doc": f"doc-{epoch}-{n}"}),
                    is_json=True,
                    origin_queue=project.work_queue,
                    reason="rejected",
                )
            )
        else:
            letters.append(
                SeededLetter(
                    message_id=None,
                    body=f"resize 4096x4096 /srv/uploads/{epoch}-{n}.png (legacy text job)",
                    is_json=False,
                    origin_queue=project.work_queue,
                    reason="rejected",
                )
            )
    return letters


async def _write_policies(
    broker: ManagementClient, vhost: str, settings: Settings, facts: BrokerFacts
) -> tuple[list[str], str | None, str]:
    """Write every declared policy this broker can hold, as a first reconcile would, then
    change the quorum policy's delivery limit by hand: the drift a real pass puts back."""
    desired = policies.desired_for(settings, facts)
    written: list[str] = []
    drifted: str | None = None
    drift = ""
    for d in desired:
        if not d.writable:
            continue
        definition = dict(d.definition)
        limit = definition.get("delivery-limit")
        if drifted is None and isinstance(limit, int) and limit > 0:
            definition["delivery-limit"] = limit * 5
            drifted = d.name
            drift = f"{d.name} delivery-limit {limit * 5} (declared {limit})"
        await broker.put_policy(
            d.name,
            definition,
            pattern=d.pattern,
            apply_to=d.apply_to,
            priority=d.priority,
            vhost=vhost,
        )
        written.append(d.name)
    return written, drifted, drift


async def _settle(
    broker: ManagementClient,
    vhost: str,
    scenario: Scenario,
    desired: Sequence[policies.DesiredPolicy],
    within_seconds: float,
) -> None:
    """Wait until the broker lists every queue with its counts, its policy in force and, for
    the classic queues whose messages carry one, the head message's timestamp."""
    deadline = time.monotonic() + within_seconds
    while True:
        listed = {q.name: q for q in await broker.list_queues(vhost)}
        pending = [
            name for name in scenario.queues if not _settled(listed.get(name), scenario, desired)
        ]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise BrokerUnavailable(
                "the broker did not show the seeded queues' statistics within "
                f"{within_seconds:g} s (still waiting for: {', '.join(pending)})"
            )
        await asyncio.sleep(0.5)


def _settled(
    queue: QueueStats | None, scenario: Scenario, desired: Sequence[policies.DesiredPolicy]
) -> bool:
    if queue is None or not queue.counts_known or not queue.policy_known:
        return False
    if queue.messages != scenario.messages.get(queue.name, 0):
        return False
    timestamped = (*scenario.stale_queues, scenario.delay_queue)
    if queue.name in timestamped and queue.head_message_timestamp is None:
        return False
    carrying = {d.name for d in desired if d.writable and d.selects(queue)}
    return not carrying or queue.policy in carrying
