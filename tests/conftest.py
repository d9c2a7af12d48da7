"""Fixtures for real services: a PostgreSQL database per test, a vhost per test on each
supported RabbitMQ version, and the three-node 4.3 cluster (``cluster``) for tests that stop
and start its nodes.

A service that cannot be reached fails the test that needs it; it never skips. The services
are brought up by ``scripts/services`` (``.ci/run`` calls it first).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import asyncpg
import pytest

from reaper.broker.client import ManagementClient
from reaper.config import Settings
from reaper.jobqueue.postgres import PostgresStore
from reaper.schema.migrations import migrate
from tests.support.accounts import README_PERMISSIONS, README_TAGS, broker_user, login_role
from tests.support.cli import Cli, database_env, reaper_env
from tests.support.cluster import (
    CLUSTER_AMQP_PORTS,
    CLUSTER_MANAGEMENT,
    ClusterUnderTest,
    cluster_turn,
    wait_cluster_whole,
)
from tests.support.dead_letters import settings_for
from tests.support.schedule import long_first
from tests.support.services import (
    BROKERS,
    PG_ADMIN_DSN,
    BrokerUnderTest,
    at_least,
    broker_version,
    cloned_database,
    dsn_for,
    open_vhost,
)

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
        store = await PostgresStore.connect(dsn_for(name))
        try:
            await migrate(store.database)
        finally:
            await store.close()
        yield name
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
async def bare_role(pg_dsn: str) -> AsyncIterator[str]:
    """A login role of this test's own, holding nothing; what it was granted in ``pg_dsn``'s
    database is dropped afterwards, then the role."""
    async with login_role(pg_dsn, "qr_bare") as name:
        yield name


@pytest.fixture
async def pg_empty_dsn() -> AsyncIterator[str]:
    """The DSN of a fresh database with no migration applied."""
    async with cloned_database(None, "qr_empty") as dsn:
        yield dsn


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    """The command line with no ``REAPER_`` environment: ``cli.on(env)`` gives it one."""
    return Cli(monkeypatch, tmp_path, capsys, {})


@pytest.fixture
def db_cli(pg_dsn: str, cli: Cli) -> Cli:
    """The command line on this test's database alone (no broker answers): ``await
    db_cli("gates", "list")``."""
    return cli.on(database_env(pg_dsn))


# --------------------------------------------------------------------------- RabbitMQ


@pytest.fixture(scope="session", params=sorted(BROKERS), ids=lambda v: f"rabbitmq-{v}")
def broker_server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """Each supported broker version in turn (``on_one_broker``: ``ONE_BROKER`` only); a
    version that is not reachable fails."""
    version: str = request.param
    url = BROKERS[version]
    actual = broker_version(url)
    assert actual.startswith(version), f"expected RabbitMQ {version} at {url}, found {actual}"
    return version, url


@pytest.fixture
def broker(broker_server: tuple[str, str]) -> Iterator[BrokerUnderTest]:
    """A fresh vhost on each supported broker version, deleted afterwards."""
    version, url = broker_server
    vhost = f"qr-test-{uuid.uuid4().hex[:10]}"
    under_test = BrokerUnderTest(version=version, management_url=url, vhost=vhost)
    with under_test.admin() as client:
        open_vhost(client, under_test.vhost_path)
    try:
        yield under_test
    finally:
        with under_test.admin() as client:
            client.delete(f"/api/vhosts/{quote(vhost, safe='')}")


@pytest.fixture
def broker_cli(broker: BrokerUnderTest, pg_dsn: str, cli: Cli) -> Cli:
    """The command line on this test's database and its vhost on each broker version."""
    return cli.on(reaper_env(pg_dsn, broker.management_url, broker.vhost))


@pytest.fixture
async def client(broker: BrokerUnderTest) -> AsyncIterator[ManagementClient]:
    """The reaper's management client on this test's vhost, as the broker's test user."""
    async with ManagementClient(
        broker.management_url, broker.username, broker.password, vhost=broker.vhost
    ) as c:
        yield c


@pytest.fixture
def readme_user(broker: BrokerUnderTest) -> Iterator[tuple[str, str]]:
    """A management user of this test's own (name, password) with only the tags and vhost
    permissions the README lists, deleted afterwards."""
    with broker_user(broker, "qr-reaper", README_TAGS, README_PERMISSIONS) as name_and_password:
        yield name_and_password


@pytest.fixture
def settings(broker: BrokerUnderTest, pg_dsn: str, tmp_path: Path) -> Settings:
    """A pass's settings from the environment alone (an empty config dir), pointed at this
    test's vhost and database."""
    return settings_for(broker, pg_dsn, tmp_path)


# --------------------------------------------------------------------------- the cluster


@pytest.fixture
def cluster() -> Iterator[ClusterUnderTest]:
    """The whole three-node cluster, held by this test alone, with a fresh vhost; fails (never
    skips) when the cluster is missing or not whole."""
    with cluster_turn():
        wait_cluster_whole(30)
        vhost = f"qr-cluster-{uuid.uuid4().hex[:10]}"
        under_test = ClusterUnderTest(vhost, dict(CLUSTER_MANAGEMENT), dict(CLUSTER_AMQP_PORTS))
        with under_test.admin() as client:
            version = client.get("/api/overview").json()["rabbitmq_version"]
            assert at_least(version, (4, 3)), f"the cluster runs RabbitMQ {version}, not 4.3+"
            open_vhost(client, under_test.vhost_path)
        try:
            yield under_test
        finally:
            wait_cluster_whole()
            with under_test.admin() as client:
                client.delete(f"/api/vhosts/{under_test.vhost_path}")


# --------------------------------------------------------------------------- scheduling


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the tests marked ``slow`` head the workers' shares
    (``tests/support/schedule.py`` says why)."""
    workers = getattr(config, "workerinput", {}).get("workercount", 0)
    if workers > 1:
        is_long = [item.get_closest_marker("slow") is not None for item in items]
        items[:] = long_first(items, is_long, workers)
