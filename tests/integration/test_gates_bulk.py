"""``reaper gates answer`` over a selection, on real PostgreSQL with real poison parks (SPEC
§12): the selection is shown with its count, nothing is written without ``--yes``, each gate is
answered in its own transaction with its own ``GateAnswered`` event, and a person answering
single gates beside a bulk answer still gives exactly one answer per gate."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import uuid
from pathlib import Path

import pytest

from reaper.config import load_config
from reaper.edges.arguments import build_parser
from reaper.edges.gate_bulk import answer_selection
from reaper.jobqueue.postgres import PostgresStore
from tests.integration.test_gates_cli import park
from tests.support.cli import Cli, database_env
from tests.support.store import query

pytestmark = pytest.mark.postgres

#: Poison parks each test makes: more than a report lists, fewer than a slow test needs.
PARKS = 24


async def parks(store: PostgresStore, dsn: str) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Half the parks three hours ago, half six minutes ago: each half's gate ids."""
    old = [await park(store, dsn, 3, "render.video") for _ in range(PARKS // 2)]
    new = [await park(store, dsn, 0.1, "mail.send") for _ in range(PARKS // 2)]
    return old, new


async def answers(dsn: str) -> dict[uuid.UUID, int]:
    """Per gate, the GateAnswered events on the ledger."""
    rows = await query(
        dsn,
        "SELECT (payload->>'gate')::uuid AS gate, count(*) AS n FROM event "
        "WHERE kind = 'GateAnswered' GROUP BY 1",
    )
    return {r["gate"]: r["n"] for r in rows}


async def test_a_selection_is_shown_counted_and_answered_only_with_yes(
    pg_dsn: str, store: PostgresStore, db_cli: Cli
) -> None:
    old, new = await parks(store, pg_dsn)
    select = ("gates", "answer", "--choice", "retry", "--older-than", "1h")

    out = await db_cli.out(*select, "--dry-run")
    assert out.startswith("12 open gates would be answered 'retry' (--older-than 1h):")
    assert all(g.hex[:8] in out for g in old) and not any(g.hex[:8] in out for g in new)
    assert "dry run: nothing was written or sent" in out
    assert await answers(pg_dsn) == {}

    # not at a terminal and no --yes: shown, nothing answered, a usage error
    captured = await db_cli(*select)
    assert captured.code == 2
    assert "12 open gates would be answered" in captured.out
    assert "nothing answered: add --yes to answer these 12 gate(s)" in captured.err
    assert await answers(pg_dsn) == {}

    out = await db_cli.out(*select, "--yes", "--by", "ana@ops")
    assert "12 of 12 gate(s) answered 'retry', each with its own GateAnswered event" in out
    assert await answers(pg_dsn) == {g: 1 for g in old}
    rows = await query(
        pg_dsn,
        "SELECT g.answered_by, j.state FROM human_gate g JOIN job j ON j.id = g.job_id "
        "WHERE g.id = ANY($1::uuid[])",
        old,
    )
    assert {(r["answered_by"], r["state"]) for r in rows} == {("ana@ops", "ready")}
    [(still_open,)] = await query(
        pg_dsn, "SELECT count(*) FROM human_gate WHERE answered_at IS NULL"
    )
    assert still_open == len(new)

    # a dead-letter queue selects only dead-letter gates: none of these poison ones
    out = await db_cli.out("gates", "answer", "--choice", "cancel", "--queue", "q.dead")
    assert out.startswith("0 open gates would be answered 'cancel'")

    # a choice a gate does not offer leaves it open, saying so
    out = await db_cli.out("gates", "answer", "--choice", "replay", "--all", "--yes")
    assert "12 selected gate(s) left open, not answerable 'replay'" in out
    assert "it offers retry/cancel" in out

    # one gate or a selection, never both; neither is a usage error
    err = await db_cli.err("gates", "answer", new[0].hex[:8], "--choice", "cancel", "--all")
    assert "not both" in err
    err = await db_cli.err("gates", "answer", "--choice", "cancel")
    assert "name a GATE, or select gates" in err
    assert await answers(pg_dsn) == {g: 1 for g in old}


async def test_a_typed_count_confirms_at_a_terminal(
    pg_dsn: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    old = [await park(store, pg_dsn, 2, "render.video") for _ in range(3)]
    loaded = load_config(None, database_env(pg_dsn))
    args = build_parser().parse_args(["gates", "answer", "--choice", "cancel", "--all"])
    prompts: list[str] = []

    def typed(text: str) -> str:
        def ask(prompt: str) -> str:
            prompts.append(prompt)
            return text

        return ask

    assert await answer_selection(loaded, args, typed("yes")) == 2
    assert await answers(pg_dsn) == {}
    assert prompts == ["type 3 to answer these 3 gate(s), anything else to stop: "]
    assert await answer_selection(loaded, args, typed("3")) == 0
    assert await answers(pg_dsn) == {g: 1 for g in old}


async def reaper(tmp_path: Path, env: dict[str, str], *argv: str) -> tuple[int, str]:
    """``python -m reaper ARGV`` in a process of its own: its exit code and output."""
    empty = tmp_path / "conf.d"
    empty.mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.upper().startswith("REAPER_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reaper", "--config-dir", str(empty), *argv,
        env={**environ, **env}, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_single_answers_beside_a_bulk_answer_give_one_answer_per_gate(
    pg_dsn: str, store: PostgresStore, tmp_path: Path
) -> None:
    old, new = await parks(store, pg_dsn)
    gates = old + new  # oldest first: the order the bulk answer takes them in
    env = database_env(pg_dsn)
    bulk = reaper(tmp_path, env, "gates", "answer", "--all", "--choice", "cancel", "--yes")
    # a person answering every third gate, one at a time, at the same moment
    singles = [
        reaper(tmp_path, env, "gates", "answer", g.hex[:8], "--choice", "retry")
        for g in reversed(gates[::3])
    ]
    (bulk_code, bulk_out), *single = await asyncio.gather(bulk, *singles)

    assert await answers(pg_dsn) == {g: 1 for g in gates}  # one answer per gate, every gate
    retried = [g for g, (code, _) in zip(reversed(gates[::3]), single, strict=True) if code == 0]
    cancelled = PARKS - len(retried)
    # the bulk answer lists the gates still open when it starts, and answers each still open
    [selected] = re.findall(r"^(\d+) open gates? would be answered 'cancel'", bulk_out, re.M)
    assert f"{cancelled} of {selected} gate(s) answered 'cancel'" in bulk_out, bulk_out
    assert bulk_out.count("not answered: ") == int(selected) - cancelled
    assert bulk_code == (0 if cancelled == int(selected) else 1)
    rows = await query(
        pg_dsn,
        "SELECT g.id, g.answer, j.state FROM human_gate g JOIN job j ON j.id = g.job_id",
    )
    states = {r["id"]: (r["answer"], r["state"]) for r in rows}
    assert all(states[g] == ("retry", "ready") for g in retried)
    assert sum(s == ("cancel", "cancelled") for s in states.values()) == cancelled
    print(f"\n{PARKS} gates: {cancelled} answered by the bulk answer, {len(retried)} singly")
