"""The real services the integration tests run against: where PostgreSQL and each supported
RabbitMQ version listen, a vhost of a test's own (:class:`BrokerUnderTest`), and the waits tied
to the brokers' statistics. The fixtures that hand these out are in ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shlex
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from reaper.broker.client import ManagementClient
from reaper.broker.port import BrokerPolicy

#: The one SSL context of every admin client in a test process. httpx otherwise builds one per
#: client, reading the system's CA store (about 25 ms of CPU), and the tests' polls open
#: thousands of clients: measured, most of the Python CPU of the dead-letter tests.
ADMIN_TLS = ssl.create_default_context()

PG_ADMIN_DSN = os.environ.get("QR_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

#: Every supported broker version and where its management API listens. All are required.
BROKERS = {
    "3.10": os.environ.get("QR_TEST_RABBITMQ_310", "http://127.0.0.1:15672"),
    "4.0": os.environ.get("QR_TEST_RABBITMQ_40", "http://127.0.0.1:15673"),
    "4.3": os.environ.get("QR_TEST_RABBITMQ_43", "http://127.0.0.1:15674"),
}
#: Where each version's AMQP 0-9-1 listener is, for tests that hold a real consumer.
AMQP_PORTS = {
    "3.10": int(os.environ.get("QR_TEST_RABBITMQ_310_AMQP_PORT", "5672")),
    "4.0": int(os.environ.get("QR_TEST_RABBITMQ_40_AMQP_PORT", "5673")),
    "4.3": int(os.environ.get("QR_TEST_RABBITMQ_43_AMQP_PORT", "5674")),
}
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
#: How to run ``rabbitmqctl`` against each version's node (the 4.x nodes run in chroots).
RABBITMQCTL = {
    "3.10": shlex.split(os.environ.get("QR_TEST_RABBITMQ_310_CTL", "rabbitmqctl")),
    "4.0": shlex.split(
        os.environ.get("QR_TEST_RABBITMQ_40_CTL", f"{SCRIPTS / 'rabbitmq4'} rabbitmqctl")
    ),
    "4.3": shlex.split(
        os.environ.get("QR_TEST_RABBITMQ_43_CTL", f"{SCRIPTS / 'rabbitmq43'} rabbitmqctl")
    ),
}
BROKER_USER = "guest"
BROKER_PASSWORD = "guest"


def at_least(version: str, floor: tuple[int, ...]) -> bool:
    """Whether ``version`` (``"4.3"``, ``"4.0.5"``) is ``floor`` or newer."""
    return tuple(int(p) for p in version.split(".")[: len(floor)]) >= floor


def dsn_for(database: str) -> str:
    base, _, _ = PG_ADMIN_DSN.rpartition("/")
    return f"{base}/{database}"


#: How often every test broker emits its management statistics: ``collect_statistics_interval``
#: = 500 ms, written by ``scripts/services`` (``write_stats_files``), which also has the
#: management plugin gather them every second (its finest sample interval) and quorum queues
#: report every second (``quorum_tick_interval``): a queue's depth, its policy and its message
#: counters reach the management API a second or two after the broker holds them. Every wait on
#: those figures is derived from this interval.
STATS_INTERVAL_SECONDS = 0.5
#: Long enough after a change shows for every statistic of the queue and of its channels (which
#: are emitted apart) to have been emitted again: four intervals, a margin for a loaded machine.
STATS_SETTLE_SECONDS = 4 * STATS_INTERVAL_SECONDS
#: How often ``poll_until`` looks again: twice per statistics interval.
POLL_SECONDS = STATS_INTERVAL_SECONDS / 2

#: The broker a test that proves PostgreSQL-side behaviour runs on (``on_one_broker``); every
#: other broker test runs on each version of ``BROKERS``.
ONE_BROKER = "4.3"

#: For a test (or module) whose subject is not the broker: it runs on ``ONE_BROKER`` only. A
#: test that pins what one broker version does must not carry it.
on_one_broker = pytest.mark.parametrize(
    "broker_server", [ONE_BROKER], indirect=True, ids=[f"rabbitmq-{ONE_BROKER}"]
)


@contextlib.asynccontextmanager
async def cloned_database(template: str | None, prefix: str = "qr_test") -> AsyncIterator[str]:
    """The DSN of a fresh copy of ``template`` (of PostgreSQL's empty template if None) named
    ``prefix_<random>``, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        copied = "" if template is None else f' TEMPLATE "{template}"'
        await admin.execute(f'CREATE DATABASE "{name}"{copied}')
        yield dsn_for(name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def open_vhost(admin: httpx.Client, vhost_path: str) -> None:
    """Create the vhost at ``vhost_path`` (quoted) and give the tests' broker user every
    permission on it."""
    admin.put(f"/api/vhosts/{vhost_path}").raise_for_status()
    admin.put(
        f"/api/permissions/{vhost_path}/{BROKER_USER}",
        json={"configure": ".*", "write": ".*", "read": ".*"},
    ).raise_for_status()


class OnOwnVhost:
    """A broker or a cluster reached on a vhost of the test's own, ``vhost``."""

    vhost: str

    @property
    def vhost_path(self) -> str:
        """``vhost`` as it stands in a management API path."""
        return quote(self.vhost, safe="")


@dataclass(frozen=True)
class BrokerUnderTest(OnOwnVhost):
    """One real broker, with a vhost of this test's own."""

    version: str  # a key of BROKERS: "3.10", "4.0" or "4.3"
    management_url: str
    vhost: str
    username: str = BROKER_USER
    password: str = BROKER_PASSWORD

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
            base_url=self.management_url,
            auth=(self.username, self.password),
            timeout=30,
            verify=ADMIN_TLS,
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

    def put_policy(self, name: str, body: dict[str, Any]) -> httpx.Response:
        """Put the policy ``name`` on the test's vhost as an administrator: the broker's answer,
        for the test to judge (``raise_for_status()`` where it must be taken)."""
        with self.admin() as client:
            return client.put(f"/api/policies/{self.vhost_path}/{quote(name, safe='')}", json=body)

    def queue(self, name: str) -> dict[str, object]:
        with self.admin() as client:
            r = client.get(f"/api/queues/{self.vhost_path}/{quote(name, safe='')}")
            r.raise_for_status()
            result: dict[str, object] = r.json()
            return result


async def poll_until(probe: Callable[[], Any], what: str, seconds: float) -> Any:
    """Call ``probe`` (plain or async) every ``POLL_SECONDS`` until it returns something truthy, and
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
        await asyncio.sleep(POLL_SECONDS)


async def policy_named(client: ManagementClient, name: str) -> BrokerPolicy | None:
    """The policy ``name`` as the broker holds it (one listing), or None."""
    return next((p for p in await client.list_policies() if p.name == name), None)


def broker_version(url: str) -> str:
    try:
        r = httpx.get(f"{url}/api/overview", auth=(BROKER_USER, BROKER_PASSWORD), timeout=10)
        r.raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"RabbitMQ management API unreachable at {url}: {exc} (run scripts/services)")
    return str(r.json()["rabbitmq_version"])
