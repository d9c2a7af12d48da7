"""A pass run through the command line against a test database and vhost, shared by the
end-to-end tests (``test_pass.py``, ``test_dry_run_proof.py``, ``test_least_privileges.py``,
``test_demo.py``, ...): the ``REAPER_`` environment, the CLI in a thread, the demo scenario
seeded, and what a report must say on every version."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reaper.broker.client import ManagementClient
from reaper.config import load_config
from reaper.demo.scenario import Scenario
from reaper.demo.seed import seed
from reaper.edges.cli import main
from reaper.jobqueue.postgres import PostgresStore
from tests.support.services import BrokerUnderTest
from tests.support.store import query

SCHEMA = json.loads(resources.files("reaper.edges").joinpath("schema/report.json").read_text())
#: The report's schema, itself checked once. ``jsonschema.validate`` checks the schema again on
#: every call: a hundred generated reports spent most of 48 s on that beside the suite.
_validator_class = jsonschema.validators.validator_for(SCHEMA)
_validator_class.check_schema(SCHEMA)
_REPORT_VALIDATOR = _validator_class(SCHEMA)


def validate_report(report: object) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``report`` is a report as the schema says."""
    _REPORT_VALIDATOR.validate(report)


#: A PostgreSQL port and a management port nothing listens on.
CLOSED_PG_DSN = "postgresql://postgres@127.0.0.1:1/postgres"
CLOSED_BROKER_URL = "http://127.0.0.1:1"


def reaper_env(
    pg_dsn: str,
    management_url: str,
    vhost: str,
    *,
    username: str = "guest",
    password: str = "guest",
    **extra: str,
) -> dict[str, str]:
    """The ``REAPER_`` environment that points a pass at one test database and vhost."""
    return {
        "REAPER_DATABASE__DSN": pg_dsn,
        "REAPER_BUS__MANAGEMENT_URL": management_url,
        "REAPER_BUS__VHOST": vhost,
        "REAPER_BUS__USERNAME": username,
        "REAPER_BUS__PASSWORD": password,
        **extra,
    }


def database_env(dsn: str) -> dict[str, str]:
    """The ``REAPER_`` environment of a command that needs the database alone: listing, showing
    and answering a poison gate, reading the ledger. The management URL is one nothing listens
    on, which proves no broker is asked."""
    return {"REAPER_DATABASE__DSN": dsn, "REAPER_BUS__MANAGEMENT_URL": "http://127.0.0.1:9"}


async def run_cli(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: Mapping[str, str], *argv: str
) -> int:
    """``reaper --config-dir <empty> ARGV`` with exactly ``env`` as the ``REAPER_`` environment,
    from an empty working directory (no ./conf.d), in a thread: the CLI runs its own event
    loop."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("REAPER_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    empty = tmp_path / "conf.d"
    empty.mkdir(exist_ok=True)
    monkeypatch.chdir(tmp_path)
    return await asyncio.to_thread(main, ["--config-dir", str(empty), *argv])


@dataclass(frozen=True)
class Said:
    """What one command said: its exit code and what it wrote to stdout and stderr."""

    code: int
    out: str
    err: str


@dataclass(frozen=True)
class Cli:
    """``reaper ARGV`` as ``run_cli`` runs it, with one environment, and what it wrote read
    back after each command: ``await cli("gates", "list")`` is a ``Said``."""

    monkeypatch: pytest.MonkeyPatch
    tmp_path: Path
    capsys: pytest.CaptureFixture[str]
    env: Mapping[str, str]

    async def __call__(self, *argv: str) -> Said:
        code = await run_cli(self.monkeypatch, self.tmp_path, self.env, *argv)
        captured = self.capsys.readouterr()
        return Said(code, captured.out, captured.err)

    async def out(self, *argv: str, code: int = 0) -> str:
        """What ``reaper ARGV`` wrote to stdout, once its exit code is asserted to be ``code``."""
        said = await self(*argv)
        assert said.code == code, said
        return said.out

    async def err(self, *argv: str, code: int = 2) -> str:
        """What ``reaper ARGV`` wrote to stderr, once its exit code is asserted to be ``code``
        (a usage error unless said)."""
        said = await self(*argv)
        assert said.code == code, said
        return said.err

    def on(self, env: Mapping[str, str]) -> Cli:
        """The same commands with another environment."""
        return Cli(self.monkeypatch, self.tmp_path, self.capsys, env)


@dataclass(frozen=True)
class Seeded:
    scenario: Scenario
    env: dict[str, str]
    pg_dsn: str
    broker: BrokerUnderTest


async def seed_scenario(pg_dsn: str, broker: BrokerUnderTest) -> Seeded:
    env = reaper_env(pg_dsn, broker.management_url, broker.vhost)
    settings = load_config(None, env).settings
    store = await PostgresStore.connect(pg_dsn)
    client = ManagementClient(broker.management_url, "guest", "guest", vhost=broker.vhost)
    try:
        scenario = await seed(store, client, now=datetime.now(UTC), settings=settings)
    finally:
        await store.close()
        await client.aclose()
    return Seeded(scenario, env, pg_dsn, broker)


async def event_count(dsn: str) -> int:
    return int((await query(dsn, "SELECT count(*) FROM event"))[0][0])


def verdicts(report: Mapping[str, Any], **match: Any) -> list[dict[str, Any]]:
    return [v for v in report["verdicts"] if all(v[k] == w for k, w in match.items())]


def assert_ok_but_for_what_the_version_does_not_enforce(
    code: int, report: Mapping[str, Any], broker: BrokerUnderTest
) -> None:
    """The pass is ok (exit 0) on every version. 4.3 enforces no consumer timeout on classic
    queues, so there the scenario's owned classic queues (its outbox and delay tier) are bounded
    by nothing: the classic policy is not verified (``NotEnforced``), which no write can change,
    so it does not fail the pass; each such queue is an ``unbounded`` finding instead."""
    assert code == 0, report
    assert report["ok"] is True and report["problems"] == [], report
    if not broker.at_least(4, 3):
        return
    [classic] = [p for p in report["policies"] if p["name"] == "vibey-reap-classic"]
    assert (classic["verified"], classic["reason"], classic["unenforceable"]) == (
        False,
        "NotEnforced",
        True,
    )
    unbounded = {f["subject"] for f in report["findings"] if f["condition"] == "unbounded"}
    assert set(classic["queues_failing"]) <= unbounded, report["findings"]


def recorded_lease_moves(report: Mapping[str, Any]) -> int:
    """How many lease moves ``report`` counts as recorded (committed with their events): by its
    counts, which the pass knows even when PostgreSQL is gone and the moves cannot be listed
    back; when it lists them, the listing agrees, and when it cannot, one line says how many
    and the ``reaper events`` command that lists them."""
    counted = report["lease_reap"]
    recorded = counted["moved"] if counted["recorded"] else 0
    listed = sum(
        1
        for v in report["verdicts"]
        if v["source"] == "job_queue" and v["action"] in ("requeue", "park") and v["recorded"]
    )
    if counted["listed"]:
        assert listed == recorded and counted["unlisted"] is None, counted
    else:
        assert listed <= recorded, counted
        assert not recorded or f"{recorded} lease move(s) committed" in counted["unlisted"]
        assert not recorded or "reaper events --kind QueueReaped" in counted["unlisted"]
    return int(recorded)
