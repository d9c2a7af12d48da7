"""A host that dispatches through RabbitMQ, in miniature and test-side (ADR-0044 §3–§5), for the
end-to-end tests of outbox dispatch (no tests here). Every part is the real thing, small:

- **the host's enqueue** (:func:`enqueue`): a job inserted with its first dispatch episode
  (``dispatch_seq`` 0 -> 1 and one ``job_outbox`` row, ``dispatch:<job>:1``, the
  ``vibey.job.dispatch/1`` body) in one transaction (§4, "enqueue, deps met");
- **the work queue** (:func:`declare_work_queue`): an owned quorum queue
  ``vibey.jobs.<project>`` with a small ``x-delivery-limit`` that dead-letters (at least once)
  into an owned quorum queue ``vibey.jobs.<project>.dead`` (§2);
- **the outbox relay** (:func:`relay`): publishes every unsent outbox row, in id order, to its
  project's work queue, persistent, ``message_id = <job_id>:<dispatch_seq>``, and waits for
  the broker's publisher confirm (pika ``confirm_delivery``) before it marks the row sent and
  stamps ``job.dispatched_at`` (§3, §4). A row the broker did not confirm stays unsent;
- **a worker** (:class:`Worker`): a real AMQP consumer (pika, manual ack, prefetch 1) whose
  claim is fenced on ``dispatch_seq`` exactly as §5 writes it (:data:`FENCED_CLAIM`). On a hit
  it runs the job (recorded in :attr:`World.runs`), settles it ``succeeded`` with a write fenced
  on ``lease_owner``, and acks; on a miss it acks the delivery unread and records a fenced drop.
  It can also die holding a lease (:meth:`Worker.die_holding_lease`), and a broken consumer
  dies on every delivery until the broker dead-letters it (:meth:`Worker.die_on_every_delivery`).

pika is synchronous, so a worker runs in a thread of its own (``asyncio.to_thread``) and reaches
PostgreSQL through its own event loop and connection (:class:`_ThreadDatabase`).

Below them, what the scenarios read back and the invariants they share (:func:`check_ledger`,
:func:`check_world`): the reaper's ``check_invariants`` expects jobs it seeded itself, so these
check directly what holds for the hand-made jobs of this world.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import pika
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from reaper.core.canonical import canonical_json
from tests.support.invariants import sighting_key
from tests.support.services import BrokerUnderTest

#: The AMQP port of each broker version (SPEC §7), where the fixture does not say it.
AMQP_PORTS = {
    "3.10": int(os.environ.get("QR_TEST_RABBITMQ_310_AMQP_PORT", "5672")),
    "4.0": int(os.environ.get("QR_TEST_RABBITMQ_40_AMQP_PORT", "5673")),
    "4.3": int(os.environ.get("QR_TEST_RABBITMQ_43_AMQP_PORT", "5674")),
}

#: The dispatch envelope's schema tag (ADR-0044 §3).
DISPATCH_SCHEMA = "vibey.job.dispatch/1"

#: Deliveries of one dispatch message before the broker dead-letters it: small, so a broken
#: consumer spends it in a moment.
DELIVERY_LIMIT = 3

#: The lease a worker's claim takes: short, so a dead holder's lease expires in a moment.
LEASE_SECONDS = 2.0

#: How long a consumer waits for a delivery before it looks around (never a fixed sleep).
INACTIVITY_SECONDS = 0.25

#: The fenced claim, exactly as ADR-0044 §5 writes it ($1 job, $2 project, $3 the message's
#: generation, $4 the worker, $5 the lease in seconds).
FENCED_CLAIM = """
UPDATE job
SET state = 'leased', lease_owner = $4,
    lease_expires_at = now() + make_interval(secs => $5::float8),
    attempts = attempts + 1, updated_at = now()
WHERE id = $1::uuid AND project_id = $2::uuid AND dispatch_seq = $3::bigint
  AND (state = 'ready' OR (state = 'leased' AND lease_expires_at < now()))
  AND run_after <= now()
  AND NOT EXISTS (SELECT 1
                  FROM job_dependency AS d
                  JOIN job AS dep ON dep.id = d.depends_on
                  WHERE d.job_id = job.id AND dep.state <> 'succeeded')
RETURNING id, attempts, dispatch_seq, lease_expires_at
"""

#: The settling write, fenced on the lease's owner (ADR-0044 §5: a stale holder's write is
#: refused, whatever the broker thinks).
FENCED_SUCCEED = """
UPDATE job
SET state = 'succeeded', finished_at = now(), updated_at = now(),
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1::uuid AND state = 'leased' AND lease_owner = $2
RETURNING id
"""

#: The host's enqueue with every dependency met: the job and its first dispatch episode.
_INSERT_JOB = """
INSERT INTO job (project_id, kind, max_attempts, idempotency_key, dispatch_seq)
VALUES ($1::uuid, $2, $3, $4, 1)
RETURNING id
"""

#: One outbox row for the job's current episode, the body as ADR-0044 §3 defines it.
_INSERT_OUTBOX = """
INSERT INTO job_outbox (key, job_id, project_id, payload, not_before)
SELECT 'dispatch:' || j.id || ':' || j.dispatch_seq, j.id, j.project_id,
       jsonb_build_object('schema', 'vibey.job.dispatch/1', 'job_id', j.id,
                          'project_id', j.project_id, 'dispatch_seq', j.dispatch_seq,
                          'kind', j.kind, 'not_before', j.run_after),
       j.run_after
FROM job AS j
WHERE j.id = $1::uuid
"""


# --------------------------------------------------------------------------- the records


@dataclass(frozen=True)
class Delivery:
    """One dispatch message as a consumer received it."""

    job_id: uuid.UUID
    project_id: uuid.UUID
    dispatch_seq: int
    message_id: str | None
    redelivered: bool
    #: The broker's ``x-delivery-count`` header (quorum queues), None when absent.
    delivery_count: int | None


@dataclass(frozen=True)
class Claim:
    """A fenced claim that hit."""

    worker: str
    job_id: uuid.UUID
    dispatch_seq: int
    attempts: int
    lease_expires_at: datetime


@dataclass(frozen=True)
class Run:
    """One run of a job: its handler ran after a claim hit."""

    worker: str
    job_id: uuid.UUID
    dispatch_seq: int
    #: Whether the fenced settling write landed.
    committed: bool


@dataclass(frozen=True)
class Drop:
    """A delivery the fence refused (acked unread): the job as the worker found it."""

    worker: str
    job_id: uuid.UUID
    dispatch_seq: int
    found_state: str | None
    found_seq: int | None


@dataclass(frozen=True)
class Relayed:
    """One outbox row the relay published and the broker confirmed."""

    outbox_id: int
    key: str
    job_id: uuid.UUID
    dispatch_seq: int
    queue: str


@dataclass(frozen=True)
class WorkQueue:
    name: str
    dead: str


@dataclass
class World:
    """One test's dispatch world: its database, its vhost, its project's work queue, and
    everything the relay and the workers did."""

    dsn: str
    broker: BrokerUnderTest
    project_id: uuid.UUID
    queue: WorkQueue
    relayed: list[Relayed] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    #: Deliveries a consumer died holding, before any claim (:meth:`Worker.die_on_every_delivery`).
    deaths: list[Delivery] = field(default_factory=list)


# --------------------------------------------------------------------------- the broker


def amqp_parameters(broker: BrokerUnderTest) -> pika.ConnectionParameters:
    """AMQP to ``broker``'s version, on the test's own vhost."""
    return pika.ConnectionParameters(
        host="127.0.0.1",
        port=getattr(broker, "amqp_port", None) or AMQP_PORTS[broker.version],
        virtual_host=broker.vhost,
        credentials=pika.PlainCredentials(broker.username, broker.password),
        heartbeat=30,
        blocked_connection_timeout=30,
        connection_attempts=3,
        retry_delay=0.5,
    )


def work_queue_of(project_id: uuid.UUID) -> WorkQueue:
    """A project's work queue and its dead-letter queue (ADR-0044 §2)."""
    name = f"vibey.jobs.{project_id}"
    return WorkQueue(name, f"{name}.dead")


def declare_work_queue(broker: BrokerUnderTest, project_id: uuid.UUID) -> WorkQueue:
    """The project's owned quorum work queue, dead-lettering at least once into its owned
    quorum dead-letter queue once a message has been delivered :data:`DELIVERY_LIMIT` times."""
    queue = work_queue_of(project_id)
    broker.declare_queue(queue.dead, queue_type="quorum")
    broker.declare_queue(
        queue.name,
        queue_type="quorum",
        arguments={
            "x-delivery-limit": DELIVERY_LIMIT,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": queue.dead,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",  # at-least-once dead-lettering needs it
        },
    )
    return queue


def ready_count(broker: BrokerUnderTest, queue: str) -> int:
    """Messages ready on ``queue`` as the queue itself answers a passive declare (exact, not
    the management statistics)."""
    connection = BlockingConnection(amqp_parameters(broker))
    try:
        return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        connection.close()


# --------------------------------------------------------------------------- the host


async def enqueue(
    dsn: str, project_id: uuid.UUID, *, kind: str = "render.thumbnail", max_attempts: int = 7
) -> uuid.UUID:
    """The host's enqueue, every dependency met (ADR-0044 §4): the job and its first dispatch
    episode (generation 1, one outbox row) in one transaction."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            job_id: uuid.UUID = await conn.fetchval(
                _INSERT_JOB, project_id, kind, max_attempts, f"e2e:{uuid.uuid4()}"
            )
            await conn.execute(_INSERT_OUTBOX, job_id)
    finally:
        await conn.close()
    return job_id


async def relay(world: World) -> list[Relayed]:
    """Publish every unsent outbox row (by id) to its project's work queue with publisher
    confirms; only then mark each row sent and stamp its job's ``dispatched_at`` (one
    transaction per row). Returns the rows relayed now."""
    conn = await asyncpg.connect(world.dsn)
    try:
        rows = await conn.fetch(
            "SELECT id, key, job_id, project_id, payload::text AS payload "
            "FROM job_outbox WHERE sent_at IS NULL ORDER BY id"
        )
        batch = [
            Relayed(
                r["id"],
                r["key"],
                r["job_id"],
                int(json.loads(r["payload"])["dispatch_seq"]),
                work_queue_of(r["project_id"]).name,
            )
            for r in rows
        ]
        bodies = [r["payload"] for r in rows]
        if batch:
            # raises on a nack or an unroutable message: nothing is marked sent then
            await asyncio.to_thread(_publish_confirmed, world.broker, batch, bodies)
        for sent in batch:
            async with conn.transaction():
                await conn.execute(
                    "UPDATE job_outbox SET sent_at = now() WHERE id = $1 AND sent_at IS NULL",
                    sent.outbox_id,
                )
                await conn.execute(
                    "UPDATE job SET dispatched_at = now() WHERE id = $1", sent.job_id
                )
    finally:
        await conn.close()
    world.relayed.extend(batch)
    return batch


def _publish_confirmed(broker: BrokerUnderTest, batch: list[Relayed], bodies: list[str]) -> None:
    connection = BlockingConnection(amqp_parameters(broker))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for sent, body in zip(batch, bodies, strict=True):
            # with confirms on, basic_publish returns once the broker confirmed the message and
            # raises NackError / UnroutableError (mandatory) otherwise
            channel.basic_publish(
                exchange="",
                routing_key=sent.queue,
                body=body.encode("utf-8"),
                properties=pika.BasicProperties(
                    content_type="application/json",
                    delivery_mode=pika.DeliveryMode.Persistent,
                    message_id=f"{sent.job_id}:{sent.dispatch_seq}",
                    type="job.dispatch",
                ),
                mandatory=True,
            )
    finally:
        connection.close()


# --------------------------------------------------------------------------- workers


class _ThreadDatabase:
    """asyncpg from a worker's thread: an event loop and a connection of its own."""

    def __init__(self, dsn: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._conn: asyncpg.Connection = self._loop.run_until_complete(asyncpg.connect(dsn))

    def fetchrow(self, sql: str, *args: Any) -> Any:
        return self._loop.run_until_complete(self._conn.fetchrow(sql, *args))

    def close(self) -> None:
        try:
            self._loop.run_until_complete(self._conn.close())
        finally:
            self._loop.close()


def _delivery(method: Any, properties: pika.BasicProperties, body: bytes) -> Delivery | None:
    """The dispatch pointer a message carries, or None for a body that is not one."""
    try:
        value = json.loads(body)
        if value["schema"] != DISPATCH_SCHEMA:
            return None
        job_id, project_id = uuid.UUID(value["job_id"]), uuid.UUID(value["project_id"])
        seq = value["dispatch_seq"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(seq, int) or isinstance(seq, bool):
        return None
    headers = properties.headers or {}
    count = headers.get("x-delivery-count")
    return Delivery(
        job_id,
        project_id,
        seq,
        properties.message_id,
        bool(method.redelivered),
        int(count) if isinstance(count, int) else None,
    )


class Worker:
    """One worker process of the host, as a real AMQP consumer (manual ack, prefetch 1). Its
    methods block: call them through ``asyncio.to_thread``."""

    def __init__(self, world: World, name: str, *, lease_seconds: float = LEASE_SECONDS) -> None:
        self.world = world
        self.name = name
        self.lease_seconds = lease_seconds

    # -------------------------------------------------------------- plumbing

    def _open(self) -> tuple[BlockingConnection, BlockingChannel]:
        connection = BlockingConnection(amqp_parameters(self.world.broker))
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1)
        return connection, channel

    @contextmanager
    def _attached(self) -> Iterator[tuple[BlockingConnection, BlockingChannel, _ThreadDatabase]]:
        """A consumer's connection and channel and its own database connection, each closed
        afterwards (the database first; closing the broker's connection with a delivery
        unacknowledged is a death: the broker puts the message back)."""
        connection, channel = self._open()
        db = _ThreadDatabase(self.world.dsn)
        try:
            yield connection, channel, db
        finally:
            db.close()
            connection.close()

    def _deliveries(self, channel: BlockingChannel) -> Iterator[Any]:
        """The work queue's deliveries, ``(None, None, None)`` after a quiet moment."""
        return channel.consume(self.world.queue.name, inactivity_timeout=INACTIVITY_SECONDS)

    def _claim(self, db: _ThreadDatabase, d: Delivery) -> Claim | None:
        row = db.fetchrow(
            FENCED_CLAIM, d.job_id, d.project_id, d.dispatch_seq, self.name, self.lease_seconds
        )
        if row is None:
            return None
        claim = Claim(
            self.name, row["id"], row["dispatch_seq"], row["attempts"], row["lease_expires_at"]
        )
        self.world.claims.append(claim)
        return claim

    def _drop(self, db: _ThreadDatabase, d: Delivery) -> None:
        found = db.fetchrow("SELECT state, dispatch_seq FROM job WHERE id = $1", d.job_id)
        self.world.drops.append(
            Drop(
                self.name,
                d.job_id,
                d.dispatch_seq,
                found["state"] if found else None,
                found["dispatch_seq"] if found else None,
            )
        )

    def _run(self, db: _ThreadDatabase, claim: Claim) -> None:
        # the job's work would go here; the run is what the test counts
        committed = db.fetchrow(FENCED_SUCCEED, claim.job_id, self.name) is not None
        self.world.runs.append(Run(self.name, claim.job_id, claim.dispatch_seq, committed))

    # -------------------------------------------------------------- behaviours

    def work(self, deliveries: int, seconds: float = 30.0) -> list[Delivery]:
        """Consume until ``deliveries`` dispatch messages were handled: a claim that hits runs
        the job and acks; a miss acks the message unread (a fenced drop); a body that is no
        dispatch pointer is rejected without requeue (ADR-0044 §3). Fails after ``seconds``."""
        handled: list[Delivery] = []
        with self._attached() as (_, channel, db):
            deadline = time.monotonic() + seconds
            for method, properties, body in self._deliveries(channel):
                if method is not None:
                    d = _delivery(method, properties, body)
                    if d is None:
                        channel.basic_reject(method.delivery_tag, requeue=False)
                    else:
                        claim = self._claim(db, d)
                        if claim is None:
                            self._drop(db, d)
                        else:
                            self._run(db, claim)
                        # settled (or refused) in PostgreSQL: the delivery is done either way
                        channel.basic_ack(method.delivery_tag)
                        handled.append(d)
                if len(handled) >= deliveries:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{self.name}: {len(handled)} of {deliveries} deliveries in {seconds} s"
                    )
            channel.cancel()
        return handled

    def die_holding_lease(self, seconds: float = 30.0) -> Claim:
        """Take one delivery, claim its job (the claim must hit), hold the lease until the
        database's clock says it has expired, then die: the connection closes with the
        delivery unacknowledged, and the broker puts the message back."""
        with self._attached() as (connection, channel, db):  # closing it dies: no ack, no nack
            deadline = time.monotonic() + seconds
            for method, properties, body in self._deliveries(channel):
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name}: no delivery in {seconds} s")
                if method is None:
                    continue
                d = _delivery(method, properties, body)
                assert d is not None, body
                claim = self._claim(db, d)
                assert claim is not None, f"{self.name}: the claim of {d} missed"
                break
            while not db.fetchrow(
                "SELECT lease_expires_at < now() AS expired FROM job WHERE id = $1", claim.job_id
            )["expired"]:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name}: lease still live after {seconds} s")
                connection.sleep(0.1)  # keeps the connection serviced while it holds on
        return claim

    def die_on_every_delivery(self, dead_letters: int, seconds: float = 30.0) -> list[Delivery]:
        """A consumer that dies on every delivery it takes, before any claim: each life opens a
        connection, takes one delivery and closes with it unacknowledged, until the work
        queue's dead-letter queue holds ``dead_letters`` messages (as the queue itself answers
        a passive declare), i.e. until the broker dead-lettered what the delivery limit let it.
        A death spends the quorum delivery limit on 3.10, 4.0 and 4.3 alike; a
        ``basic_nack(requeue=True)`` does not on 4.3. Fails after ``seconds``."""
        taken: list[Delivery] = []
        deadline = time.monotonic() + seconds
        while True:
            if time.monotonic() > deadline:  # a limit that never dead-letters, too
                raise AssertionError(
                    f"{self.name}: not {dead_letters} dead-lettered after {len(taken)} deaths "
                    f"in {seconds} s"
                )
            connection, channel = self._open()
            try:
                method, properties, body = next(self._deliveries(channel))
                if method is None:
                    # nothing came back within a moment: has the broker dead-lettered it all?
                    probe = connection.channel()
                    dead = probe.queue_declare(self.world.queue.dead, passive=True).method
                    if dead.message_count >= dead_letters:
                        break
                    continue
                d = _delivery(method, properties, body)
                assert d is not None, body
                taken.append(d)
            finally:
                connection.close()  # dies: the delivery it took unacknowledged
        self.world.deaths.extend(taken)
        return taken


# --------------------------------------------------------------------------- reading back


async def fetch(dsn: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [dict(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


async def job_row(dsn: str, job_id: uuid.UUID) -> dict[str, Any]:
    [row] = await fetch(
        dsn,
        "SELECT state, dispatch_seq, attempts, max_attempts, run_after, lease_owner, "
        "lease_expires_at, dispatched_at FROM job WHERE id = $1",
        job_id,
    )
    return row


async def outbox_rows(dsn: str, job_id: uuid.UUID | None = None) -> list[dict[str, Any]]:
    """The outbox (of one job), by id, payloads decoded."""
    rows = await fetch(
        dsn,
        "SELECT id, key, job_id, project_id, payload::text AS payload, not_before, sent_at "
        "FROM job_outbox WHERE $1::uuid IS NULL OR job_id = $1 ORDER BY id",
        job_id,
    )
    for row in rows:
        row["payload"] = json.loads(row["payload"])
    return rows


def check_dispatch_row(
    row: dict[str, Any], job_id: uuid.UUID, project: uuid.UUID, seq: int
) -> None:
    """An outbox row is generation ``seq``'s: its key, and the ``vibey.job.dispatch/1`` body
    (ADR-0044 §3) due at its ``not_before``."""
    assert row["key"] == f"dispatch:{job_id}:{seq}", row
    assert (row["job_id"], row["project_id"]) == (job_id, project), row
    payload = row["payload"]
    assert set(payload) == {"schema", "job_id", "project_id", "dispatch_seq", "kind", "not_before"}
    assert (payload["schema"], payload["job_id"], payload["project_id"]) == (
        DISPATCH_SCHEMA,
        str(job_id),
        str(project),
    ), payload
    assert payload["dispatch_seq"] == seq, payload
    due = datetime.fromisoformat(payload["not_before"])
    assert due.tzinfo is not None and due == row["not_before"], (payload, row["not_before"])


async def gates_of(dsn: str) -> list[dict[str, Any]]:
    rows = await fetch(
        dsn,
        "SELECT id, job_id, kind, choices::text AS choices, answer, identity "
        "FROM human_gate ORDER BY created_at, id",
    )
    for row in rows:
        row["choices"] = json.loads(row["choices"])
    return rows


async def check_ledger(dsn: str) -> list[dict[str, Any]]:
    """Every ledger stream gapless (``seq`` 1..n), every event's digest the sha256 of its
    payload's canonical JSON, and every sighting recorded again only after it cleared (SPEC
    §1, §3); returns the events by stream and seq, decoded."""
    events = await fetch(
        dsn,
        "SELECT project_id, seq, kind, payload::text AS payload, digest, trusted "
        "FROM event ORDER BY project_id, seq",
    )
    streams: dict[uuid.UUID, list[int]] = defaultdict(list)
    for event in events:
        streams[event["project_id"]].append(event["seq"])
        payload = json.loads(event["payload"])
        digest = hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()
        assert digest == event["digest"], f"event {event['project_id']}#{event['seq']}: digest"
        event["payload"] = payload
    for stream, seqs in streams.items():
        assert seqs == list(range(1, len(seqs) + 1)), f"stream {stream} is not gapless: {seqs}"
    # a sighting is recorded when first seen and again only after it cleared
    sightings: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for event in events:
        if event["kind"] == "QueueReaped" and event["payload"]["action"] in ("surface", "cleared"):
            sightings[sighting_key(event)].append(event["payload"]["action"])
    for key, actions in sightings.items():
        assert actions == ["surface", "cleared"] * (len(actions) // 2) + ["surface"] * (
            len(actions) % 2
        ), f"sighting {key}: {actions}"
    return events


def about(events: list[dict[str, Any]], *job_ids: uuid.UUID) -> list[dict[str, Any]]:
    """The events whose object is one of the jobs."""
    objects = {str(j) for j in job_ids}
    return [e for e in events if e["payload"]["object"] in objects]


def moves(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Each verdict's source, condition and action; a person's answer as ``("gate", its
    kind, the choice)``."""
    return [
        ("gate", e["payload"]["gate_kind"], e["payload"]["choice"])
        if e["kind"] == "GateAnswered"
        else (e["payload"]["source"], e["payload"]["condition"], e["payload"]["action"])
        for e in events
    ]


async def check_world(world: World, dead_letters: int) -> list[dict[str, Any]]:
    """The invariants at a scenario's end: the ledger as :func:`check_ledger` holds it; no job
    ran twice, and every run committed on a job that is now ``succeeded``; every outbox row
    sent; the work queue empty and the dead-letter queue still holding its ``dead_letters``
    (as the queues themselves answer). Returns the ledger's events."""
    events = await check_ledger(world.dsn)
    runs = Counter(r.job_id for r in world.runs)
    assert all(n == 1 for n in runs.values()), f"a job ran twice: {world.runs}"
    assert all(r.committed for r in world.runs), world.runs
    for job_id in runs:
        assert (await job_row(world.dsn, job_id))["state"] == "succeeded"
    assert [r["key"] for r in await outbox_rows(world.dsn) if r["sent_at"] is None] == []
    depths = await asyncio.to_thread(
        lambda: (
            ready_count(world.broker, world.queue.name),
            ready_count(world.broker, world.queue.dead),
        )
    )
    assert depths == (0, dead_letters), f"work queue, dead-letter queue: {depths}"
    return events
