"""The broker as a cluster (SPEC §10), on the live three-node RabbitMQ 4.3 cluster and a real
PostgreSQL: a whole pass with every node up; a pass with one node's app stopped, where the queue
on that node is unreadable and its open sighting is not cleared while a quorum queue that keeps
its majority is measured as usual; failover past a stopped node's management URL; and an owned
quorum dead-letter queue reaped across stops and starts of its leader's node without losing or
double-parking a letter.

Each test holds the cluster alone (the ``cluster`` fixture) and starts every node it stopped
before it returns.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaper.broker.client import ManagementClient
from reaper.config import Settings, load_config
from reaper.core.cluster import queue_unavailable
from reaper.core.domain import FLEET_PROJECT_ID, GATE_BUS_DEAD_LETTERED
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.run import reap_once
from tests.support.cli import Cli, reaper_env, validate_report
from tests.support.cluster import ClusterUnderTest
from tests.support.services import poll_until
from tests.support.store import query

pytestmark = [pytest.mark.cluster, pytest.mark.postgres]

#: A quorum queue with its three members, leader on qr1; a foreign classic queue on qr2.
QUORUM = "vibey.work"
ON_QR2 = "work.on-qr2"
DLQ = "vibey.jobs.dlq"
#: Statistics lag a leader change by about 6 s (notes/cluster-measurements.md); a node's queues
#: take up to about 13 s to come back after it starts.
SETTLE_SECONDS = 60
PASSES = 25
#: What a queue on a node whose app is stopped is listed as.
STOPPED_STATES = ("down", "stopped")


def env_for(cluster: ClusterUnderTest, pg_dsn: str, urls: list[str]) -> dict[str, str]:
    return reaper_env(
        pg_dsn,
        urls[0],
        cluster.vhost,
        REAPER_BUS__MANAGEMENT_URLS=json.dumps(urls),
        REAPER_BUS__TIMEOUT_SECONDS="10",
        REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS="20",
    )


async def measurable(cluster: ClusterUnderTest, expected: Mapping[str, int]) -> None:
    """Until each queue is listed as the pass reads it (a running node's listing, its
    statistics and policy present, servable) with the messages expected."""

    async def ready() -> bool:
        async with ManagementClient(
            cluster.urls(*cluster.running()), "guest", "guest", vhost=cluster.vhost
        ) as client:
            nodes = (await client.facts()).nodes
            listed = {q.name: q for q in await client.list_queues()}
        return all(
            name in listed
            and listed[name].counts_known
            and listed[name].policy_known
            and queue_unavailable(listed[name], nodes) is None
            and listed[name].messages == count
            for name, count in expected.items()
        )

    await poll_until(ready, f"{dict(expected)} to be measurable", SETTLE_SECONDS)


def arrange(cluster: ClusterUnderTest) -> None:
    """An owned quorum queue led by qr1 with two messages (dead-lettering past its delivery
    limit); a foreign classic queue on qr2 whose head message is an hour old (stale ready: no
    consumer)."""
    cluster.declare_queue(
        QUORUM,
        on="qr1",
        queue_type="quorum",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{QUORUM}.dlq"},
    )
    for i in range(2):
        cluster.publish(QUORUM, f"work-{i}")
    cluster.declare_queue(ON_QR2, on="qr2")
    hour_ago = int((datetime.now(UTC) - timedelta(hours=1)).timestamp())
    cluster.publish(ON_QR2, "stale", properties={"timestamp": hour_ago}, via="qr2")
    assert cluster.queue(ON_QR2)["node"] == "qr2@localhost"


async def arranged(cluster: ClusterUnderTest) -> None:
    """``arrange``, and every message it published measurable in the listing."""
    arrange(cluster)
    await measurable(cluster, {QUORUM: 2, ON_QR2: 1})


async def sighting_records(pg_dsn: str, queue: str) -> list[str]:
    rows = await query(
        pg_dsn,
        "SELECT payload->>'action' FROM event WHERE project_id = $1 "
        "AND payload->>'queue' = $2 AND payload->>'condition' = 'stale_ready' ORDER BY seq",
        FLEET_PROJECT_ID,
        queue,
    )
    return [r[0] for r in rows]


async def reap_json(cli: Cli) -> tuple[int, dict[str, Any]]:
    said = await cli("reap", "--json")
    report: dict[str, Any] = json.loads(said.out)
    validate_report(report)
    return said.code, report


# --------------------------------------------------------------------------- every node up


async def test_a_whole_pass_over_the_cluster_with_every_node_up(
    cluster: ClusterUnderTest,
    pg_dsn: str,
    cli: Cli,
) -> None:
    await arranged(cluster)

    code, report = await reap_json(cli.on(env_for(cluster, pg_dsn, cluster.urls())))

    assert code == 0 and report["ok"] is True, report["problems"]
    assert report["unreadable"] == []
    assert report["broker"]["nodes"] == [
        {"name": f"{n}@localhost", "running": True} for n in ("qr1", "qr2", "qr3")
    ]
    assert [(u["url"], u["answered"]) for u in report["management_urls"]] == [
        (cluster.management_urls["qr1"], True),
        (cluster.management_urls["qr2"], None),
        (cluster.management_urls["qr3"], None),
    ]
    evidence = report["broker"]["capabilities"]["consumer_timeout_evidence"]
    assert "every running node (qr1@localhost, qr2@localhost, qr3@localhost) loaded" in evidence
    [stale] = [v for v in report["verdicts"] if v["condition"] == "stale_ready"]
    assert (stale["queue"], stale["action"], stale["recorded"]) == (ON_QR2, "surface", True)
    [quorum] = [p for p in report["policies"] if p["name"] == "vibey-reap-quorum"]
    assert quorum["verified"] is True and quorum["queues_checked"] == 1
    assert await sighting_records(pg_dsn, ON_QR2) == ["surface"]


# --------------------------------------------------------------------------- one node down


async def test_a_pass_with_one_node_stopped_concludes_nothing_about_its_queue(
    cluster: ClusterUnderTest,
    pg_dsn: str,
    cli: Cli,
) -> None:
    await arranged(cluster)
    cli = cli.on(env_for(cluster, pg_dsn, cluster.urls()))
    code, first = await reap_json(cli)
    assert code == 0, first["problems"]
    assert await sighting_records(pg_dsn, ON_QR2) == ["surface"]

    with cluster.node_stopped("qr2"):
        # the quorum queue keeps two of three members: a new leader, then its statistics
        await measurable(cluster, {QUORUM: 2})
        # listed "down", or for a moment "stopped" (its process stopped by its supervisor)
        assert cluster.queue(ON_QR2)["state"] in STOPPED_STATES

        code, report = await reap_json(cli)

        assert code == 1 and report["ok"] is False
        [unreadable] = report["unreadable"]
        assert (unreadable["source"], unreadable["queue"]) == ("broker", ON_QR2)
        assert re.match(
            r"listed '(down|stopped)' on node qr2@localhost, which is not running: not measured",
            unreadable["error"],
        ), unreadable
        assert [(p["kind"], p["subject"]) for p in report["problems"]] == [
            ("unreadable", f"queue {ON_QR2!r}")
        ]
        # nothing concluded about the down queue: no finding, and its sighting stays open
        assert not [v for v in report["verdicts"] if v["queue"] == ON_QR2]
        assert await sighting_records(pg_dsn, ON_QR2) == ["surface"]
        assert not [n for n in report["notes"] if ON_QR2 in n]
        # the quorum queue with a majority is measured as usual, and its policy verified
        assert not [n for n in report["notes"] if QUORUM in n and "not measured" in n]
        assert QUORUM not in {u.get("queue") for u in report["unreadable"]}
        [quorum] = [p for p in report["policies"] if p["name"] == "vibey-reap-quorum"]
        assert quorum["verified"] is True and quorum["queues_checked"] == 1
        nodes = {n["name"]: n["running"] for n in report["broker"]["nodes"]}
        assert nodes == {"qr1@localhost": True, "qr2@localhost": False, "qr3@localhost": True}
        evidence = report["broker"]["capabilities"]["consumer_timeout_evidence"]
        assert "not running, so not checked: qr2@localhost" in evidence

        text = await cli.out("reap", code=1)
        assert re.search(
            rf"UNREADABLE  queue {ON_QR2!r}: listed '(down|stopped)' on node qr2@localhost", text
        ), text
        assert "Nodes:       qr1@localhost running, qr2@localhost NOT running" in text
        print(f"\n{text}")

    assert await sighting_records(pg_dsn, ON_QR2) == ["surface"]


async def test_a_stopped_nodes_management_url_first_fails_over_and_is_named(
    cluster: ClusterUnderTest,
    pg_dsn: str,
    cli: Cli,
) -> None:
    # with a dead-letter target, as arrange() declares it: without one, its default delivery
    # limit would drop, and the pass would rightly be not ok
    cluster.declare_queue(
        QUORUM,
        on="qr1",
        queue_type="quorum",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{QUORUM}.dlq"},
    )
    urls = cluster.urls("qr3", "qr1", "qr2")
    with cluster.node_stopped("qr3"):
        await measurable(cluster, {QUORUM: 0})
        code, report = await reap_json(cli.on(env_for(cluster, pg_dsn, urls)))

    assert code == 0 and report["ok"] is True, report["problems"]
    assert report["broker"] is not None and report["unreadable"] == []
    qr3, qr1 = cluster.management_urls["qr3"], cluster.management_urls["qr1"]
    assert [(u["url"], u["answered"]) for u in report["management_urls"]] == [
        (qr3, False),
        (qr1, True),
        (cluster.management_urls["qr2"], None),
    ]
    assert "connection refused" in report["management_urls"][0]["error"]
    [note] = [n for n in report["notes"] if n.startswith("management URL")]
    assert note.startswith(f"management URL {qr3} was skipped for the rest of this pass")
    assert note.endswith(f"{qr1} answered instead")


# --------------------------------------------------------------------------- dead letters


def dead_letter_settings(cluster: ClusterUnderTest, pg_dsn: str, config_dir: Path) -> Settings:
    environ = {
        "REAPER_CONFIG_DIR": str(config_dir),
        "REAPER_BUS__MANAGEMENT_URLS": json.dumps(cluster.urls()),
        "REAPER_BUS__VHOST": cluster.vhost,
        "REAPER_DATABASE__DSN": pg_dsn,
        "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "3",
    }
    return load_config(None, environ=environ).settings


async def test_an_owned_quorum_dead_letter_queue_survives_its_leaders_node_stopping(
    cluster: ClusterUnderTest, pg_dsn: str, store: PostgresStore, tmp_path: Path
) -> None:
    """25 passes over an owned quorum dead-letter queue, its leader's node stopped for passes
    6-10 and 16-20: every dead letter stays on the broker and is parked exactly once."""
    cluster.declare_queue(DLQ, on="qr1", queue_type="quorum")
    bodies = [json.dumps({"letter": i}) for i in range(5)]
    for i, body in enumerate(bodies):
        cluster.publish(DLQ, body, properties={"message_id": f"letter-{i}"})
    await measurable(cluster, {DLQ: 5})
    settings = dead_letter_settings(cluster, pg_dsn, tmp_path)

    history: list[str] = []

    async def passes(count: int, *, down: str | None = None) -> int:
        """Run ``count`` passes; how many read the queue safely."""
        reads = 0
        for _ in range(count):
            result = await reap_once(settings)
            assert not result.not_moved, result.not_moved
            assert not [u for u in result.unreadable if u.queue is None], result.unreadable
            [outcome] = [d for d in result.dead_letters.queues if d.queue == DLQ] or [None]
            gates = await store.list_gates(open_only=False, kind=GATE_BUS_DEAD_LETTERED)
            assert len(gates) <= 5
            if outcome is None:
                history.append(f"{len(history) + 1}:not judged")
                continue
            if outcome.read_blocked is None:
                assert outcome.parked_new + outcome.already_parked == 5, outcome
                reads += 1
            history.append(
                f"{len(history) + 1}:{'read' if outcome.read_blocked is None else 'blocked'}"
                f"+{outcome.parked_new}{' (' + down + ' down)' if down else ''}"
            )
        return reads

    started = time.monotonic()
    await passes(5)
    read_while_down = []
    for _ in range(2):
        leader = str(cluster.queue(DLQ)["leader"]).removesuffix("@localhost")
        with cluster.node_stopped(leader):
            await measurable(cluster, {DLQ: 5})  # a new leader, its statistics back
            read_while_down.append(await passes(5, down=leader))
        await passes(5)
    elapsed = time.monotonic() - started
    assert len(history) == PASSES

    # read on a new leader while the old one's node was down, and still nothing lost
    assert all(read_while_down), history
    await measurable(cluster, {DLQ: 5})
    with cluster.admin() as admin:
        got = admin.post(
            f"/api/queues/{cluster.vhost_path}/{DLQ}/get",
            json={"count": 10, "ackmode": "reject_requeue_true", "encoding": "auto"},
        )
        got.raise_for_status()
    assert sorted(m["payload"] for m in got.json()) == sorted(bodies)
    gates = await store.list_gates(open_only=False, kind=GATE_BUS_DEAD_LETTERED)
    assert sorted(g.identity or "" for g in gates) == [
        f"dead_letter:msg:letter-{i}" for i in range(5)
    ]
    parks = [e for e in await store.events(FLEET_PROJECT_ID) if e.payload["action"] == "park"]
    assert len(parks) == 5
    print(f"\n{PASSES} passes in {elapsed:.1f} s: {' '.join(history)}")
