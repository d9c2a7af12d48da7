"""The database's clock decides (SPEC §10): a reaper whose own clock is skewed ten minutes
either way neither requeues a live lease nor misses an expired one, and judges stale work by
the time the host's database keeps.

The reaper runs as a real process under ``faketime`` (its wall clock shifted, its monotonic
clock left alone); every time in the database is written with the database's own ``now()``, as a
host whose workers stamp leases with the database's clock does."""

from __future__ import annotations

import shutil
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.invariants import reaper_env, run_reaper
from tests.support.services import BrokerUnderTest, on_one_broker
from tests.support.store import query

pytestmark = pytest.mark.postgres

FAKETIME = shutil.which("faketime")

SEED = """
INSERT INTO job (id, project_id, kind, state, run_after, attempts, lease_owner,
                 lease_expires_at)
VALUES ($1, $4, 'build', 'leased', now() - interval '1 hour', 1, 'worker-live',
        now() + interval '5 minutes'),
       ($2, $4, 'build', 'leased', now() - interval '1 hour', 1, 'worker-dead',
        now() - interval '5 minutes'),
       ($3, $5, 'build', 'ready', now() - interval '10 minutes', 0, NULL, NULL)
"""


def test_faketime_is_installed() -> None:
    assert FAKETIME, "faketime is missing: scripts/services installs it (Debian's faketime)"


@on_one_broker
@pytest.mark.parametrize("skew", ["+10m", "-10m"])
async def test_a_skewed_reaper_clock_changes_nothing_the_database_clock_decides(
    skew: str, broker: BrokerUnderTest, pg_dsn: str, tmp_path: Path
) -> None:
    live, dead, waiting = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await query(pg_dsn, SEED + " RETURNING id", live, dead, waiting, uuid.uuid4(), uuid.uuid4())
    config_dir = tmp_path / "conf.d"
    config_dir.mkdir()
    env = reaper_env(broker, pg_dsn, config_dir)
    env["DONT_FAKE_MONOTONIC"] = "1"  # only the wall clock is skewed
    assert FAKETIME is not None

    run = await run_reaper(env, tmp_path, prefix=[FAKETIME, "-f", skew])

    assert run.report is not None, run.describe()
    states = dict(await query(pg_dsn, "SELECT id, state FROM job"))
    assert states == {live: "leased", dead: "ready", waiting: "ready"}, skew
    verdicts = run.report["verdicts"]
    assert [(v["object"], v["action"]) for v in verdicts if v["source"] == "job_queue"] == [
        (str(dead), "requeue")
    ]  # the ready job waited 10 minutes, not 20 or 0: not stale against 15
    [(now_in_db,)] = await query(pg_dsn, "SELECT now()")
    started = run.report["started_at"]
    skewed_by = abs((now_in_db - datetime.fromisoformat(started)).total_seconds())
    assert skewed_by < 120, f"the report's times come from the database's clock ({started})"
