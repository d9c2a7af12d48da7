"""Hostile input on every supported RabbitMQ version and a real PostgreSQL (SPEC §11): what a
publisher or a tenant of the broker writes never ends a pass, never misleads and never floods.
The shapes a real broker will not produce are fed through respx in
``tests/unit/test_hostile_answers.py``."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pika
import pytest

from reaper.config import Settings
from reaper.core.domain import FLEET_PROJECT_ID
from reaper.edges.commands import clear_notes, read_board
from reaper.edges.status_page import page_target, render_page
from reaper.errors import GateError
from reaper.gates.answering import answer_gate
from reaper.jobqueue.port import GateFilter
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.run import reap_once
from reaper.reap.sources import open_sources
from tests.support.cli import Cli
from tests.support.dead_letters import (
    DLQ,
    dead_letter_gates,
    dead_letter_through,
    outcome_of,
    parked_after_passes,
    wait_for_depth,
)
from tests.support.holders import connect
from tests.support.invariants import read_bodies
from tests.support.services import STATS_INTERVAL_SECONDS, BrokerUnderTest
from tests.support.store import insert_jobs, leased, query

pytestmark = [pytest.mark.broker, pytest.mark.postgres]

DEEP = 1_000


@pytest.fixture
def deep_recursion() -> Iterator[None]:
    """pika encodes a header table by recursion: a 1,000-deep one needs the room."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20 * DEEP))
    yield
    sys.setrecursionlimit(limit)


def publish_amqp(
    broker: BrokerUnderTest,
    queue: str,
    body: bytes,
    headers: dict[str, Any],
    message_id: str,
    timestamp: int | None = None,
) -> None:
    """Publish one message with a real AMQP client, as a publisher with publish rights would."""
    connection = connect(broker)
    try:
        channel = connection.channel()
        properties = pika.BasicProperties(
            message_id=message_id, headers=headers, delivery_mode=2, timestamp=timestamp
        )
        channel.basic_publish("", queue, body, properties)
    finally:
        connection.close()


def nested(depth: int) -> dict[str, Any]:
    table: dict[str, Any] = {"bottom": 1}
    for _ in range(depth - 1):
        table = {"t": table}
    return table


async def test_a_thousand_deep_header_ends_no_pass_and_every_letter_is_parked(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore, deep_recursion: None
) -> None:
    broker.declare_queue(DLQ)
    dead_letter_through(broker, DLQ, [json.dumps({"task": i}) for i in range(2)])
    publish_amqp(broker, DLQ, b'{"task": "deep"}', {"deep": nested(DEEP)}, "deep-1")
    await wait_for_depth(broker, DLQ, 3)

    await parked_after_passes(settings, DLQ, 3)
    result = await reap_once(settings)
    assert result.ok, result.problems()
    outcome = outcome_of(result, DLQ)
    assert outcome is not None and outcome.unread == 0, outcome
    gates = await dead_letter_gates(store)
    assert sorted(g.identity or "" for g in gates) == sorted(
        ["dead_letter:msg:deep-1", "dead_letter:msg:vibey.jobs-0", "dead_letter:msg:vibey.jobs-1"]
    )
    parks = [e for e in await store.events(FLEET_PROJECT_ID) if e.payload["action"] == "park"]
    cut = [e.payload["detail"] for e in parks if "cut on reading" in str(e.payload["detail"])]
    assert len(cut) == 1 and "a value nested past 32 levels" in str(cut[0]), cut
    assert len(read_bodies(broker, DLQ)) == 3  # nothing taken from the broker


# --------------------------------------------------------------------------- one letter, two queues


def fanout_dead_letter(broker: BrokerUnderTest, queues: list[str], origin: str) -> None:
    """One message dead-lettered through a fanout exchange into every one of ``queues``."""
    exchange = f"{origin}.dlx"
    vhost = broker.vhost_path
    with broker.admin() as admin:
        admin.put(
            f"/api/exchanges/{vhost}/{exchange}", json={"type": "fanout", "durable": True}
        ).raise_for_status()
        for queue in queues:
            broker.declare_queue(queue)
            admin.post(
                f"/api/bindings/{vhost}/e/{exchange}/q/{queue}", json={"routing_key": ""}
            ).raise_for_status()
    broker.declare_queue(origin, arguments={"x-dead-letter-exchange": exchange})
    broker.publish(origin, '{"task": "fanout"}', properties={"message_id": "fanout-1"})
    with broker.admin() as admin:
        got = admin.post(
            f"/api/queues/{vhost}/{origin}/get",
            json={"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"},
        )
        got.raise_for_status()
        assert len(got.json()) == 1


async def test_a_letter_fanned_into_two_queues_makes_neither_safe_to_clear_while_its_gate_is_open(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore
) -> None:
    first, second = "vibey.fan.a.dead", "vibey.fan.b.dead"
    fanout_dead_letter(broker, [first, second], "vibey.fan")
    await wait_for_depth(broker, first, 1)
    await wait_for_depth(broker, second, 1)
    parked = 0
    for _ in range(40):
        result = await reap_once(settings)
        parked += sum(d.parked_new for d in result.dead_letters.queues)
        both = [outcome_of(result, q) for q in (first, second)]
        if parked and all(o is not None and o.read_blocked is None for o in both):
            break
        await asyncio.sleep(STATS_INTERVAL_SECONDS)
    [gate] = await dead_letter_gates(store)
    assert gate.is_open
    for _ in range(3):  # the passes after: neither queue is said safe to clear
        result = await reap_once(settings)
        assert clear_notes(settings, result) == []
        board = await read_board(settings)
        page = render_page(result, board, page_target(settings))
        assert "Safe to clear" not in page, page
    assert len(read_bodies(broker, first)) == 1 and len(read_bodies(broker, second)) == 1


# --------------------------------------------------------------------------- the terminal

#: One name for each class of character that drives a terminal: the screen cleared (ESC [2J),
#: the window's title set (OSC ... BEL), a line overwritten (backspaces), the text after it
#: reversed (U+202E), a C1 control (CSI, U+009B) and DEL.
HOSTILE_NAMES = (
    "celery\x1b[2J",
    "title\x1b]0;F\x07",
    "foreign\x08\x08NOT OK fake",
    "bidi\u202egnp.exe",
    "c1\x9b31m\x7f",
    "vibey.stale\x1b[31mRED\x1b[0m",
)
#: What a newline (and a carriage return before it) in a job's kind or an answer's ``--by``
#: would forge as a line of its own (every RabbitMQ version strips CR and LF from queue names).
FORGED = "NOT OK: forged"
#: Every character no text output may carry raw (the newline ends its lines).
DRIVES = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


async def test_no_name_or_answer_drives_the_terminal_in_any_text_output(
    broker: BrokerUnderTest,
    pg_dsn: str,
    store: PostgresStore,
    broker_cli: Cli,
) -> None:
    old = int(time.time()) - 3 * 3600
    for name in HOSTILE_NAMES:
        broker.declare_queue(name)
        broker.publish(name, "{}", properties={"timestamp": old})
    await wait_for_depth(broker, HOSTILE_NAMES[0], 1)
    poison = replace(leased(uuid.uuid4(), attempts=7, max_attempts=7), kind="render\x1b[2J")
    forging = replace(leased(uuid.uuid4(), attempts=7, max_attempts=7), kind=f"send\r\n{FORGED}")
    await insert_jobs(pg_dsn, [poison, forging])

    shown: dict[str, str] = {}

    async def run(*argv: str) -> str:
        said = await broker_cli(*argv)
        shown[" ".join(argv)] = said.out + said.err
        return said.out

    for _ in range(20):  # until the listing shows every queue's head timestamp
        report = json.loads(await run("reap", "--json"))
        named = {v["object"] for v in report["verdicts"]}
        if all(any(n in o for o in named) for n in HOSTILE_NAMES[:5]):
            break
        await asyncio.sleep(STATS_INTERVAL_SECONDS)
    # JSON keeps each name exactly
    assert all(any(n in o for o in named) for n in HOSTILE_NAMES[:5]), named
    gates = await store.list_gates(GateFilter(kind="delivery_exhausted"))
    [gate] = [g for g in gates if "render" in g.prompt]
    [forging_gate] = [g for g in gates if g is not gate]
    await run("gates", "answer", str(gate.id), "--choice", "retry", "--by", "ana\x1b[2J\u202e")
    await run("gates", "answer", str(forging_gate.id), "--choice", "retry", "--by", f"bo\n{FORGED}")
    # a lease that ran out, its kind and holder carrying a newline: requeued by the text report
    expired = replace(leased(uuid.uuid4(), owner=f"w\n{FORGED}"), kind=f"mail\n{FORGED}")
    await insert_jobs(pg_dsn, [expired])
    await run("reap", "-o", "wide")
    await run("reap")
    await run("policies", "plan")
    await run("doctor")
    await run("gates", "list", "--all")
    await run("gates", "show", str(gate.id))
    await run("gates", "show", str(forging_gate.id))
    await run("events")
    for command, text in shown.items():
        assert not DRIVES.search(text), (command, DRIVES.findall(text))
        forged = [line for line in text.splitlines() if line.lstrip().startswith(FORGED)]
        assert not forged, (command, forged, text)
    everything = "\n".join(shown.values())
    for escaped in ("celery\\x1b[2J", "\\x1b]0;F\\x07", "foreign\\x08\\x08NOT OK", "bidi\\u202e"):
        assert escaped in shown["reap -o wide"], (escaped, shown["reap -o wide"])
    assert "c1\\x9b31m\\x7f" in shown["reap -o wide"]
    assert "ana\\x1b[2J\\u202e" in shown["events"] and "ana\\x1b[2J\\u202e" in everything
    assert "render\\x1b[2J" in shown[f"gates show {gate.id}"]
    assert f"send\\x0d\\n{FORGED}" in shown[f"gates show {forging_gate.id}"]
    assert f"bo\\n{FORGED}" in shown["events"]
    assert "requeue  lease_expired" in shown["reap -o wide"], shown["reap -o wide"]


# ------------------------------------------------------------ what PostgreSQL cannot hold


async def test_a_name_holding_nul_is_stored_escaped_the_same_way_every_pass(
    broker: BrokerUnderTest,
    pg_dsn: str,
    store: PostgresStore,
    broker_cli: Cli,
) -> None:
    foreign, dlq = "foreign\x00nul", "vibey.jobs\x00.dead"
    broker.declare_queue(foreign)
    broker.declare_queue(dlq)
    publish_amqp(broker, foreign, b"{}", {}, "old-1", timestamp=int(time.time()) - 3 * 3600)
    publish_amqp(broker, dlq, b'{"task": "nul"}', {"x-first-death-queue": "vibey.jobs"}, "nul-1")
    await wait_for_depth(broker, foreign, 1)
    await wait_for_depth(broker, dlq, 1)

    async def reap() -> tuple[int, dict[str, Any]]:
        said = await broker_cli("reap", "--json")
        return said.code, json.loads(said.out)

    parked = False
    for _ in range(20):  # until the letter is parked and the old head is measured
        code, report = await reap()
        parked = parked or any(d["parked_new"] for d in report["dead_letters"])
        if parked and foreign in {f["subject"] for f in report["findings"]}:
            break
        await asyncio.sleep(STATS_INTERVAL_SECONDS)
    passes = [(code, report), await reap(), await reap()]
    for _ in range(10):  # until the quiet mark it kept matches the listing: read back exactly
        if any("not read: nothing arrived" in n for n in passes[-1][1]["notes"]):
            break
        await asyncio.sleep(STATS_INTERVAL_SECONDS)
        passes.append(await reap())
    assert any("not read: nothing arrived" in n for n in passes[-1][1]["notes"])
    for code, report in passes:
        assert (code, report["ok"], report["failed"]) == (0, True, []), report["problems"]
        assert report["unreadable"] == []
        # the JSON report shows the exact names; the notes say they were stored escaped
        assert {f["subject"] for f in report["findings"]} >= {foreign}
        assert [d["queue"] for d in report["dead_letters"]] == [dlq]
        escaped = [n for n in report["notes"] if "stored escaped" in n]
        assert any(n.startswith(f"queue {foreign}: ") for n in escaped), report["notes"]
    # one sighting and one park across every pass: the identity stayed the same
    rows = await query(
        pg_dsn,
        "SELECT payload ->> 'action' AS action, payload ->> 'queue' AS queue FROM event "
        "WHERE kind = 'QueueReaped' ORDER BY seq",
    )
    actions = [(r["action"], r["queue"]) for r in rows if r["queue"] != "vibey.jobs"]
    assert sorted(actions) == [("park", "vibey.jobs\\x00.dead"), ("surface", "foreign\\x00nul")]
    [mark] = await query(pg_dsn, "SELECT queue FROM reaper_quiet_mark")
    assert mark["queue"] == "vibey.jobs\\x00.dead"
    [letter] = await query(pg_dsn, "SELECT queue, message_id FROM dead_letter")
    assert (letter["queue"], letter["message_id"]) == ("vibey.jobs\\x00.dead", "nul-1")
    [gate] = await dead_letter_gates(store)
    assert gate.is_open and "vibey.jobs\\x00.dead" in gate.prompt


# ------------------------------------------------------------------------ heavy letters

MIB = 1024 * 1024


async def test_heavy_letters_are_each_parked_as_cut_and_none_can_be_replayed(
    broker: BrokerUnderTest, settings: Settings, store: PostgresStore
) -> None:
    """Ten letters with 2 MiB headers and 5 MiB bodies, published through the management API
    (AMQP refuses a 2 MiB content header: RabbitMQ's frame_max is 131,072 bytes): each one
    parked, by its message id or by the digest of what was read, recorded as cut, and refused
    for replay. The memory a pass takes over a hundred of them: bench/hostile_memory.py."""
    header, pad = "h" * (2 * MIB), "x" * (5 * MIB)
    broker.declare_queue(DLQ)
    for n in range(10):
        properties: dict[str, object] = {
            "headers": {"x-first-death-queue": "vibey.jobs", "big": header}
        }
        if n % 2 == 0:
            properties["message_id"] = f"heavy-{n}"
        broker.publish(DLQ, f'{{"letter": {n}, "pad": "{pad}"}}', properties=properties)
    await wait_for_depth(broker, DLQ, 10)

    await parked_after_passes(settings, DLQ, 10)
    rows = await store.parked_dead_letters([g.job_id for g in await dead_letter_gates(store)])
    identities = sorted(p.letter.identity for p in rows.values())
    assert [i for i in identities if i.startswith("msg:")] == [
        f"msg:heavy-{n}" for n in (0, 2, 4, 6, 8)
    ]
    assert len([i for i in identities if i.startswith("sha256:")]) == 5
    assert all(p.letter.body_truncated for p in rows.values())  # never parked as if whole
    parks = [e for e in await store.events(FLEET_PROJECT_ID) if e.payload["action"] == "park"]
    assert len(parks) == 10
    assert all("cut on reading (a text of" in str(e.payload["detail"]) for e in parks), parks
    sources = await open_sources(settings)
    try:
        for gate in await dead_letter_gates(store):
            with pytest.raises(GateError, match="not whole"):
                await answer_gate(sources, settings, gate.id, "replay")
    finally:
        await sources.close()
    assert all(g.is_open for g in await dead_letter_gates(store))
    assert len(read_bodies(broker, DLQ, 10)) == 10  # nothing taken from the broker
