"""The broker as a cluster, without one: which queue can be measured, failover across management
URLs (respx: a refused or timed-out node on demand), every node's configuration, and a pass
that meets a queue whose node is down. The live cluster is in
``tests/integration/test_cluster_live.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from reaper.broker.capabilities import capabilities_for
from reaper.broker.client import ManagementClient
from reaper.broker.evidence import broker_wide_consumer_timeout
from reaper.broker.records import queue_of
from reaper.config import load_config
from reaper.core.cluster import queue_unavailable
from reaper.core.dead_letters import read_plan
from reaper.core.domain import (
    FLEET_PROJECT_ID,
    Action,
    BrokerNode,
    Condition,
    QueueStats,
    Source,
    Unit,
    Verdict,
)
from reaper.core.sightings import is_read, records_to_write, ref_of
from reaper.edges.cli import main
from reaper.edges.report import render_text, to_json
from reaper.errors import BrokerUnavailable, ConfigError
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources
from reaper.testing.memory import MemoryJobQueue
from tests.support.cli import validate_report
from tests.support.fake_broker import FakeBroker
from tests.support.queues import queue_stats
from tests.support.verdicts import broker_finding

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
N1, N2, N3 = "http://node-1.test:15672", "http://node-2.test:15672", "http://node-3.test:15672"
PASSWORD = "hunter2-s3cr3t"
SNIPPET = "/etc/rabbitmq/conf.d/20-vibey-reap.conf"
UP = (BrokerNode("qr1@h", True), BrokerNode("qr2@h", True), BrokerNode("qr3@h", True))
QR2_DOWN = (BrokerNode("qr1@h", True), BrokerNode("qr2@h", False), BrokerNode("qr3@h", True))
MEMBERS = ("qr1@h", "qr2@h", "qr3@h")


def queue(name: str, kind: str = "quorum", **fields: Any) -> QueueStats:
    return queue_stats(name, kind, ready=1, **fields)


# --------------------------------------------------------------------------- which queue


def test_a_queue_listed_down_or_in_minority_is_unavailable() -> None:
    down = queue("cq", "classic", state="down", node="qr2@h", counts_known=False)
    assert queue_unavailable(down, QR2_DOWN) == "listed 'down' on node qr2@h, which is not running"
    minority = queue("qq", state="minority", node="qr3@h", members=MEMBERS, online=("qr1@h",))
    assert queue_unavailable(minority, UP) == "listed 'minority' on node qr3@h"
    assert queue_unavailable(queue("x", state="stopped"), None) == "listed 'stopped'"
    assert queue_unavailable(queue("x", "classic", state="crashed"), None) is not None


def test_a_quorum_queue_with_a_majority_is_measured_and_one_without_is_not() -> None:
    majority = queue("qq", state="running", node="qr1@h", members=MEMBERS, online=MEMBERS[::2])
    assert queue_unavailable(majority, QR2_DOWN) is None
    # the state lags: two of three members gone is no majority, whatever the state says
    lost = replace(majority, online=("qr1@h",))
    assert "only 1 of its 3 members online: no majority" in (queue_unavailable(lost, UP) or "")
    stale_leader = replace(majority, node="qr2@h", online=("qr1@h", "qr3@h"))
    assert "leader qr2@h is not among its members online" in (
        queue_unavailable(stale_leader, QR2_DOWN) or ""
    )


def test_a_queue_whose_node_is_not_running_is_unavailable_a_new_queue_is_not() -> None:
    on_stopped = queue("cq", "classic", state="running", node="qr2@h")
    assert queue_unavailable(on_stopped, QR2_DOWN) == "its node qr2@h is not running"
    # listed before its statistics arrived, on a running node: new, not unavailable
    new = queue("cq", "classic", state="running", node="qr1@h", counts_known=False)
    assert queue_unavailable(new, QR2_DOWN) is None
    # a broker that lists no state and no node (LavinMQ) is judged by its statistics alone
    assert queue_unavailable(queue("lavin", None), None) is None
    for state in ("running", "flow", "idle"):
        assert queue_unavailable(queue("x", state=state, node="qr1@h"), UP) is None


def test_a_down_queue_is_read_as_listed_with_its_statistics_absent() -> None:
    # GET /api/queues on a 4.3 cluster with qr2's app stopped (notes/cluster-measurements.md)
    item = {
        "arguments": {"x-queue-type": "quorum"},
        "leader": "qr2@h",
        "members": ["qr2@h"],
        "name": "qq1-qr2",
        "node": "qr2@h",
        "online": [],
        "state": "down",
        "type": "quorum",
    }
    stats = queue_of(item, "/")
    assert stats is not None
    assert (stats.state, stats.node, stats.members, stats.online) == (
        "down",
        "qr2@h",
        ("qr2@h",),
        (),
    )
    assert not stats.counts_known and not stats.policy_known
    classic = queue_of({"name": "cq", "node": "qr1@h", "state": "running", "type": "classic"}, "/")
    assert classic is not None and classic.members is None and classic.online is None


# --------------------------------------------------------------------------- failover


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        yield router


OVERVIEW = {"rabbitmq_version": "4.3.6", "product_name": "RabbitMQ", "node": "qr1@h"}


async def test_a_refusing_node_is_skipped_for_the_rest_of_the_pass(mock: respx.MockRouter) -> None:
    refused = mock.get(url__startswith=N1).mock(side_effect=httpx.ConnectError("refused"))
    mock.get(f"{N2}/api/overview").respond(200, json=OVERVIEW)
    mock.get(f"{N2}/api/whoami").respond(200, json={"name": "reaper", "tags": []})
    async with ManagementClient([N1, N2, N3], "reaper", PASSWORD) as client:
        await client.whoami()
        await client.whoami()
        assert refused.call_count == 1  # asked once, then skipped
        endpoints = client.endpoints()
        assert [(e.url, e.answered) for e in endpoints] == [(N1, False), (N2, True), (N3, None)]
        assert "connection refused" in (endpoints[0].error or "")
        assert client.management_url == N2

        client.begin_pass()  # the next pass asks the preferred node first again
        await client.whoami()
        assert refused.call_count == 2
        assert client.requests_made == 5


async def test_a_node_that_times_out_on_a_read_is_skipped(mock: respx.MockRouter) -> None:
    mock.get(f"{N1}/api/whoami").mock(side_effect=httpx.ReadTimeout("read timed out"))
    mock.get(f"{N2}/api/whoami").respond(200, json={"name": "reaper", "tags": []})
    async with ManagementClient([N1, N2], "reaper", PASSWORD, timeout_seconds=2) as client:
        assert (await client.whoami())["name"] == "reaper"
        (first, second) = client.endpoints()
        assert first.answered is False and "timed out after 2 s" in (first.error or "")
        assert second.answered is True


async def test_a_write_that_times_out_is_not_sent_to_another_node(
    mock: respx.MockRouter,
) -> None:
    mock.put(url__startswith=N1).mock(side_effect=httpx.ReadTimeout("read timed out"))
    elsewhere = mock.put(url__startswith=N2).respond(204)
    async with ManagementClient([N1, N2], "reaper", PASSWORD, timeout_seconds=2) as client:
        with pytest.raises(BrokerUnavailable) as caught:
            await client.put_policy(
                "vibey-reap", {"consumer-timeout": 1}, pattern="^x", apply_to="queues", priority=0
            )
    assert not elsewhere.called
    assert "whether it took effect is unknown" in caught.value.reason
    assert N1 in caught.value.reason


async def test_the_broker_is_unreadable_only_when_no_node_answers(mock: respx.MockRouter) -> None:
    mock.get(url__startswith=N1).mock(side_effect=httpx.ConnectError("refused"))
    mock.get(url__startswith=N2).mock(side_effect=httpx.ConnectTimeout("connect timed out"))
    async with ManagementClient([N1, N2], "reaper", PASSWORD) as client:
        with pytest.raises(BrokerUnavailable) as caught:
            await client.facts()
        with pytest.raises(BrokerUnavailable):
            await client.list_queues()  # every node skipped: nothing more is sent
    reason = caught.value.reason
    assert reason.startswith("no RabbitMQ management API answered: at http://node-1")
    assert N1 in reason and N2 in reason and "\n" not in reason
    assert PASSWORD not in reason
    assert client.requests_made == 2


def test_every_url_is_held_to_the_rules_of_one() -> None:
    with pytest.raises(ValueError, match="carries credentials") as caught:
        ManagementClient([N1, f"http://admin:{PASSWORD}@node-2.test:15672"], "reaper", PASSWORD)
    assert PASSWORD not in str(caught.value)
    with pytest.raises(ValueError, match="no management URL"):
        ManagementClient([], "reaper", PASSWORD)


# --------------------------------------------------------------------------- every node


def nodes_of(*specs: tuple[str, bool, list[str] | None]) -> tuple[BrokerNode, ...]:
    return tuple(
        BrokerNode(name, running, None if files is None else tuple(files))
        for name, running, files in specs
    )


def test_the_fallback_is_in_force_only_where_every_running_node_loaded_it() -> None:
    every = nodes_of(*((n, True, ["/etc/rabbitmq.conf", SNIPPET]) for n in MEMBERS))
    ms, evidence = broker_wide_consumer_timeout(every, "", None, 21_600_000)
    assert ms == 21_600_000
    assert "every running node (qr1@h, qr2@h, qr3@h) loaded 20-vibey-reap.conf" in evidence

    one_lacks = nodes_of(
        ("qr1@h", True, [SNIPPET]),
        ("qr2@h", True, ["/etc/rabbitmq.conf"]),
        ("qr3@h", True, [SNIPPET]),
    )
    live = (21_600_000, "a live consumer on queue 'q' shows it")
    ms, evidence = broker_wide_consumer_timeout(one_lacks, "", live, 21_600_000)
    assert ms is None
    assert "node qr2@h did not load 20-vibey-reap.conf (loaded: /etc/rabbitmq.conf)" in evidence
    assert "only for its own node" in evidence  # one consumer proves one node


def test_a_stopped_node_is_named_and_checked_once_it_runs() -> None:
    # /api/nodes lists a stopped node with running: false and no config_files
    one_down = nodes_of(
        ("qr1@h", True, [SNIPPET]), ("qr2@h", False, None), ("qr3@h", True, [SNIPPET])
    )
    ms, evidence = broker_wide_consumer_timeout(one_down, "", None, 21_600_000)
    assert ms == 21_600_000
    assert "every running node (qr1@h, qr3@h)" in evidence
    assert "not running, so not checked: qr2@h" in evidence
    unlisted = nodes_of(("qr1@h", True, None), ("qr2@h", True, [SNIPPET]))
    ms, evidence = broker_wide_consumer_timeout(unlisted, "", None, 1)
    assert ms is None and "node qr1@h does not list the config files it loaded" in evidence


async def test_facts_read_every_node_in_one_request(mock: respx.MockRouter) -> None:
    mock.get(f"{N1}/api/overview").respond(200, json=OVERVIEW)
    mock.get(f"{N1}/api/consumers/%2F").respond(200, json=[])
    nodes = mock.get(f"{N1}/api/nodes").respond(
        200,
        json=[
            {"name": "qr2@h", "running": False},
            {"name": "qr1@h", "running": True, "config_files": [SNIPPET]},
            {"name": "qr3@h", "running": True, "config_files": ["/etc/rabbitmq.conf"]},
        ],
    )
    async with ManagementClient(N1, "reaper", PASSWORD) as client:
        facts = await client.facts(declared_consumer_timeout_ms=21_600_000)
    assert nodes.call_count == 1
    assert nodes.calls.last.request.url.params["columns"] == "name,running,config_files"
    assert [(n.name, n.running) for n in facts.nodes or ()] == [
        ("qr1@h", True),
        ("qr2@h", False),
        ("qr3@h", True),
    ]
    assert facts.consumer_timeout_ms is None
    assert "node qr3@h did not load 20-vibey-reap.conf" in (facts.consumer_timeout_evidence or "")


# --------------------------------------------------------------------------- dead letters


def test_a_dead_letter_queue_is_never_read_while_it_cannot_be_served() -> None:
    facts = replace(capabilities_for("RabbitMQ", "4.3.6"), nodes=QR2_DOWN)
    safe = queue(
        "vibey.jobs.dlq",
        state="running",
        node="qr1@h",
        members=MEMBERS,
        online=("qr1@h", "qr3@h"),
        policy="vibey-dead-letters",
        effective_policy={"delivery-limit": -1},
        reported_delivery_limit=-1,
    )
    assert read_plan(safe, facts, 100).blocked is None
    for now in (
        replace(safe, state="minority", online=("qr1@h",)),
        replace(safe, state="down", node="qr2@h", online=()),
        replace(safe, online=("qr1@h",)),  # the listing's state lags the members online
    ):
        plan = read_plan(now, facts, 100)
        assert plan.count == 0 and plan.blocked is not None
        assert "leader up and a majority of its members online" in plan.blocked
    new_leader = replace(safe, counts_known=False, policy_known=False, reported_delivery_limit=None)
    assert read_plan(new_leader, facts, 100).count == 0


# --------------------------------------------------------------------------- sightings


def stale_on(name: str) -> Verdict:
    return broker_finding(name, Condition.STALE_READY, 1200, threshold=900, unit=Unit.SECONDS)


def test_an_unread_queue_clears_nothing_and_the_others_clear_as_before() -> None:
    both = frozenset(Source)
    on_down, elsewhere = stale_on("work.on-qr2"), stale_on("work.on-qr1")
    latest = {ref_of(on_down): on_down, ref_of(elsewhere): elsewhere}
    records = records_to_write({}, latest, both, unread_queues=frozenset({"work.on-qr2"}))
    assert [(r.queue, r.action) for r in records] == [("work.on-qr1", Action.CLEARED)]
    assert not is_read(on_down, both, None, frozenset({"work.on-qr2"}))
    assert is_read(on_down, both, None)


def pass_settings() -> Any:
    env = {"REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "0"}
    return load_config(None, env).settings


async def test_a_pass_concludes_nothing_about_a_queue_whose_node_is_down() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker(version="4.3.6", nodes=UP)
    old = int((NOW - timedelta(hours=1)).timestamp())
    for name, node in (("work.on-qr2", "qr2@h"), ("work.on-qr1", "qr1@h")):
        broker.declare(name, "classic", ready=3)
        broker.queues[name] = replace(
            broker.queues[name], state="running", node=node, head_message_timestamp=old
        )
    first = await run_pass(pass_settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert first.ok, first.problems()
    assert {r.verdict.queue for r in first.verdicts if r.recorded} == {"work.on-qr1", "work.on-qr2"}

    # qr2 stops: its queue is listed "down" with no statistics; qr1's queue is drained
    broker.nodes = QR2_DOWN
    broker.queues["work.on-qr2"] = replace(
        broker.queues["work.on-qr2"],
        state="down",
        messages_ready=0,
        head_message_timestamp=None,
        counts_known=False,
        policy_known=False,
    )
    broker.queues["work.on-qr1"] = replace(broker.queues["work.on-qr1"], messages_ready=0)
    second = await run_pass(pass_settings(), Sources(store=store, broker=broker), clock=lambda: NOW)

    assert not second.ok
    assert [(p.kind, p.subject) for p in second.problems()] == [
        ("unreadable", "queue 'work.on-qr2'")
    ]
    assert "listed 'down' on node qr2@h, which is not running" in second.problems()[0].detail
    cleared = [r.verdict.queue for r in second.verdicts if r.verdict.action is Action.CLEARED]
    assert cleared == ["work.on-qr1"]  # the down queue's sighting stays open
    events = await store.events(FLEET_PROJECT_ID)
    latest = {e.payload["queue"]: e.payload["action"] for e in events}
    assert latest == {"work.on-qr2": "surface", "work.on-qr1": "cleared"}
    assert not any("listed without statistics" in n for n in second.notes)

    report = to_json(second)
    validate_report(report)
    assert report["unreadable"][0]["queue"] == "work.on-qr2"
    assert report["broker"]["nodes"][1] == {"name": "qr2@h", "running": False}
    text = render_text(second)
    assert "UNREADABLE  queue 'work.on-qr2': listed 'down' on node qr2@h" in text
    assert "Nodes:       qr1@h running, qr2@h NOT running, qr3@h running" in text


async def test_queues_whose_statistics_restart_are_dropped_by_name_and_clear_nothing() -> None:
    # A node restarted, or overloaded (measured: a 4.0 node of 50,000 queues listed 106 of them
    # so for as long as it ran): queues listed running without statistics are not kept whole,
    # yet each is named, no finding on one is cleared, and the report says so in one note.
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker(version="4.3.6", nodes=UP)
    old = int((NOW - timedelta(hours=1)).timestamp())
    names = [f"work.{i}" for i in range(7)]
    for name in names:
        broker.declare(name, "classic", ready=3)
        broker.queues[name] = replace(
            broker.queues[name], state="running", node="qr1@h", head_message_timestamp=old
        )
    first = await run_pass(pass_settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert {r.verdict.queue for r in first.verdicts if r.recorded} == set(names)

    for name in names[1:]:
        broker.queues[name] = replace(
            broker.queues[name], messages_ready=0, head_message_timestamp=None, counts_known=False
        )
    broker.queues[names[0]] = replace(broker.queues[names[0]], messages_ready=0)
    second = await run_pass(pass_settings(), Sources(store=store, broker=broker), clock=lambda: NOW)

    assert second.ok, second.problems()
    assert [q.name for q in second.queues] == []
    assert sorted(second.quiet.without_statistics) == names[1:]
    assert second.inventory().queues_foreign == len(names)
    cleared = [r.verdict.queue for r in second.verdicts if r.verdict.action is Action.CLEARED]
    assert cleared == [names[0]]  # the others' sightings stay open
    assert [n for n in second.notes if "without statistics" in n] == [
        "6 queues are listed without statistics yet (new queues, or ones whose leader just "
        "moved): 'work.1', 'work.2', 'work.3', 'work.4', 'work.5' and 1 more; their counts are "
        "not measured"
    ]
    validate_report(to_json(second))


async def test_owned_queues_dropped_without_statistics_still_count_as_this_vhosts() -> None:
    # All of the vhost's owned queues listed without statistics (a node just restarted): none
    # is kept whole, yet the vhost still holds ours, so no other vhost is named in its place.
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker(version="4.3.6", nodes=UP)
    names = ["vibey.jobs.p1", "vibey.jobs.p2"]
    for name in names:
        broker.declare(name, "quorum")
        broker.queues[name] = replace(
            broker.queues[name], arguments={"x-dead-letter-exchange": "vibey.dlx"}
        )
    broker.elsewhere = {"other": ["vibey.jobs.p9"]}
    first = await run_pass(pass_settings(), Sources(store=store, broker=broker), clock=lambda: NOW)
    assert first.ok, first.problems()
    for name in names:
        broker.queues[name] = replace(broker.queues[name], counts_known=False)
    second = await run_pass(pass_settings(), Sources(store=store, broker=broker), clock=lambda: NOW)

    assert sorted(second.quiet.without_statistics) == names
    assert second.queues == ()
    assert second.inventory().queues_owned == 2
    assert second.owned_elsewhere.counts == {}


async def test_queues_on_a_stopped_node_are_one_problem_line_and_each_stays_in_the_json() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker(version="4.3.6", nodes=QR2_DOWN)
    down = [f"work.on-qr2.{i}" for i in range(7)]
    for name in [*down, "work.on-qr1"]:
        broker.declare(name, "classic")
        node = "qr1@h" if name == "work.on-qr1" else "qr2@h"
        broker.queues[name] = replace(broker.queues[name], state="running", node=node)
    for name in down:
        broker.queues[name] = replace(
            broker.queues[name], state="down", counts_known=False, policy_known=False
        )
    result = await run_pass(pass_settings(), Sources(store=store, broker=broker), clock=lambda: NOW)

    assert [(p.kind, p.subject) for p in result.problems()] == [("unreadable", "7 queues")]
    assert result.status() == "NOT OK: 7 queues unreadable"
    (line,) = [p.line() for p in result.problems()]
    assert line.startswith(
        "UNREADABLE  7 queues: each of 'work.on-qr2.0', 'work.on-qr2.1', 'work.on-qr2.2', "
        "'work.on-qr2.3', 'work.on-qr2.4' and 2 more: listed 'down' on node qr2@h, which is "
        "not running: not measured"
    ), line
    report = to_json(result)
    validate_report(report)
    assert sorted(u["queue"] for u in report["unreadable"]) == down
    assert render_text(result).count("UNREADABLE") == 1


async def test_owned_queues_on_a_stopped_node_are_one_note_of_each_policy() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker(version="4.3.6", nodes=QR2_DOWN)
    down = [f"vibey.jobs.p{i}" for i in range(7)]
    for name in down:
        broker.declare(name, "quorum")
        broker.queues[name] = replace(
            broker.queues[name],
            state="down",
            node="qr2@h",
            counts_known=False,
            policy_known=False,
            arguments={"x-dead-letter-exchange": "vibey.dlx"},
        )
    result = await run_pass(pass_settings(), Sources(store=store, broker=broker), clock=lambda: NOW)

    (quorum,) = [o for o in result.policies.outcomes if o.name == "vibey-reap-quorum"]
    assert quorum.detail.count("not checked on") == 1, quorum.detail
    assert (
        "not checked on 7 queues, which cannot be read now (listed 'down' on node qr2@h, which "
        "is not running): vibey.jobs.p0, vibey.jobs.p1, vibey.jobs.p2, vibey.jobs.p3, "
        "vibey.jobs.p4 and 2 more"
    ) in quorum.detail


# --------------------------------------------------------------------------- configuration


def test_management_urls_are_a_list_in_order_of_preference() -> None:
    env = {"REAPER_BUS__MANAGEMENT_URLS": json.dumps([N2, N1, N3])}
    bus = load_config(None, env).settings.bus
    assert bus.urls_in_force() == (N2, N1, N3)
    assert load_config(None, {}).settings.bus.urls_in_force() == ("http://127.0.0.1:15672",)


@pytest.mark.parametrize(
    ("urls", "problem"),
    [
        ([], "is an empty list, which names no broker"),
        ([N1, f"http://admin:{PASSWORD}@node-2.test:15672"], "item 2 carries credentials"),
        ([N1, "ftp://node-2.test"], "item 2 must be an http:// or https:// URL"),
        ([N1, N1 + "/"], "lists a URL twice"),
    ],
    ids=["empty", "credentials", "not-http", "twice"],
)
def test_management_urls_are_refused_as_management_url_is(urls: list[str], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {"REAPER_BUS__MANAGEMENT_URLS": json.dumps(urls)})
    (line,) = caught.value.problems
    assert line.startswith("bus.management_urls") and problem in line
    assert PASSWORD not in str(caught.value)


def test_config_show_explains_the_urls_in_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./conf.d: the environment alone
    monkeypatch.setenv("REAPER_BUS__MANAGEMENT_URLS", json.dumps([N2, N1]))
    monkeypatch.setenv("REAPER_QUEUE__REAP__DISPATCH", "polling")
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "management API in force, in order of preference (bus.management_urls):" in out
    assert f"  1. {N2}\n  2. {N1}\n" in out
    assert "bus.management_url is not used" in out
    assert main(["config", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["management_urls"]
    assert shown["in_force"] == [N2, N1] and shown["key"] == "bus.management_urls"
