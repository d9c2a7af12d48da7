"""What each CLI command does, once its configuration is loaded. Each returns an exit code."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from uuid import UUID

from reaper.config import LoadedConfig
from reaper.reap import PassResult, open_sources, reap_once
from reaper.report import render_json, render_text

EXIT_OK, EXIT_NOT_OK, EXIT_USAGE = 0, 1, 2

log = logging.getLogger("reaper")


def _exit_code(result: PassResult) -> int:
    return EXIT_OK if result.ok else EXIT_NOT_OK


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
    code = _exit_code(result)
    if metrics_textfile or pushgateway:
        from reaper.errors import ReaperError
        from reaper.metrics import ReaperMetrics

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
    sources = await open_sources(loaded.settings, broker=False)
    try:
        if sources.store is None:
            print(f"reaper: cannot migrate: {sources.store_error}", file=sys.stderr)
            return EXIT_NOT_OK
        applied = await sources.store.migrate()
        if applied:
            for name in applied:
                print(f"applied {name}")
        else:
            print("schema is up to date: nothing to apply")
        return EXIT_OK
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
        print(
            json.dumps(
                [
                    {
                        "id": str(g.id),
                        "project_id": str(g.project_id),
                        "job_id": str(g.job_id) if g.job_id else None,
                        "kind": g.kind,
                        "prompt": g.prompt,
                        "choices": list(g.choices),
                        "answer": g.answer,
                        "answered_at": g.answered_at.isoformat() if g.answered_at else None,
                        "created_at": g.created_at.isoformat() if g.created_at else None,
                    }
                    for g in gates
                ],
                indent=2,
            )
        )
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
    from reaper.gates import answer_gate

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
    from reaper.policies import plan_json, plan_text
    from reaper.reap import policy_plan

    sources = await open_sources(loaded.settings, store=False)
    try:
        plan = await policy_plan(sources, loaded.settings)
    finally:
        await sources.close()
    print(json.dumps(plan_json(plan), indent=2) if as_json else plan_text(plan))
    return EXIT_OK


async def serve(loaded: LoadedConfig, listen: str) -> int:
    from reaper.hook import QueueReaper
    from reaper.metrics import ReaperMetrics
    from reaper.serve import serve as serve_http

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
    from reaper.demo import run_demo

    return await run_demo(loaded.settings)
