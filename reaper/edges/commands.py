"""What each CLI command does, once its configuration is loaded.

What each CLI command does, once its configuration is loaded. Each returns an exit code
(SPEC §5): 0 ok, 1 ran but not ok, 2 usage or configuration error."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Final
from uuid import UUID

from reaper.config import LoadedConfig, Settings
from reaper.core.domain import Dispatch
from reaper.core.terminal import one_line as terminal_line
from reaper.demo.run import DemoPass, Said, run_demo
from reaper.edges import colour
from reaper.edges.hook import QueueReaper
from reaper.edges.metrics import ReaperMetrics
from reaper.edges.report import render_text, write_json
from reaper.edges.serve import serve as serve_http
from reaper.edges.status_page import page_target
from reaper.edges.wording import where
from reaper.errors import (
    GateError,
    MigrationStopped,
    PassFailed,
    ReaperError,
    SourceUnreadable,
    StoreUnavailable,
    scrub,
)
from reaper.gates.board import GateBoard, board_of, safe_to_clear
from reaper.gates.ids import resolve_project
from reaper.jobqueue.database import Database
from reaper.jobqueue.dispatch import dispatch_in_force
from reaper.policies.report import plan_json, plan_text
from reaper.reap.policies import policy_plan
from reaper.reap.progress import RecordedVerdict
from reaper.reap.result import PassResult
from reaper.reap.run import reap_once
from reaper.reap.sources import open_sources
from reaper.reap.stopping import StopRequest
from reaper.schema.migrations import MigrationRun, one_line
from reaper.schema.migrations import migrate as migrate_schema
from reaper.schema.plan import script

__all__ = ["EXIT_NOT_OK", "EXIT_OK", "EXIT_USAGE", "clear_notes", "read_board", "render_migration"]

EXIT_OK: Final = 0
EXIT_NOT_OK: Final = 1
EXIT_USAGE: Final = 2

log = logging.getLogger("reaper")


async def reap(
    loaded: LoadedConfig,
    *,
    dry_run: bool,
    output: str = "text",
    project_id: UUID | str | None,
    metrics_textfile: Path | None,
    pushgateway: str | None,
    quiet: bool = False,
) -> int:
    """One pass, its report printed as ``output`` says (``text``, ``wide`` or ``json``;
    ``quiet``: the status line alone)."""
    if isinstance(project_id, str):
        project_id = await _project(loaded, project_id)
    stop = StopRequest()
    ok = False

    async def report(result: PassResult) -> None:
        """The report, printed while the pass's sources are open: every lease move is read
        back from the ledger as it is printed (``--json``, ``-o wide``)."""
        nonlocal ok
        if log.isEnabledFor(logging.DEBUG):  # -v: what the pass decided, beside what it read
            for line in decisions(result):
                log.debug("decided: %s", line)
        if metrics_textfile or pushgateway:  # before the report: a failed export is in it
            failed = _export(result, metrics_textfile, pushgateway)
            result = dataclasses.replace(result, not_exported=failed)
        ok = result.ok
        if output == "json":
            await write_json(result, sys.stdout)  # every verdict, streamed
        elif quiet:
            print(colour.report(render_text(result).splitlines()[0], sys.stdout))
        else:
            listed = await _every_move(result) if output == "wide" else None
            text = render_text(result, wide=output == "wide", listed=listed)
            print(colour.report(text, sys.stdout))
            for line in clear_notes(loaded.settings, result):  # what waits for a person
                print(line)

    with _stop_on_signals(stop):
        await reap_once(
            loaded.settings, dry_run=dry_run, project_id=project_id, stop=stop, report=report
        )
    return EXIT_OK if ok else EXIT_NOT_OK


async def _every_move(result: PassResult) -> list[RecordedVerdict] | None:
    """Every lease move of the pass, read back (``-o wide`` lists each); None when they
    cannot be read (the first few the pass read are listed, and a note says why)."""
    try:
        return [r async for r in result.leases.listing]
    except SourceUnreadable as exc:
        result.leases.listing.lost = exc.reason  # the report says so, and how to list them
        return None


@contextlib.contextmanager
def _stop_on_signals(stop: StopRequest) -> Iterator[None]:
    """SIGTERM or SIGINT asks the pass to stop (the moves in flight end, then the report); a
    second one ends the process at once, as the signal does by default."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)

    def first(signum: signal.Signals) -> None:
        if stop.by is not None:  # a second one, delivered before the first was handled
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        stop.request(signum.name)
        for sig in signals:
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_DFL)
        print(
            f"reaper: {signum.name}: ending the moves in flight, then the report of what was "
            "done (a second signal ends it at once)",
            file=sys.stderr,
            flush=True,
        )

    if threading.current_thread() is not threading.main_thread():
        yield  # a pass run in a thread (a test's): signals go to the main thread's handlers
        return
    for sig in signals:
        loop.add_signal_handler(sig, first, sig)
    try:
        yield
    finally:
        if stop.by is None:
            for sig in signals:
                loop.remove_signal_handler(sig)


def decisions(result: PassResult) -> list[str]:
    """What a pass decided, for ``-v``: each verdict that is not a lease move, the lease moves
    counted per condition and action, each policy's action and reason."""
    moves: Counter[str] = Counter()
    for (condition, action), n in result.leases.listing.tally().items():
        moves[f"{action.value} {condition.value}"] += n  # counted, not read back
    lines = [
        f"{r.verdict.condition.value} {where(r.verdict, wide=True)}: {r.verdict.action.value}"
        for r in result.verdicts
    ]
    lines += [f"{what}: {n} job(s)" for what, n in moves.items()]
    lines += [f"policy {p.name}: {p.action} ({p.reason})" for p in result.policies.outcomes]
    return lines


def _export(
    result: PassResult, textfile: Path | None, pushgateway: str | None
) -> tuple[tuple[str, str, str], ...]:
    """Export the pass's metrics where asked; each export that failed: where, why, fix."""
    metrics = ReaperMetrics()
    metrics.observe(result)
    board, why = result.gates.board, result.gates.board_error
    if board is not None:  # what waits for a person, as `reaper serve` exports it
        metrics.observe_gates(board)
    elif why is not None:
        print(f"reaper: the open gates were not read for the metrics: {why}", file=sys.stderr)
    failed: list[tuple[str, str, str]] = []
    if textfile:
        try:
            metrics.write_textfile(textfile)
        except ReaperError as exc:
            fix = (
                f"create {textfile.parent} (node-exporter's textfile directory) and let the "
                "reaper's user write to it, or point --metrics-textfile at that directory"
            )
            failed.append((f"--metrics-textfile {textfile}", str(exc), fix))
    if pushgateway:
        try:
            metrics.push(pushgateway)
        except ReaperError as exc:
            fix = "check that the Pushgateway runs and that --pushgateway is its URL"
            failed.append((f"--pushgateway {scrub(pushgateway)}", str(exc), fix))
    return tuple(failed)


async def _project(loaded: LoadedConfig, named: str) -> UUID:
    """The project ``--project`` names (an id, a prefix of one in the ledger, or fleet)."""
    try:
        return UUID(named)
    except ValueError:
        pass  # a prefix, or fleet: read from the ledger
    sources = await open_sources(loaded.settings, broker=False)
    try:
        if sources.store is None:
            raise GateError(f"--project {named}: the ledger is unreadable: {sources.store_error}")
        return await resolve_project(sources.store, named)
    finally:
        await sources.close()


async def migrate(loaded: LoadedConfig, *, dry_run: bool = False, outbox: bool = False) -> int:
    db = loaded.settings.database
    try:
        database = await Database.connect(
            db.dsn_in_force(),
            password=db.password.get_secret_value() if db.password else None,
            pool_size=1,
            statement_timeout_seconds=db.statement_timeout_seconds,
        )
    except ReaperError as exc:
        print(f"reaper: cannot migrate: {exc.reason}", file=sys.stderr)
        return EXIT_NOT_OK
    try:
        run = await migrate_schema(
            database, dry_run=dry_run, lock_timeout_seconds=db.lock_timeout_seconds, outbox=outbox
        )
    except MigrationStopped as exc:
        doing = "db migrate --dry-run: a run would stop" if dry_run else "db migrate stopped"
        print(f"reaper: {doing}: {exc}", file=sys.stderr)
        return EXIT_NOT_OK
    finally:
        await database.close()
    print(render_migration(run))
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


def render_migration(run: MigrationRun) -> str:
    """What a migration did, one line per statement; a dry run as the SQL it would run."""
    if run.plan is not None:
        return script(run.plan, run.lock_timeout_seconds)
    lines = [
        f"{s.migration or 'reaper'}: ran {one_line(s.sql)}  ({s.reason})" for s in run.statements
    ]
    lines.extend(f"applied {name}" for name in run.applied)
    if run.up_to_date:
        lines.append("schema is up to date: nothing to apply")
    elif not run.applied:
        lines.append("every migration was already recorded; what was missing is in place")
    return "\n".join(lines)


async def policies_plan(loaded: LoadedConfig, *, output: str = "text") -> int:
    sources = await open_sources(loaded.settings, store=False)
    try:
        assert sources.broker is not None  # opening the broker's client never fails
        plan = await policy_plan(sources.broker, loaded.settings)
    finally:
        await sources.close()
    if output == "json":
        print(json.dumps(plan_json(plan), indent=2))
    elif output == "name":
        print("\n".join(pp.name for pp in plan.policies))
    else:
        print(plan_text(plan, wide=output == "wide"))
    return EXIT_OK


async def serve(loaded: LoadedConfig, listen: str) -> int:
    reaper = QueueReaper(loaded.settings, holder=f"{QueueReaper.default_holder()} serve")

    async def turn() -> PassResult | None:
        run = await reaper.run_turn()
        if run.error is not None:
            raise PassFailed(run.error)
        return run.result  # None: another reaper had the turn

    try:
        return await serve_http(
            listen,
            loaded.settings.queue.reap.interval_seconds,
            turn,
            ReaperMetrics(),
            next_in=reaper.seconds_until_due,
            gates=lambda: read_board(loaded.settings),
            target=page_target(loaded.settings),
        )
    finally:
        await reaper.aclose()


async def demo(loaded: LoadedConfig, *, cleanup: bool = False) -> int:
    """``reaper demo``: each step printed as the demo yields it."""
    code = EXIT_NOT_OK
    async for step in run_demo(loaded.settings, cleanup=cleanup):
        if isinstance(step, Said):
            print(step.text, file=sys.stderr if step.trouble else sys.stdout)
        elif isinstance(step, DemoPass):
            text = render_text(step.result)
            print(text if step.whole else text.splitlines()[0])
            print(step.ledger)
        else:
            code = step.exit_code
    return code


async def read_board(settings: Settings) -> GateBoard:
    """Open the store, read the board, close it. Raises what the store raises."""
    sources = await open_sources(settings, broker=False)
    try:
        if sources.store is None:
            raise StoreUnavailable(sources.store_error or "the store is not connected")
        return await board_of(sources.store)
    finally:
        await sources.close()


def clear_notes(settings: Settings, result: PassResult) -> list[str]:
    """The report's lines for the dead-letter queues a person may clear now, by the board the
    pass read as it ended (when a queue of the pass could be one: every letter on it parked)."""
    could = [
        d for d in result.dead_letters.queues if d.depth > 0 and d.parked_new == 0 and d.unread == 0
    ]
    if not could or result.dry_run:
        return []
    board = result.gates.board
    if board is None:
        why = result.gates.board_error or "the open gates were not read"
        return [f"Whether a dead-letter queue may be cleared is not known: {why}"]
    return [
        terminal_line(
            f"Safe to clear: {s.queue} ({s.letters} letter(s), every one parked and answered): "
            f"`{s.command}` (an act left to you: the reaper never clears a queue)"
        )
        for s in safe_to_clear(could, board.waiting, settings.bus.vhost)
    ]
