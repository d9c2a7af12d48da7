"""Fixtures for real services: a PostgreSQL database per test, a vhost per test on each
supported RabbitMQ version, and the three-node 4.3 cluster (``cluster``) for tests that stop
and start its nodes.

A service that cannot be reached fails the test that needs it; it never skips. The services
are brought up by ``scripts/services`` (``.ci/run`` calls it first).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from reaper.broker.client import ManagementClient
from reaper.broker.port import BrokerPolicy
from reaper.jobqueue.postgres import PostgresStore
from reaper.schema.migrations import migrate

PG_ADMIN_DSN = os.environ.get("REAPER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

#: Every supported broker version and where its management API listens. All are required.
BROKERS = {
    "3.10": os.environ.get("REAPER_TEST_RABBITMQ_310", "http://127.0.0.1:15672"),
    "4.0": os.environ.get("REAPER_TEST_RABBITMQ_40", "http://127.0.0.1:15673"),
    "4.3": os.environ.get("REAPER_TEST_RABBITMQ_43", "http://127.0.0.1:15674"),
}
#: Where each version's AMQP 0-9-1 listener is, for tests that hold a real consumer.
AMQP_PORTS = {
    "3.10": int(os.environ.get("REAPER_TEST_RABBITMQ_310_AMQP_PORT", "5672")),
    "4.0": int(os.environ.get("REAPER_TEST_RABBITMQ_40_AMQP_PORT", "5673")),
    "4.3": int(os.environ.get("REAPER_TEST_RABBITMQ_43_AMQP_PORT", "5674")),
}
_SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
#: How to run ``rabbitmqctl`` against each version's node (the 4.x nodes run in chroots).
RABBITMQCTL = {
    "3.10": shlex.split(os.environ.get("REAPER_TEST_RABBITMQ_310_CTL", "rabbitmqctl")),
    "4.0": shlex.split(
        os.environ.get("REAPER_TEST_RABBITMQ_40_CTL", f"{_SCRIPTS / 'rabbitmq4'} rabbitmqctl")
    ),
    "4.3": shlex.split(
        os.environ.get("REAPER_TEST_RABBITMQ_43_CTL", f"{_SCRIPTS / 'rabbitmq43'} rabbitmqctl")
    ),
}
BROKER_USER = "guest"
BROKER_PASSWORD = "guest"


def at_least(version: str, floor: tuple[int, ...]) -> bool:
    """Whether ``version`` (``"4.3"``, ``"4.0.5"``) is ``floor`` or newer."""
    return tuple(int(p) for p in version.split(".")[: len(floor)]) >= floor


def _dsn_for(database: str) -> str:
    base, _, _ = PG_ADMIN_DSN.rpartition("/")
    return f"{base}/{database}"


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="session")
async def pg_template() -> AsyncIterator[str]:
    """A database with every migration applied, built once per session and cloned per test."""
    name = f"qr_template_{uuid.uuid4().hex[:10]}"
    try:
        admin = await asyncpg.connect(PG_ADMIN_DSN)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_DSN}: {exc} (run scripts/services)")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        store = await PostgresStore.connect(_dsn_for(name))
        try:
            await migrate(store.database)
        finally:
            await store.close()
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@contextlib.asynccontextmanager
async def cloned_database(template: str) -> AsyncIterator[str]:
    """The DSN of a fresh copy of ``template``, dropped afterwards."""
    name = f"qr_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        yield _dsn_for(name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def pg_dsn(pg_template: str) -> AsyncIterator[str]:
    """The DSN of a fresh, migrated database of this test's own."""
    async with cloned_database(pg_template) as dsn:
        yield dsn


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    """A store on this test's own migrated database, closed after the test."""
    s = await PostgresStore.connect(pg_dsn)
    yield s
    await s.close()


@pytest.fixture
async def pg_empty_dsn() -> AsyncIterator[str]:
    """The DSN of a fresh database with no migration applied."""
    name = f"qr_empty_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield _dsn_for(name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


# --------------------------------------------------------------------------- RabbitMQ


@dataclass(frozen=True)
class BrokerUnderTest:
    """One real broker, with a vhost of this test's own."""

    version: str  # a key of BROKERS: "3.10", "4.0" or "4.3"
    management_url: str
    vhost: str
    username: str = BROKER_USER
    password: str = BROKER_PASSWORD

    @property
    def vhost_path(self) -> str:
        return quote(self.vhost, safe="")

    @property
    def amqp_port(self) -> int:
        return AMQP_PORTS[self.version]

    @property
    def rabbitmqctl(self) -> list[str]:
        """The command that runs ``rabbitmqctl`` against this broker's node."""
        return RABBITMQCTL[self.version]

    def at_least(self, major: int, minor: int) -> bool:
        """Whether this broker is version ``major.minor`` or newer: what a test branches on,
        never one literal version."""
        return at_least(self.version, (major, minor))

    def admin(self) -> httpx.Client:
        """A plain management client for arranging scenarios and inspecting the broker."""
        return httpx.Client(
            base_url=self.management_url, auth=(self.username, self.password), timeout=30
        )

    def declare_queue(
        self, name: str, *, queue_type: str = "classic", arguments: dict[str, object] | None = None
    ) -> None:
        args = {"x-queue-type": queue_type, **(arguments or {})}
        with self.admin() as client:
            r = client.put(
                f"/api/queues/{self.vhost_path}/{quote(name, safe='')}",
                json={"durable": True, "auto_delete": False, "arguments": args},
            )
            r.raise_for_status()

    def publish(
        self, queue: str, body: str | bytes, *, properties: dict[str, object] | None = None
    ) -> None:
        """Publish ``body`` to ``queue`` through the default exchange; ``bytes`` go base64 on
        the wire, so any bytes at all can be sent."""
        if isinstance(body, bytes):
            payload, encoding = base64.b64encode(body).decode("ascii"), "base64"
        else:
            payload, encoding = body, "string"
        with self.admin() as client:
            r = client.post(
                f"/api/exchanges/{self.vhost_path}/amq.default/publish",
                json={
                    "properties": properties or {},
                    "routing_key": queue,
                    "payload": payload,
                    "payload_encoding": encoding,
                },
            )
            r.raise_for_status()
            assert r.json()["routed"], f"message to {queue} was not routed"

    def queue(self, name: str) -> dict[str, object]:
        with self.admin() as client:
            r = client.get(f"/api/queues/{self.vhost_path}/{quote(name, safe='')}")
            r.raise_for_status()
            result: dict[str, object] = r.json()
            return result


async def poll_until(probe: Callable[[], Any], what: str, seconds: float) -> Any:
    """Call ``probe`` (plain or async) every 0.5 s until it returns something truthy, and
    return that; fail the test after ``seconds``: management statistics lag behind what the
    broker holds."""
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds} s for {what}")
        await asyncio.sleep(0.5)


async def policy_named(client: ManagementClient, name: str) -> BrokerPolicy | None:
    """The policy ``name`` as the broker holds it (one listing), or None."""
    return next((p for p in await client.list_policies() if p.name == name), None)


def _broker_version(url: str) -> str:
    try:
        r = httpx.get(f"{url}/api/overview", auth=(BROKER_USER, BROKER_PASSWORD), timeout=10)
        r.raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"RabbitMQ management API unreachable at {url}: {exc} (run scripts/services)")
    return str(r.json()["rabbitmq_version"])


@pytest.fixture(scope="session", params=sorted(BROKERS), ids=lambda v: f"rabbitmq-{v}")
def broker_server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """Each supported broker version in turn; a version that is not reachable fails."""
    version: str = request.param
    url = BROKERS[version]
    actual = _broker_version(url)
    assert actual.startswith(version), f"expected RabbitMQ {version} at {url}, found {actual}"
    return version, url


@pytest.fixture
def broker(broker_server: tuple[str, str]) -> Iterator[BrokerUnderTest]:
    """A fresh vhost on each supported broker version, deleted afterwards."""
    version, url = broker_server
    vhost = f"qr-test-{uuid.uuid4().hex[:10]}"
    under_test = BrokerUnderTest(version=version, management_url=url, vhost=vhost)
    with under_test.admin() as client:
        client.put(f"/api/vhosts/{quote(vhost, safe='')}").raise_for_status()
        client.put(
            f"/api/permissions/{quote(vhost, safe='')}/{BROKER_USER}",
            json={"configure": ".*", "write": ".*", "read": ".*"},
        ).raise_for_status()
    try:
        yield under_test
    finally:
        with under_test.admin() as client:
            client.delete(f"/api/vhosts/{quote(vhost, safe='')}")


# --------------------------------------------------------------------------- the cluster

#: The three-node RabbitMQ 4.3 cluster (``scripts/services`` brings it up, ``scripts/cluster``
#: stops and starts its nodes): each node's management API and AMQP port. All are required.
CLUSTER_NODES = ("qr1", "qr2", "qr3")
CLUSTER_MANAGEMENT = {n: f"http://127.0.0.1:{15680 + i}" for i, n in enumerate(CLUSTER_NODES, 1)}
CLUSTER_AMQP_PORTS = {n: 5680 + i for i, n in enumerate(CLUSTER_NODES, 1)}
CLUSTER_SCRIPT = _SCRIPTS / "cluster"
#: Cluster tests stop nodes, so they take turns, across xdist workers and concurrent runs.
CLUSTER_LOCK = Path(os.environ.get("REAPER_TEST_CLUSTER_LOCK", "/tmp/queue-reaper-cluster.lock"))
CLUSTER_LOCK_WAIT_SECONDS = 900
#: How long a node may take to stop or start (scripts/cluster waits for the peers' view).
CLUSTER_NODE_SECONDS = 120


@dataclass(frozen=True)
class ClusterUnderTest:
    """The three-node cluster, with a vhost of this test's own, and the one way a test stops
    a node: :meth:`node_stopped`, which always starts it again and waits for the cluster to be
    whole before it returns."""

    vhost: str
    management_urls: dict[str, str]
    amqp_ports: dict[str, int]
    username: str = BROKER_USER
    password: str = BROKER_PASSWORD

    @property
    def vhost_path(self) -> str:
        return quote(self.vhost, safe="")

    @staticmethod
    def node_name(node: str) -> str:
        return node if "@" in node else f"{node}@localhost"

    def urls(self, *first: str) -> list[str]:
        """Every management URL, the nodes named first (in that order), then the rest."""
        order = [*first, *(n for n in self.management_urls if n not in first)]
        return [self.management_urls[n] for n in order]

    def admin(self, node: str = "qr1") -> httpx.Client:
        return httpx.Client(
            base_url=self.management_urls[node], auth=(self.username, self.password), timeout=30
        )

    def running(self) -> list[str]:
        """The nodes whose management API answers."""
        up = []
        for node, url in self.management_urls.items():
            try:
                httpx.get(f"{url}/api/overview", auth=(self.username, self.password), timeout=5)
            except httpx.HTTPError:
                continue
            up.append(node)
        return up

    def declare_queue(
        self,
        name: str,
        *,
        on: str,
        queue_type: str = "classic",
        arguments: dict[str, object] | None = None,
    ) -> None:
        """Declare through node ``on``'s API with the client-local locator: a classic queue
        lives on ``on``, a quorum queue has its leader there (members: all three)."""
        args = {"x-queue-type": queue_type, "x-queue-leader-locator": "client-local"}
        with self.admin(on) as client:
            r = client.put(
                f"/api/queues/{self.vhost_path}/{quote(name, safe='')}",
                json={
                    "durable": True,
                    "auto_delete": False,
                    "arguments": {**args, **(arguments or {})},
                },
            )
            r.raise_for_status()

    def publish(
        self,
        queue: str,
        body: str,
        *,
        properties: dict[str, object] | None = None,
        via: str = "qr1",
    ) -> None:
        """A persistent message (a classic queue keeps only those across its node's restart)."""
        with self.admin(via) as client:
            r = client.post(
                f"/api/exchanges/{self.vhost_path}/amq.default/publish",
                json={
                    "properties": {"delivery_mode": 2, **(properties or {})},
                    "routing_key": queue,
                    "payload": body,
                    "payload_encoding": "string",
                },
            )
            r.raise_for_status()
            assert r.json()["routed"], f"message to {queue} was not routed"

    def queue(self, name: str, via: str | None = None) -> dict[str, Any]:
        """The queue as a running node's API lists it."""
        with self.admin(via or self.running()[0]) as client:
            r = client.get(f"/api/queues/{self.vhost_path}/{quote(name, safe='')}")
            r.raise_for_status()
            result: dict[str, Any] = r.json()
            return result

    @contextlib.contextmanager
    def node_stopped(self, node: str) -> Iterator[None]:
        """``node``'s app stopped (``scripts/cluster stop``) for the block; started again and
        the cluster whole again whatever the block did."""
        _cluster_script("stop", node)
        try:
            yield
        finally:
            _cluster_script("start", node)
            _wait_cluster_whole()


def _cluster_script(*args: str) -> str:
    try:
        done = subprocess.run(
            [str(CLUSTER_SCRIPT), *args],
            capture_output=True,
            text=True,
            timeout=CLUSTER_NODE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/cluster {' '.join(args)} took over {CLUSTER_NODE_SECONDS} s")
    if done.returncode != 0:
        pytest.fail(f"scripts/cluster {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _cluster_whole() -> bool:
    """Every node's API answers and lists all three nodes running."""
    want = {ClusterUnderTest.node_name(n) for n in CLUSTER_NODES}
    for url in CLUSTER_MANAGEMENT.values():
        try:
            r = httpx.get(
                f"{url}/api/nodes",
                params={"columns": "name,running"},
                auth=(BROKER_USER, BROKER_PASSWORD),
                timeout=5,
            )
            r.raise_for_status()
        except httpx.HTTPError:
            return False
        if {n["name"] for n in r.json() if n.get("running")} != want:
            return False
    return True


def _wait_cluster_whole(seconds: float = CLUSTER_NODE_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not _cluster_whole():
        if time.monotonic() > deadline:
            pytest.fail(
                f"the RabbitMQ cluster ({', '.join(CLUSTER_MANAGEMENT.values())}) is not whole "
                f"after {seconds} s: run scripts/services (or scripts/cluster up)"
            )
        time.sleep(0.5)


@contextlib.contextmanager
def _cluster_turn() -> Iterator[None]:
    """Hold the cluster for this test: tests that stop nodes must not overlap."""
    with CLUSTER_LOCK.open("a") as lock:
        deadline = time.monotonic() + CLUSTER_LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"waited {CLUSTER_LOCK_WAIT_SECONDS} s for {CLUSTER_LOCK}")
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def cluster() -> Iterator[ClusterUnderTest]:
    """The whole three-node cluster, held by this test alone, with a fresh vhost; fails (never
    skips) when the cluster is missing or not whole."""
    with _cluster_turn():
        _wait_cluster_whole(30)
        vhost = f"qr-cluster-{uuid.uuid4().hex[:10]}"
        under_test = ClusterUnderTest(vhost, dict(CLUSTER_MANAGEMENT), dict(CLUSTER_AMQP_PORTS))
        with under_test.admin() as client:
            version = client.get("/api/overview").json()["rabbitmq_version"]
            assert at_least(version, (4, 3)), f"the cluster runs RabbitMQ {version}, not 4.3+"
            client.put(f"/api/vhosts/{under_test.vhost_path}").raise_for_status()
            client.put(
                f"/api/permissions/{under_test.vhost_path}/{BROKER_USER}",
                json={"configure": ".*", "write": ".*", "read": ".*"},
            ).raise_for_status()
        try:
            yield under_test
        finally:
            _wait_cluster_whole()
            with under_test.admin() as client:
                client.delete(f"/api/vhosts/{under_test.vhost_path}")
