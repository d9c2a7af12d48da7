"""The three-node RabbitMQ 4.3 test cluster (``scripts/services`` brings it up,
``scripts/cluster`` stops and starts its nodes): :class:`ClusterUnderTest`, and the lock and
waits that let tests that stop nodes take turns. The ``cluster`` fixture is in
``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.support.services import ADMIN_TLS, BROKER_PASSWORD, BROKER_USER, SCRIPTS, OnOwnVhost

#: The three-node RabbitMQ 4.3 cluster (``scripts/services`` brings it up, ``scripts/cluster``
#: stops and starts its nodes): each node's management API and AMQP port. All are required.
CLUSTER_NODES = ("qr1", "qr2", "qr3")
CLUSTER_MANAGEMENT = {n: f"http://127.0.0.1:{15680 + i}" for i, n in enumerate(CLUSTER_NODES, 1)}
CLUSTER_AMQP_PORTS = {n: 5680 + i for i, n in enumerate(CLUSTER_NODES, 1)}
CLUSTER_SCRIPT = SCRIPTS / "cluster"
#: Cluster tests stop nodes, so they take turns, across xdist workers and concurrent runs.
CLUSTER_LOCK = Path(os.environ.get("QR_TEST_CLUSTER_LOCK", "/tmp/queue-reaper-cluster.lock"))
CLUSTER_LOCK_WAIT_SECONDS = 900
#: How long a node may take to stop or start (scripts/cluster waits for the peers' view).
CLUSTER_NODE_SECONDS = 120


@dataclass(frozen=True)
class ClusterUnderTest(OnOwnVhost):
    """The three-node cluster, with a vhost of this test's own, and the one way a test stops
    a node: :meth:`node_stopped`, which always starts it again and waits for the cluster to be
    whole before it returns."""

    vhost: str
    management_urls: dict[str, str]
    amqp_ports: dict[str, int]
    username: str = BROKER_USER
    password: str = BROKER_PASSWORD

    @staticmethod
    def node_name(node: str) -> str:
        return node if "@" in node else f"{node}@localhost"

    def urls(self, *first: str) -> list[str]:
        """Every management URL, the nodes named first (in that order), then the rest."""
        order = [*first, *(n for n in self.management_urls if n not in first)]
        return [self.management_urls[n] for n in order]

    def admin(self, node: str = "qr1") -> httpx.Client:
        return httpx.Client(
            base_url=self.management_urls[node],
            auth=(self.username, self.password),
            timeout=30,
            verify=ADMIN_TLS,
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
        cluster_script("stop", node)
        try:
            yield
        finally:
            cluster_script("start", node)
            wait_cluster_whole()


def cluster_script(*args: str) -> str:
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


def cluster_whole() -> bool:
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


def wait_cluster_whole(seconds: float = CLUSTER_NODE_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not cluster_whole():
        if time.monotonic() > deadline:
            pytest.fail(
                f"the RabbitMQ cluster ({', '.join(CLUSTER_MANAGEMENT.values())}) is not whole "
                f"after {seconds} s: run scripts/services (or scripts/cluster up)"
            )
        time.sleep(0.5)


@contextlib.contextmanager
def cluster_turn() -> Iterator[None]:
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
