"""The ledger is shared (SPEC §10): while a host process appends to the same project streams
and to the fleet stream in a tight loop (``seq = max(seq) + 1``, its ordinary way), four reapers
at once move 5,000 expired leases and park dead letters. No row fails, every stream stays
gapless and unique whoever wrote it, and every move has exactly one event."""

from __future__ import annotations

import asyncio
import json
import random
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reaper.core.domain import FLEET_PROJECT_ID
from tests.support.invariants import (
    Seeded,
    check_invariants,
    count_expired_leases,
    random_projects,
    reaper_env,
    run_reaper,
    seed_dead_letter_queues,
    seed_expired_leases,
    wait_for_no_reaper_backends,
)
from tests.support.services import BrokerUnderTest, on_one_broker
from tests.support.store import query

#: The ledger is PostgreSQL's; concurrent reads of dead letters on every version are
#: ``test_load.py``'s.
pytestmark = [pytest.mark.broker, pytest.mark.postgres, on_one_broker]

REAPERS = 4
LEASES = 5_000
PROJECTS = 20
DEAD_LETTERS = 40
HOST_WRITER = Path(__file__).resolve().parents[1] / "support" / "host_writer.py"


async def test_four_reapers_and_a_host_writer_share_every_stream(
    broker: BrokerUnderTest, pg_dsn: str, tmp_path: Path
) -> None:
    rng = random.Random(11)
    config_dir = tmp_path / "conf.d"
    config_dir.mkdir()
    env = reaper_env(broker, pg_dsn, config_dir)
    seeded = Seeded()
    projects = random_projects(rng, PROJECTS)
    await seed_expired_leases([pg_dsn], seeded, LEASES, projects, rng, now=datetime.now(UTC))
    await seed_dead_letter_queues(broker, seeded, {"vibey.shared": DEAD_LETTERS}, tag="host")

    host = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HOST_WRITER),
        pg_dsn,
        *(str(p) for p in [*projects, FLEET_PROJECT_ID]),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        runs = []
        for _ in range(5):
            runs += await asyncio.gather(
                *(run_reaper(env, tmp_path / "runs") for _ in range(REAPERS))
            )
            parked = (await query(pg_dsn, "SELECT count(*) FROM dead_letter"))[0][0]
            if not await count_expired_leases(pg_dsn, datetime.now(UTC)) and (
                parked == DEAD_LETTERS
            ):
                break
    finally:
        host.terminate()
        out, _ = await host.communicate()
    writer = json.loads(out)

    for run in runs:
        assert run.report is not None, run.describe()
        kinds = [p["kind"] for p in run.report["problems"]]
        assert "row_not_moved" not in kinds and "outcome_unknown" not in kinds, run.describe()
        assert not run.report["unreadable"], run.describe()
    await wait_for_no_reaper_backends(pg_dsn)
    summary = await check_invariants(pg_dsn, seeded, broker, read_broker=False)
    assert summary.lease_events == seeded.expected_moves()
    assert sum(summary.lease_events.values()) == LEASES
    assert summary.dead_letter_parks == DEAD_LETTERS
    host_events = (await query(pg_dsn, "SELECT count(*) FROM event WHERE kind = 'HostEvent'"))[0]
    assert host_events[0] == writer["appended"] > 0
    print(
        f"\nRabbitMQ {broker.version}: {len(runs)} passes by {REAPERS} reapers moved {LEASES} "
        f"leases and parked {DEAD_LETTERS} dead letters while the host appended "
        f"{writer['appended']} events to the same {PROJECTS + 1} streams "
        f"({writer['collisions']} of its own inserts lost a number and were retried)"
    )
