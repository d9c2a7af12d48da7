"""The reaper's promises as checks over the database and the broker, shared by the proof tests
(``test_chaos.py``, ``test_source_failures.py``, ``test_load.py``). No tests here.

A proof test seeds a scenario through the helpers below, which record what was seeded in a
:class:`Seeded` (the expectation); it then runs real passes, and :func:`check_invariants` reads
everything back and asserts (SPEC §1, §3):

- **every moved lease has exactly one event and every event its move**: the ``requeue`` and
  ``park`` events of the ``job_queue`` source are, job by job and in ``seq`` order, exactly the
  lease episodes seeded (a prefix of them while a test is not converged); each event is on its
  job's project stream, with the condition its action implies (``lease_expired`` / ``poison``);
  the job is in the state its last event says, with the move's ``now`` as its ``updated_at``
  (the move and its event commit in one transaction, so they share it); a job whose episode has
  no event yet is still leased exactly as seeded; no other job is moved and no event names a job
  that was not seeded;
- **park events ↔ delivery_exhausted gates**: one gate per parked episode (identity
  ``delivery_exhausted:<job>:<expiry>``), no gate without its park event;
- **no gate duplicated**: every gate has an identity and identities are unique; every
  ``bus_dead_lettered`` gate has its ``bus.dead_letter`` job (idempotency key = identity), its
  ``dead_letter`` row and exactly one untrusted ``park`` event on the fleet stream, and none of
  these exists without the others;
- **every dead letter still on the broker**: each owned dead-letter queue still holds exactly the
  bodies seeded (its depth, and at the very end the bodies themselves, read with
  ``reject_requeue_true`` once the read is proven unable to drop anything), each parked letter is
  one of them, and the queues it must never read (a foreign tenant's, an owned consumerless
  backlog) hold what they held, none of it ever delivered (``redelivered`` false);
- **ledger streams gapless**: ``seq`` is ``1..n`` on every stream, the host's own events
  included (the host may append to the same streams);
- **digests**: every event's digest is the sha256 of its payload's canonical JSON;
- **sightings**: on every sighting key, records alternate ``surface``, ``cleared``, ``surface``...
  (recorded when first seen and again only after it cleared; never twice in a row).

Every check collects its problems and :func:`check_invariants` fails once, naming all of them.
It returns a :class:`Summary` of what it counted, so a test can assert the check was not vacuous
(events > 0, gates == expected).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
from test_store_support import Job, insert_jobs, query

import reaper
from reaper.config import Settings
from reaper.core.canonical import canonical_json
from reaper.core.domain import (
    DEAD_LETTER_JOB_KIND,
    EVENT_KIND,
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
)
from reaper.demo.scenario import Scenario
from tests.conftest import BrokerUnderTest

#: The directory holding the ``reaper`` package this test process imported: the processes a
#: test starts run that very code.
PACKAGE_ROOT = str(Path(reaper.__file__).resolve().parents[1])

#: How often ``run_reaper`` asks its ``kill_when`` whether to kill the process now.
KILL_POLL_SECONDS = 0.005

#: Requests at once when publishing through the management API (no batch publish there).
PUBLISHERS = 8

#: How long the broker's statistics may lag behind what a queue holds.
STATS_WAIT_SECONDS = 30.0

#: The default owned quorum dead-letter queue and the classic queue its letters died on.
OWNED_DLQ = "vibey.jobs.dead"
OWNED_ORIGIN = "vibey.jobs"
#: A foreign dead-letter queue: surfaced, never read, never touched.
FOREIGN_DLQ = "celery.dead"

DEAD_LETTER_PREFIX = "dead_letter:"


# --------------------------------------------------------------------------- the expectation


@dataclass(frozen=True)
class Episode:
    """One lease a test seeded as expired: the reaper must move it exactly once."""

    job_id: uuid.UUID
    project_id: uuid.UUID
    lease_owner: str | None
    lease_expires_at: datetime
    attempts: int
    max_attempts: int

    @property
    def action(self) -> str:
        return "park" if self.attempts >= self.max_attempts else "requeue"

    @property
    def condition(self) -> str:
        return "poison" if self.action == "park" else "lease_expired"

    @property
    def gate_identity(self) -> str:
        expired = self.lease_expires_at.astimezone(UTC).isoformat()
        return f"{GATE_DELIVERY_EXHAUSTED}:{self.job_id}:{expired}"


@dataclass
class Seeded:
    """What a proof test seeded, and so what the invariants expect."""

    #: Each seeded job's lease episodes, in the order they were seeded.
    episodes: dict[uuid.UUID, list[Episode]] = field(default_factory=dict)
    #: Owned dead-letter queue -> every body it holds (distinct bodies).
    dead_letters: dict[str, list[str]] = field(default_factory=dict)
    #: Queue -> how many messages it holds, for queues the reaper must never read nor touch
    #: (a foreign tenant's, an owned consumerless backlog): depth unchanged, nothing
    #: redelivered.
    untouched: dict[str, int] = field(default_factory=dict)

    @property
    def all_episodes(self) -> list[Episode]:
        return [e for episodes in self.episodes.values() for e in episodes]

    def expected_moves(self) -> Counter[str]:
        return Counter(e.action for e in self.all_episodes)

    @property
    def dead_letter_count(self) -> int:
        return sum(len(bodies) for bodies in self.dead_letters.values())


@dataclass
class Summary:
    """What :func:`check_invariants` counted (for non-vacuity assertions and reports)."""

    events: int = 0
    streams: int = 0
    lease_events: Counter[str] = field(default_factory=Counter)
    episodes_moved: int = 0
    episodes_pending: int = 0
    delivery_exhausted_gates: int = 0
    dead_letter_gates: int = 0
    dead_letter_parks: int = 0
    sightings: Counter[str] = field(default_factory=Counter)
    dead_letters_on_broker: dict[str, int] = field(default_factory=dict)
    untouched_on_broker: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- seeding: PostgreSQL


async def seed_expired_leases(
    dsns: Sequence[str],
    seeded: Seeded,
    count: int,
    projects: Sequence[uuid.UUID],
    rng: random.Random,
    *,
    now: datetime,
    poison_every: int = 10,
    max_attempts: int = 7,
) -> list[Episode]:
    """Insert ``count`` leased jobs whose leases expired up to an hour before ``now`` (every
    ``poison_every``-th with its attempts spent) into every database of ``dsns`` alike."""
    jobs: list[Job] = []
    episodes: list[Episode] = []
    for i in range(count):
        poison = poison_every > 0 and i % poison_every == 0
        job = Job(
            project_id=rng.choice(projects),
            state="leased",
            kind=rng.choice(["build", "test", "deploy"]),
            attempts=max_attempts if poison else rng.randint(1, max_attempts - 1),
            max_attempts=max_attempts,
            lease_owner=f"worker-{rng.randint(1, 40)}",
            lease_expires_at=now - timedelta(seconds=rng.randint(5, 3600), microseconds=i),
            id=uuid.UUID(int=rng.getrandbits(128), version=4),
        )
        jobs.append(job)
        assert job.lease_owner is not None and job.lease_expires_at is not None
        episode = Episode(
            job.id,
            job.project_id,
            job.lease_owner,
            job.lease_expires_at,
            job.attempts,
            job.max_attempts,
        )
        episodes.append(episode)
        seeded.episodes.setdefault(job.id, []).append(episode)
    for dsn in dsns:
        await insert_jobs(dsn, jobs)
    return episodes


async def relet(
    dsns: Sequence[str],
    seeded: Seeded,
    job_ids: Iterable[uuid.UUID],
    rng: random.Random,
    *,
    now: datetime,
) -> list[Episode]:
    """A new episode for jobs the reaper requeued: a worker claimed each again (one more
    attempt) and its lease expired too. Every database must hold them ``ready`` and alike."""
    episodes: list[Episode] = []
    for job_id in job_ids:
        last = seeded.episodes[job_id][-1]
        assert last.action == "requeue", f"job {job_id} was parked, not requeued"
        episode = Episode(
            job_id,
            last.project_id,
            f"worker-{rng.randint(41, 80)}",
            now - timedelta(seconds=rng.randint(5, 600), microseconds=rng.randint(0, 999_999)),
            last.attempts + 1,
            last.max_attempts,
        )
        episodes.append(episode)
    for dsn in dsns:
        conn = await asyncpg.connect(dsn)
        try:
            status = await conn.execute(
                """
                UPDATE job AS j
                SET state = 'leased', attempts = e.attempts, lease_owner = e.owner,
                    lease_expires_at = e.expires, updated_at = $5
                FROM unnest($1::uuid[], $2::int[], $3::text[], $4::timestamptz[])
                     AS e (id, attempts, owner, expires)
                WHERE j.id = e.id AND j.state = 'ready' AND j.lease_owner IS NULL
                """,
                [e.job_id for e in episodes],
                [e.attempts for e in episodes],
                [e.lease_owner for e in episodes],
                [e.lease_expires_at for e in episodes],
                now,
            )
        finally:
            await conn.close()
        assert status == f"UPDATE {len(episodes)}", f"{dsn}: {status} of {len(episodes)}"
    for episode in episodes:
        seeded.episodes[episode.job_id].append(episode)
    return episodes


async def requeued_jobs(dsn: str, seeded: Seeded) -> list[uuid.UUID]:
    """Seeded jobs the reaper has moved back to ready (their last episode's move is done)."""
    rows = await query(
        dsn,
        "SELECT id FROM job WHERE id = ANY($1::uuid[]) AND state = 'ready' "
        "AND lease_owner IS NULL ORDER BY id",
        [job_id for job_id, eps in seeded.episodes.items() if eps[-1].action == "requeue"],
    )
    return [r["id"] for r in rows]


async def seed_stale_ready(
    dsns: Sequence[str], project_id: uuid.UUID, *, now: datetime, age_seconds: int = 7200
) -> uuid.UUID:
    """One ready job, claimable and unclaimed for ``age_seconds``: a stale_ready sighting."""
    job = Job(project_id=project_id, run_after=now - timedelta(seconds=age_seconds))
    for dsn in dsns:
        await insert_jobs(dsn, [job])
    return job.id


async def seed_scenario(
    settings: Settings,
    dsn: str,
    broker: BrokerUnderTest,
    seeded: Seeded,
    *,
    now: datetime,
    **options: Any,
) -> Scenario:
    """The realistic scenario of ``reaper/scenario.py`` on both sides (``options``: its sizes),
    recorded in ``seeded``: its expired leases and poison job as episodes, its owned dead
    letters, and the queues a pass must never read (the foreign tenant's, the consumerless
    webhooks backlog). Its live leases get one more day: they must be left alone however long
    a test runs (the scenario's are 15 minutes, shorter than a long manual chaos run)."""
    from reaper.broker.client import ManagementClient
    from reaper.demo.seed import seed
    from reaper.jobqueue.postgres import PostgresStore

    store = await PostgresStore.connect(dsn)
    try:
        async with ManagementClient(
            broker.management_url, broker.username, broker.password, vhost=broker.vhost
        ) as client:
            scenario = await seed(store, client, now=now, settings=settings, **options)
    finally:
        await store.close()
    rows = await query(
        dsn,
        "SELECT id, project_id, lease_owner, lease_expires_at, attempts, max_attempts "
        "FROM job WHERE id = ANY($1::uuid[])",
        [*scenario.expired_leases, *scenario.poison],
    )
    assert len(rows) == len(scenario.expired_leases) + len(scenario.poison)
    for r in rows:
        seeded.episodes[r["id"]] = [
            Episode(
                r["id"],
                r["project_id"],
                r["lease_owner"],
                r["lease_expires_at"],
                r["attempts"],
                r["max_attempts"],
            )
        ]
    await query(
        dsn,
        "UPDATE job SET lease_expires_at = lease_expires_at + interval '1 day' "
        "WHERE id = ANY($1::uuid[]) RETURNING id",
        list(scenario.live_leases),
    )
    seeded.dead_letters.setdefault(scenario.dead_letter_queue, []).extend(
        letter.body for letter in scenario.dead_letters
    )
    for queue in (*scenario.foreign_queues, scenario.foreign_dead_letter_queue, "vibey.webhooks"):
        seeded.untouched[queue] = scenario.messages.get(queue, 0)
    return scenario


async def clone_database(dsn: str) -> str:
    """A copy of the database ``dsn`` (no session may be open on it), on the same server."""
    base, _, source = dsn.rpartition("/")
    name = f"qr_clone_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(f"{base}/postgres")
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    finally:
        await admin.close()
    return f"{base}/{name}"


async def drop_database(dsn: str) -> None:
    base, _, name = dsn.rpartition("/")
    admin = await asyncpg.connect(f"{base}/postgres")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def fetchval(dsn: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def count_expired_leases(dsn: str, now: datetime) -> int:
    return int(
        await fetchval(
            dsn, "SELECT count(*) FROM job WHERE state = 'leased' AND lease_expires_at < $1", now
        )
    )


async def reaper_backends(dsn: str) -> int:
    """Sessions of reaper processes on this database (a killed process's may linger)."""
    database = dsn.rpartition("/")[2]
    return int(
        await fetchval(
            dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
            "AND application_name = 'queue-reaper' AND pid <> pg_backend_pid()",
            database,
        )
    )


async def wait_for_no_reaper_backends(dsn: str, seconds: float = 30.0) -> None:
    """Until every session a killed reaper left behind has gone (its locks with it)."""
    deadline = time.monotonic() + seconds
    while await reaper_backends(dsn):
        if time.monotonic() > deadline:
            raise AssertionError(f"reaper sessions still open on {dsn} after {seconds} s")
        await asyncio.sleep(0.1)


# --------------------------------------------------------------------------- seeding: the broker


def queue_path(broker: BrokerUnderTest, name: str) -> str:
    return f"/api/queues/{broker.vhost_path}/{quote(name, safe='')}"


def declare_dead_letter_queues(
    broker: BrokerUnderTest,
    dlq: str = OWNED_DLQ,
    origin: str = OWNED_ORIGIN,
    *,
    dlq_type: str = "quorum",
) -> None:
    """An owned dead-letter queue and the owned work queue that dead-letters into it (a quorum
    queue: RabbitMQ 4.0 takes ~100 ms to accept one message published to a classic queue
    through the management API, ~10 ms for a quorum queue)."""
    broker.declare_queue(dlq, queue_type=dlq_type)
    declare_origin(broker, origin, dlq)


def declare_origin(broker: BrokerUnderTest, origin: str, dlq: str) -> None:
    """An owned quorum work queue that dead-letters into ``dlq``."""
    broker.declare_queue(
        origin,
        queue_type="quorum",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq},
    )


def dead_letter_through(
    broker: BrokerUnderTest,
    seeded: Seeded,
    count: int,
    *,
    dlq: str = OWNED_DLQ,
    origin: str = OWNED_ORIGIN,
    tag: str = "",
) -> list[str]:
    """``count`` real dead letters: published to ``origin`` (empty) and rejected there without
    requeueing, so the broker itself writes ``x-death`` and moves them to ``dlq``. The caller
    waits for ``dlq`` to show them (``wait_for_depth``): that also proves none was lost."""
    start = len(seeded.dead_letters.setdefault(dlq, []))
    bodies = [
        json.dumps({"task": start + i, "queue": dlq, "tag": tag}, sort_keys=True)
        for i in range(count)
    ]
    with broker.admin() as admin:

        def publish(i: int) -> None:
            r = admin.post(
                f"/api/exchanges/{broker.vhost_path}/amq.default/publish",
                json={
                    "properties": {"message_id": f"{dlq}-{tag}-{start + i}"},
                    "routing_key": origin,
                    "payload": bodies[i],
                    "payload_encoding": "string",
                },
            )
            r.raise_for_status()
            assert r.json()["routed"], f"not routed to {origin}"

        # one message per request: a few requests at once overlap the broker's latency
        with ThreadPoolExecutor(PUBLISHERS) as pool:
            list(pool.map(publish, range(count)))
        # A get of many messages with reject_requeue_false dead-letters only some of them on
        # a quorum queue (measured: 33 of 100 on 3.10 and 4.0); the rest go back to the
        # origin, ready. So: reject until the origin has stayed empty for a moment.
        empty_reads = 0
        while empty_reads < 2:
            got = admin.post(
                f"{queue_path(broker, origin)}/get",
                json={"count": 100, "ackmode": "reject_requeue_false", "encoding": "auto"},
            )
            got.raise_for_status()
            if got.json():
                empty_reads = 0
            else:
                empty_reads += 1
                time.sleep(0.2)
    seeded.dead_letters[dlq].extend(bodies)
    return bodies


def seed_foreign(
    broker: BrokerUnderTest, seeded: Seeded, count: int = 3, queue: str = FOREIGN_DLQ
) -> None:
    """A foreign dead-letter queue holding ``count`` messages: surfaced, never read."""
    broker.declare_queue(queue, queue_type="quorum")
    for i in range(count):
        broker.publish(queue, json.dumps({"theirs": i}), properties={"message_id": f"theirs-{i}"})
    seeded.untouched[queue] = seeded.untouched.get(queue, 0) + count


def listed(broker: BrokerUnderTest, queue: str) -> dict[str, Any] | None:
    """The queue as the management API shows it now, or None when there is no such queue."""
    with broker.admin() as admin:
        r = admin.get(queue_path(broker, queue))
        if r.status_code == 404:
            return None
        r.raise_for_status()
        result: dict[str, Any] = r.json()
        return result


async def wait_for_depth(
    broker: BrokerUnderTest, queue: str, expected: int, seconds: float = STATS_WAIT_SECONDS
) -> None:
    """Until the broker shows ``queue`` holding ``expected`` messages, all ready (none held by
    a read a killed process left half done), with its statistics and policy fields."""
    await wait_for_depths(broker, {queue: expected}, seconds)


async def wait_for_depths(
    broker: BrokerUnderTest, expected: dict[str, int], seconds: float = STATS_WAIT_SECONDS
) -> None:
    """``wait_for_depth`` for several queues at once, one listing per poll (the statistics
    refresh every few seconds: waiting for queues one after the other costs that many times)."""
    deadline = time.monotonic() + seconds
    pending = dict(expected)
    shown: dict[str, Any] = {}
    while True:
        with broker.admin() as admin:
            r = admin.get(
                f"/api/queues/{broker.vhost_path}",
                params={
                    "columns": "name,messages,messages_ready,policy,effective_policy_definition"
                },
            )
            r.raise_for_status()
            listing = {q["name"]: q for q in r.json()}
        for queue, count in list(pending.items()):
            q = listing.get(queue)
            shown[queue] = q
            if (
                q is not None
                and q.get("messages") == count
                and q.get("messages_ready") == count
                and "policy" in q
                and "effective_policy_definition" in q
            ):
                del pending[queue]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"waited {seconds} s for "
                + "; ".join(
                    f"{q} to hold {n} ready message(s), listed: {shown[q]}"
                    for q, n in pending.items()
                )
            )
        await asyncio.sleep(0.25)


def read_is_safe(broker: BrokerUnderTest, queue: dict[str, Any]) -> str | None:
    """None when a requeueing read of this queue cannot make the broker drop a message (the
    test's own final read must keep the promise it checks), else why not."""
    if queue.get("type") != "quorum":
        return None
    arguments = queue.get("arguments") or {}
    policy = queue.get("effective_policy_definition") or {}
    if isinstance(arguments, dict) and "x-delivery-limit" in arguments:
        return f"x-delivery-limit argument {arguments['x-delivery-limit']}"
    limit = policy.get("delivery-limit") if isinstance(policy, dict) else None
    if broker.version.startswith("3."):
        return None if limit is None else f"policy delivery-limit {limit}"
    reported = queue.get("delivery_limit")
    if limit == -1 and reported in ("unlimited", -1, None):
        return None
    return f"delivery limit in force: policy {limit!r}, reported {reported!r}"


def read_bodies(broker: BrokerUnderTest, queue: str, at_most: int) -> list[dict[str, Any]]:
    """Every message of ``queue`` (up to ``at_most``), put back: ``reject_requeue_true``."""
    with broker.admin() as admin:
        r = admin.post(
            f"{queue_path(broker, queue)}/get",
            json={"count": at_most, "ackmode": "reject_requeue_true", "encoding": "auto"},
        )
        r.raise_for_status()
        messages: list[dict[str, Any]] = r.json()
        return messages


# --------------------------------------------------------------------------- real reapers


def reaper_env(
    broker: BrokerUnderTest | None,
    dsn: str,
    config_dir: Path,
    *,
    management_url: str | None = None,
    **overrides: str,
) -> dict[str, str]:
    """The environment of a real ``reaper`` process pointed at this test's database and vhost:
    environment only (``config_dir`` is an empty directory), every other ``REAPER_`` variable of
    the test's own environment removed. ``overrides``: more ``REAPER_*`` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REAPER_")}
    # the package under test, not whichever checkout is installed (editable) elsewhere
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
    env.update(
        {
            "REAPER_CONFIG_DIR": str(config_dir),
            "REAPER_DATABASE__DSN": dsn,
            "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if broker is not None:
        env.update(
            {
                "REAPER_BUS__MANAGEMENT_URL": management_url or broker.management_url,
                "REAPER_BUS__VHOST": broker.vhost,
                "REAPER_BUS__USERNAME": broker.username,
                "REAPER_BUS__PASSWORD": broker.password,
            }
        )
    env.update(overrides)
    return env


@dataclass
class Run:
    """One real ``reaper reap --json`` process."""

    returncode: int | None
    killed: bool
    seconds: float
    report: dict[str, Any] | None
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.report is not None and bool(self.report["ok"])

    def ok_on(self, broker: BrokerUnderTest) -> bool:
        """``ok`` on every version: what a version cannot enforce (4.3's classic queues,
        ``NotEnforced``) is a finding, not a failed pass."""
        return self.ok

    def describe(self) -> str:
        if self.report is None:
            return f"exit {self.returncode}, no report; stderr: {self.stderr[-2000:]}"
        r = self.report
        # a policy that did not verify says why: its reason, failing queues and detail
        unverified = [
            (p["name"], p.get("reason"), p.get("queues_failing"), p.get("detail"))
            for p in r["policies"]
            if p["verified"] is False
        ]
        return (
            f"exit {self.returncode}, ok {r['ok']}, unreadable {r['unreadable']}, "
            f"policies {[(p['name'], p['action'], p['verified']) for p in r['policies']]}, "
            f"not verified {unverified}, "
            f"dead_letters {r['dead_letters']}, notes {r['notes'][:6]}"
        )


async def run_reaper(
    env: dict[str, str],
    workdir: Path,
    *,
    kill_after: float | None = None,
    kill_when: Callable[[], Awaitable[bool]] | None = None,
    limit_seconds: float = 180.0,
    args: Sequence[str] = ("reap", "--json"),
    prefix: Sequence[str] = (),
) -> Run:
    """Run ``python -m reaper reap --json`` to its end, or SIGKILL it: ``kill_after``
    seconds after it was started, or as soon as ``kill_when()`` (polled every few
    milliseconds) answers True, if it is still running then. ``prefix`` runs it under another
    program (``faketime``). Its output goes to files, so a large report never blocks it on a
    pipe."""
    out, err = _output_files(workdir)
    with out, err:
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *prefix,
            sys.executable,
            "-m",
            "reaper",
            *args,
            stdout=out,
            stderr=err,
            env=env,
            cwd=workdir,
        )
        killed = False
        deadline = started + (kill_after if kill_after is not None else limit_seconds)
        while process.returncode is None:
            wait = min(KILL_POLL_SECONDS, max(0.0, deadline - time.monotonic()))
            try:
                await asyncio.wait_for(process.wait(), wait)
                break
            except TimeoutError:
                pass
            expired = time.monotonic() >= deadline
            if expired and kill_after is None:
                process.kill()
                await process.wait()
                raise AssertionError(f"reaper ran past {limit_seconds} s") from None
            if expired or (kill_when is not None and await kill_when()):
                if process.returncode is None:
                    process.send_signal(signal.SIGKILL)
                    killed = True
                await process.wait()
        seconds = time.monotonic() - started
    text, stderr = _collect(out.name, err.name)
    report = None
    if not killed:
        try:
            report = json.loads(text)
        except ValueError:
            report = None
    return Run(process.returncode, killed, seconds, report, stderr)


def _output_files(workdir: Path) -> tuple[Any, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    name = uuid.uuid4().hex[:8]
    return (workdir / f"{name}.out").open("wb"), (workdir / f"{name}.err").open("wb")


def _collect(out_name: str, err_name: str) -> tuple[str, str]:
    out_path, err_path = Path(out_name), Path(err_name)
    text, stderr = out_path.read_text(), err_path.read_text()
    out_path.unlink()
    err_path.unlink()
    return text, stderr


# --------------------------------------------------------------------------- the checks


async def check_invariants(
    dsn: str,
    seeded: Seeded,
    broker: BrokerUnderTest | None = None,
    *,
    converged: bool = True,
    read_broker: bool = True,
) -> Summary:
    """Check every invariant (module docstring) over ``dsn`` (and ``broker``'s vhost).

    ``converged``: every seeded episode must have been moved and every dead letter parked
    (else: at most that). ``read_broker``: also read every dead letter back, with
    ``reject_requeue_true`` (do it at the very end: on 3.x a read reorders a quorum queue)."""
    problems: list[str] = []
    summary = Summary()
    conn = await asyncpg.connect(dsn)
    try:
        events = [
            dict(r)
            for r in await conn.fetch(
                "SELECT project_id, seq, kind, payload::text AS payload, digest, trusted, "
                "created_at FROM event ORDER BY project_id, seq"
            )
        ]
        jobs = {
            r["id"]: dict(r)
            for r in await conn.fetch(
                "SELECT id, project_id, kind, state, attempts, max_attempts, lease_owner, "
                "lease_expires_at, run_after, updated_at, idempotency_key FROM job"
            )
        }
        gates = [
            dict(r)
            for r in await conn.fetch(
                "SELECT id, project_id, job_id, kind, identity, created_at, answered_at "
                "FROM human_gate"
            )
        ]
        letters = [
            dict(r)
            for r in await conn.fetch(
                "SELECT identity, job_id, queue, body, body_encoding, body_truncated "
                "FROM dead_letter"
            )
        ]
    finally:
        await conn.close()
    for event in events:
        event["payload"] = json.loads(event["payload"])
    _check_ledger(events, problems)
    # The host may append its own events to the same streams: the reaper's are its QueueReaped
    events = [e for e in events if e["kind"] == EVENT_KIND]
    summary.events = len(events)
    summary.streams = len({e["project_id"] for e in events})

    _check_sightings(events, summary, problems)
    _check_leases(events, jobs, gates, seeded, converged, summary, problems)
    _check_dead_letter_parks(events, jobs, gates, letters, seeded, converged, summary, problems)
    if broker is not None:
        await _check_broker(broker, seeded, letters, read_broker, summary, problems)

    if problems:
        shown = "\n  - ".join(problems[:40])
        more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
        raise AssertionError(f"{len(problems)} invariant violation(s):\n  - {shown}{more}")
    return summary


def _check_ledger(events: list[dict[str, Any]], problems: list[str]) -> None:
    """Every stream gapless and unique, whoever wrote it; every event's digest the sha256 of its
    payload's canonical JSON; every QueueReaped payload complete."""
    by_stream: dict[uuid.UUID, list[int]] = defaultdict(list)
    for event in events:
        by_stream[event["project_id"]].append(event["seq"])
        canonical = canonical_json(event["payload"])
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        if digest != event["digest"]:
            problems.append(
                f"event {event['project_id']}#{event['seq']}: digest {event['digest']} is not "
                f"the sha256 of its payload's canonical JSON ({digest})"
            )
        if event["kind"] != EVENT_KIND:
            continue  # the host's own event
        payload = event["payload"]
        for key in (
            "object",
            "queue",
            "source",
            "condition",
            "measured",
            "threshold",
            "unit",
            "action",
            "detail",
        ):
            if key not in payload:
                problems.append(f"event {event['project_id']}#{event['seq']}: no {key!r}")
    for stream, seqs in by_stream.items():
        if seqs != list(range(1, len(seqs) + 1)):
            gaps = sorted(set(range(1, max(seqs) + 1)) - set(seqs))[:10]
            problems.append(
                f"stream {stream}: seqs not gapless 1..{len(seqs)} (missing {gaps}, "
                f"duplicates {[s for s, n in Counter(seqs).items() if n > 1][:10]})"
            )


def _sighting_scope(stream: uuid.UUID, payload: dict[str, Any]) -> str:
    # mirrors reaper_sighting_scope_v2 (migration 0008): a bucketed record's scope ends in
    # `#<bucket>` (a dead-letter queue's unread remainder, by power of ten)
    if payload.get("source") == "broker":
        subject = str(payload.get("queue") or payload.get("object"))
        bucket = payload.get("bucket")
        return subject if bucket is None else f"{subject}#{bucket}"
    return str(stream)


def _check_sightings(events: list[dict[str, Any]], summary: Summary, problems: list[str]) -> None:
    history: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for event in events:  # ordered by stream, seq
        payload = event["payload"]
        action = payload.get("action")
        if action not in ("surface", "cleared"):
            continue
        key = (
            event["project_id"],
            payload.get("source"),
            payload.get("condition"),
            _sighting_scope(event["project_id"], payload),
        )
        history[key].append(action)
        summary.sightings[action] += 1
    for key, actions in history.items():
        expected = ["surface" if i % 2 == 0 else "cleared" for i in range(len(actions))]
        if actions != expected:
            problems.append(f"sighting {key}: records {actions} do not alternate from surface")


def sighting_key(event: dict[str, Any]) -> tuple[str, str, str, str]:
    """A sighting record's key: its stream, source, condition and scope."""
    payload = event["payload"]
    return (
        str(event["project_id"]),
        str(payload.get("source")),
        str(payload.get("condition")),
        _sighting_scope(event["project_id"], payload),
    )


def open_sightings(events: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """The keys whose latest sighting record is a surface."""
    latest: dict[tuple[str, str, str, str], str] = {}
    for event in sorted(events, key=lambda e: (str(e["project_id"]), e["seq"])):
        if event["payload"].get("action") in ("surface", "cleared"):
            latest[sighting_key(event)] = event["payload"]["action"]
    return {key for key, action in latest.items() if action == "surface"}


def _check_leases(
    events: list[dict[str, Any]],
    jobs: dict[uuid.UUID, dict[str, Any]],
    gates: list[dict[str, Any]],
    seeded: Seeded,
    converged: bool,
    summary: Summary,
    problems: list[str],
) -> None:
    moves: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        payload = event["payload"]
        if payload.get("source") == "job_queue" and payload.get("action") in ("requeue", "park"):
            moves[payload["object"]].append(event)
            summary.lease_events[payload["action"]] += 1
            if event["trusted"] is not True:
                problems.append(f"lease event {payload['object']}: not trusted")
    gates_by_job: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    for gate in gates:
        if gate["kind"] == GATE_DELIVERY_EXHAUSTED:
            gates_by_job[gate["job_id"]].append(gate)
            summary.delivery_exhausted_gates += 1

    seeded_ids = {str(job_id) for job_id in seeded.episodes}
    for obj in sorted(set(moves) - seeded_ids):
        problems.append(
            f"move event(s) {[e['payload']['action'] for e in moves[obj]]} for "
            f"job {obj}, which was never seeded as an expired lease"
        )
    for job_id in set(gates_by_job) - set(seeded.episodes):
        problems.append(f"delivery_exhausted gate(s) on job {job_id}, never seeded as expired")

    for job_id, episodes in seeded.episodes.items():
        recorded = moves.get(str(job_id), [])
        job = jobs.get(job_id)
        where = f"job {job_id}"
        if job is None:
            problems.append(f"{where}: gone from the job table")
            continue
        if len(recorded) > len(episodes):
            problems.append(
                f"{where}: {len(recorded)} move events for {len(episodes)} episode(s): moved "
                f"twice ({[e['payload']['action'] for e in recorded]})"
            )
            continue
        if converged and len(recorded) < len(episodes):
            problems.append(
                f"{where}: {len(recorded)} move event(s) for {len(episodes)} episode(s): "
                f"not moved (state {job['state']}, lease {job['lease_expires_at']})"
            )
        summary.episodes_moved += len(recorded)
        summary.episodes_pending += len(episodes) - len(recorded)
        for episode, event in zip(episodes, recorded, strict=False):
            payload = event["payload"]
            if payload["action"] != episode.action or payload["condition"] != episode.condition:
                problems.append(
                    f"{where}: event {payload['action']}/{payload['condition']}, expected "
                    f"{episode.action}/{episode.condition} (attempts {episode.attempts} of "
                    f"{episode.max_attempts})"
                )
            if event["project_id"] != episode.project_id:
                problems.append(f"{where}: event on stream {event['project_id']}, not its project")
        # the job as its last event (or its pending episode) says
        if len(recorded) < len(episodes):
            pending = episodes[len(recorded)]
            if (
                job["state"] != "leased"
                or job["lease_expires_at"] != pending.lease_expires_at
                or job["lease_owner"] != pending.lease_owner
                or job["attempts"] != pending.attempts
            ):
                problems.append(
                    f"{where}: moved without its event: {len(recorded)} event(s) but the job is "
                    f"{job['state']} (lease {job['lease_expires_at']}, owner {job['lease_owner']}"
                    f", attempts {job['attempts']}), not the pending lease as seeded"
                )
        elif recorded:
            last, event = episodes[-1], recorded[-1]
            expected_state = "awaiting_human" if last.action == "park" else "ready"
            expected_attempts = (
                max(last.attempts - 1, 0) if last.action == "park" else last.attempts
            )
            if (
                job["state"] != expected_state
                or job["lease_owner"] is not None
                or job["lease_expires_at"] is not None
                or job["attempts"] != expected_attempts
            ):
                problems.append(
                    f"{where}: after its {last.action} the job is {job['state']} with attempts "
                    f"{job['attempts']}, lease {job['lease_expires_at']} (expected "
                    f"{expected_state}, attempts {expected_attempts}, no lease)"
                )
            if job["updated_at"] != event["created_at"]:
                problems.append(
                    f"{where}: moved at {job['updated_at']} but its event says "
                    f"{event['created_at']}: not one transaction"
                )
            if last.action == "requeue" and job["run_after"] != event["created_at"]:
                problems.append(f"{where}: requeued with run_after {job['run_after']}, not now")
        # park events <-> delivery_exhausted gates, one per parked episode
        parked = [ep for ep, _ in zip(episodes, recorded, strict=False) if ep.action == "park"]
        job_gates = gates_by_job.get(job_id, [])
        wanted = sorted(ep.gate_identity for ep in parked)
        found = sorted(g["identity"] or "" for g in job_gates)
        if found != wanted:
            problems.append(
                f"{where}: delivery_exhausted gates {found}, expected one per park {wanted}"
            )


def _check_dead_letter_parks(
    events: list[dict[str, Any]],
    jobs: dict[uuid.UUID, dict[str, Any]],
    gates: list[dict[str, Any]],
    letters: list[dict[str, Any]],
    seeded: Seeded,
    converged: bool,
    summary: Summary,
    problems: list[str],
) -> None:
    identities = Counter(g["identity"] for g in gates)
    for identity, n in identities.items():
        if identity is None:
            problems.append(f"{n} gate(s) without an identity")
        elif n > 1:
            problems.append(f"gate identity {identity!r} raised {n} times")
    parks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        payload = event["payload"]
        if (
            payload.get("source") == "broker"
            and payload.get("condition") == "dead_letter"
            and payload.get("action") == "park"
        ):
            parks[payload["object"]].append(event)
            summary.dead_letter_parks += 1
            if event["project_id"] != FLEET_PROJECT_ID or event["trusted"] is not False:
                problems.append(
                    f"dead-letter park event {payload['object']}: on stream "
                    f"{event['project_id']} with trusted {event['trusted']} (expected the fleet "
                    "stream, untrusted)"
                )
    dl_jobs = {job_id: job for job_id, job in jobs.items() if job["kind"] == DEAD_LETTER_JOB_KIND}
    dl_gates = {g["job_id"]: g for g in gates if g["kind"] == GATE_BUS_DEAD_LETTERED}
    summary.dead_letter_gates = sum(1 for g in gates if g["kind"] == GATE_BUS_DEAD_LETTERED)
    by_job = {letter["job_id"]: letter for letter in letters}
    for job_id, job in dl_jobs.items():
        letter = by_job.get(job_id)
        gate = dl_gates.get(job_id)
        n_events = len(parks.get(str(job_id), []))
        if letter is None or gate is None or n_events != 1:
            problems.append(
                f"parked dead-letter job {job_id}: dead_letter row {letter is not None}, gate "
                f"{gate is not None}, {n_events} park event(s) (expected all, and one event)"
            )
            continue
        key = DEAD_LETTER_PREFIX + letter["identity"]
        if job["idempotency_key"] != key or gate["identity"] != key:
            problems.append(
                f"parked dead letter {letter['identity']!r}: job key {job['idempotency_key']!r}"
                f", gate identity {gate['identity']!r}"
            )
        if job["project_id"] != FLEET_PROJECT_ID or job["state"] != "awaiting_human":
            problems.append(
                f"parked dead-letter job {job_id}: project {job['project_id']}, state "
                f"{job['state']}"
            )
    for obj in set(parks) - {str(j) for j in dl_jobs}:
        problems.append(f"dead-letter park event for {obj}: no bus.dead_letter job of that id")
    if summary.dead_letter_gates != len(dl_jobs):
        problems.append(
            f"{summary.dead_letter_gates} bus_dead_lettered gate(s) for {len(dl_jobs)} parked "
            "dead-letter job(s)"
        )
    # every parked letter is one the broker held, once; converged: every one is parked
    parked_by_queue: dict[str, list[str]] = defaultdict(list)
    for letter in letters:
        body = letter["body"]
        if letter["body_encoding"] == "base64":
            body = base64.b64decode(body).decode("utf-8", "replace")
        parked_by_queue[letter["queue"]].append(body)
    for queue in set(parked_by_queue) | set(seeded.dead_letters) | set(seeded.untouched):
        bodies = parked_by_queue.get(queue, [])
        if queue in seeded.untouched:
            if bodies:
                problems.append(f"queue {queue}: {len(bodies)} letter(s) parked from it")
            continue
        expected = Counter(seeded.dead_letters.get(queue, []))
        extra = Counter(bodies) - expected
        if extra:
            problems.append(f"{queue}: parked letters never seeded: {list(extra)[:5]}")
        duplicated = [b for b, n in Counter(bodies).items() if n > 1]
        if duplicated:
            problems.append(f"{queue}: letters parked more than once: {duplicated[:5]}")
        if converged and Counter(bodies) != expected:
            missing = expected - Counter(bodies)
            problems.append(
                f"{queue}: {sum(missing.values())} of {sum(expected.values())} dead letter(s) "
                f"not parked, e.g. {list(missing)[:3]}"
            )


async def _check_broker(
    broker: BrokerUnderTest,
    seeded: Seeded,
    letters: list[dict[str, Any]],
    read_broker: bool,
    summary: Summary,
    problems: list[str],
) -> None:
    expected: dict[str, int] = {q: len(b) for q, b in seeded.dead_letters.items()}
    expected.update(seeded.untouched)
    try:
        await wait_for_depths(broker, expected)
    except AssertionError as exc:
        problems.append(f"messages lost or held: {exc}")
        return
    for queue, count in expected.items():
        info = listed(broker, queue)
        assert info is not None
        foreign = queue in seeded.untouched
        (summary.untouched_on_broker if foreign else summary.dead_letters_on_broker)[queue] = int(
            info["messages"]
        )
        if not read_broker:
            continue
        unsafe = read_is_safe(broker, info)
        if unsafe is not None:
            problems.append(
                f"{queue}: the final requeueing read is not safe ({unsafe}): with this limit the "
                "reaper's own reads could have dropped dead letters"
            )
            continue
        messages = read_bodies(broker, queue, count + 10)
        if foreign:
            if len(messages) != count or any(m.get("redelivered") for m in messages):
                problems.append(
                    f"queue {queue}: {len(messages)} of {count} message(s), redelivered "
                    f"{[m.get('redelivered') for m in messages]}: it was read or touched"
                )
            continue
        got = sorted(str(m.get("payload")) for m in messages)
        bodies = seeded.dead_letters[queue]
        if got != sorted(bodies):
            missing = Counter(bodies) - Counter(got)
            problems.append(
                f"{queue}: holds {len(got)} message(s), expected the {len(bodies)} seeded; "
                f"missing {list(missing)[:3]}"
            )
