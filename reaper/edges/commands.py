"""What each CLI command does, once its configuration is loaded. Each returns an exit code
(SPEC §5): 0 ok, 1 ran but not ok, 2 usage or configuration error."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Final
from uuid import UUID

from reaper.config import LoadedConfig
from reaper.core.domain import Dispatch
from reaper.demo.run import run_demo
from reaper.edges.gates import answer_gate
from reaper.edges.hook import QueueReaper
from reaper.edges.metrics import ReaperMetrics
from reaper.edges.report import gate_json, render_json, render_text
from reaper.edges.serve import serve as serve_http
from reaper.errors import ReaperError
from reaper.jobqueue.postgres import PostgresStore
from reaper.policies.report import plan_json, plan_text
from reaper.reap.dispatch import dispatch_in_force
from reaper.reap.policies import policy_plan
from reaper.reap.run import reap_once
from reaper.reap.sources import open_sources

__all__ = ["EXIT_NOT_OK", "EXIT_OK", "EXIT_USAGE"]

EXIT_OK: Final = 0
EXIT_NOT_OK: Final = 1
EXIT_USAGE: Final = 2

log = logging.getLogger("reaper")


async def reap(
    loaded: LoadedConfig,
    *,
    dry_run: bool,
    as_json: bool,
    project_id: UUID | None,
    metrics_textfile: Path | None,
    pushgateway: str | None,
) -> int:
    result = await reap_once(loaded.settings, dry_run=dry_run, project_id=project_id)
    print(render_json(result) if as_json else render_text(result))
    code = EXIT_OK if result.ok else EXIT_NOT_OK
    if metrics_textfile or pushgateway:
        metrics = ReaperMetrics()
        metrics.observe(result)
        try:
            if metrics_textfile:
                metrics.write_textfile(metrics_textfile)
            if pushgateway:
                metrics.push(pushgateway)
        except ReaperError as exc:
            print(f"reaper: metrics not exported: {exc}", file=sys.stderr)
            code = EXIT_NOT_OK
    return code


async def migrate(loaded: LoadedConfig) -> int:
    db = loaded.settings.database
    try:
        store = await PostgresStore.connect(
            db.dsn,
            password=db.password.get_secret_value() if db.password else None,
            pool_size=1,
            statement_timeout_seconds=db.statement_timeout_seconds,
        )
    except ReaperError as exc:
        print(f"reaper: cannot migrate: {exc.reason}", file=sys.stderr)
        return EXIT_NOT_OK
    try:
        applied = await store.migrate()
    finally:
        await store.close()
    for name in applied:
        print(f"applied {name}")
    if not applied:
        print("schema is up to date: nothing to apply")
    return EXIT_OK


async def dispatch_of(loaded: LoadedConfig) -> tuple[str | None, str]:
    """The dispatch in force as the database shows it now (``reaper config show``): the mode,
    or None when it cannot be told, and why."""
    declared = loaded.settings.queue.reap.dispatch
    if declared == "polling":
        return Dispatch.POLLING.value, "declared (dispatch = polling)"
    sources = await open_sources(loaded.settings, broker=False)
    try:
        if sources.store is None:
            return None, f"dispatch = {declared}, and {sources.store_error}"
        facts = await sources.store.database_facts()
        found = dispatch_in_force(declared, facts.outbox_schema)
        return found.mode.value, found.why
    except ReaperError as exc:
        return None, f"dispatch = {declared}, and {exc.reason}"
    finally:
        await sources.close()


async def gates_list(loaded: LoadedConfig, *, as_json: bool, include_answered: bool) -> int:
    sources = await open_sources(loaded.settings, broker=False)
    try:
        if sources.store is None:
            print(f"reaper: cannot list gates: {sources.store_error}", file=sys.stderr)
            return EXIT_NOT_OK
        gates = await sources.store.list_gates(open_only=not include_answered)
    finally:
        await sources.close()
    if as_json:
        print(json.dumps([gate_json(g) for g in gates], indent=2))
        return EXIT_OK
    if not gates:
        print("no open gates" if not include_answered else "no gates")
        return EXIT_OK
    for g in gates:
        state = f"answered {g.answer!r}" if g.answer else "open"
        print(f"{g.id}  {g.kind}  {state}  choices: {', '.join(g.choices)}")
        for line in g.prompt.splitlines():
            print(f"    {line}")
    return EXIT_OK


async def gates_answer(loaded: LoadedConfig, gate_id: UUID, choice: str) -> int:
    sources = await open_sources(loaded.settings)
    try:
        if sources.store is None:
            print(f"reaper: cannot answer: {sources.store_error}", file=sys.stderr)
            return EXIT_NOT_OK
        outcome = await answer_gate(sources, loaded.settings, gate_id, choice)
    finally:
        await sources.close()
    print(outcome)
    return EXIT_OK


async def policies_plan(loaded: LoadedConfig, *, as_json: bool) -> int:
    sources = await open_sources(loaded.settings, store=False)
    try:
        assert sources.broker is not None  # opening the broker's client never fails
        plan = await policy_plan(sources.broker, loaded.settings)
    finally:
        await sources.close()
    print(json.dumps(plan_json(plan), indent=2) if as_json else plan_text(plan))
    return EXIT_OK


async def serve(loaded: LoadedConfig, listen: str) -> int:
    reaper = QueueReaper(loaded.settings)
    try:
        return await serve_http(
            listen,
            loaded.settings.queue.reap.interval_seconds,
            reaper.run_now,
            ReaperMetrics(),
        )
    finally:
        await reaper.aclose()


async def demo(loaded: LoadedConfig) -> int:
    return await run_demo(loaded.settings)
