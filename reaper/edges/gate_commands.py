"""``reaper gates list|show|answer`` and ``reaper events``: what waits for a person, and the
ledger as a person reads it (SPEC §1, §3). Each command returns an exit code (SPEC §5)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

from reaper.config import LoadedConfig
from reaper.core.dead_letters import quote_untrusted
from reaper.core.domain import GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED
from reaper.core.records import LedgerEvent
from reaper.edges import gate_bulk
from reaper.edges.gate_views import (
    GateView,
    by_job,
    list_json,
    parse_duration,
    render_list,
    render_show,
    view_of,
)
from reaper.edges.gates import answer_gate, default_answerer
from reaper.errors import GateError
from reaper.jobqueue.port import EventFilter, JobQueue
from reaper.reap.gates import find_gate
from reaper.reap.sources import open_sources

__all__ = ["COMMANDS", "add_parsers", "run"]

#: The top-level commands this module answers.
COMMANDS: Final = ("gates", "events")

_EXIT_OK, _EXIT_NOT_OK = 0, 1

ANSWER_DESCRIPTION = """\
Answer a gate, named by its id or any unique prefix of it (the 8 characters `gates list`
shows), or every open gate a selection names (--kind, --project, --older-than, --queue,
--all): the gates are shown with their count, and answered only with --yes (or the count
typed back at a terminal), each in its own transaction with its own GateAnswered event.
delivery_exhausted: retry (the job is re-readied for exactly one more delivery) or cancel
(the job ends cancelled and is never delivered again). bus_dead_lettered: replay (publish
the body back to the owned queue it died on) or dismiss (settle it, send nothing); the
broker's copy stays either way. The answer, who gave it and one GateAnswered event on the
ledger commit together with the job's move. --dry-run says what the answer would do and writes
nothing."""


def add_parsers(commands: Any) -> None:
    """Add ``gates`` and ``events`` to the CLI's subcommands."""
    gates = commands.add_parser(
        "gates",
        help="what waits for a person",
        description="What waits for a person: poison jobs (delivery_exhausted) and dead "
        "letters (bus_dead_lettered) parked as gates. Nothing is deleted; each answer is a "
        "GateAnswered event on the ledger.",
    )
    gate_commands = gates.add_subparsers(dest="gates_command", required=True, metavar="ACTION")
    listing = gate_commands.add_parser(
        "list",
        help="open gates, oldest first, with the command for each answer",
        description="The open gates, oldest first: short id, age, project, kind, job kind, "
        "and the exact command for each answer really possible.",
    )
    listing.add_argument("--json", action="store_true", help="print them as JSON")
    listing.add_argument("--all", action="store_true", help="include answered gates")
    listing.add_argument(
        "--kind",
        choices=(GATE_DELIVERY_EXHAUSTED, GATE_BUS_DEAD_LETTERED),
        help="only gates of this kind",
    )
    listing.add_argument(
        "--project", type=_uuid, metavar="PROJECT_ID", help="only this project's gates"
    )
    listing.add_argument(
        "--older-than", metavar="AGE", help="only gates raised longer ago than AGE (e.g. 1h)"
    )
    show = gate_commands.add_parser(
        "show",
        help="one gate, whole",
        description="One gate, whole: for a dead letter its quoted (untrusted) headers, its "
        "origin, the body's first bytes and whether replay is possible.",
    )
    show.add_argument("gate", metavar="GATE", help="the gate's id or a unique prefix of it")
    show.add_argument("--json", action="store_true", help="print it as JSON")
    answer = gate_commands.add_parser(
        "answer",
        help="answer a gate",
        description=ANSWER_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    answer.add_argument(
        "gate", metavar="GATE", nargs="?", help="the gate's id or a unique prefix of it"
    )
    answer.add_argument("--choice", required=True, help="one of the gate's answers")
    answer.add_argument("--by", metavar="NAME", help="who answers (default: OS user@host)")
    answer.add_argument("--reason", metavar="TEXT", help="why, kept on the ledger")
    answer.add_argument(
        "--dry-run", action="store_true", help="say what it would do; write nothing"
    )
    gate_bulk.add_selection(answer, (GATE_DELIVERY_EXHAUSTED, GATE_BUS_DEAD_LETTERED))

    events = commands.add_parser(
        "events",
        help="the ledger, newest last, one line per event (read from its indexes)",
        description="The append-only ledger, newest last, one line per event: every verdict "
        "(QueueReaped) and every gate answer (GateAnswered).",
    )
    events.add_argument("--since", metavar="AGE|ISO", help="e.g. 1h, or 2026-12-01T09:00Z")
    events.add_argument(
        "--project", type=_uuid, metavar="PROJECT_ID", help="only this project's stream"
    )
    events.add_argument("--kind", metavar="KIND", help="QueueReaped or GateAnswered")
    events.add_argument("--condition", metavar="CONDITION", help="e.g. poison, dead_letter")
    events.add_argument("--object", metavar="ID", help="a job id or a queue name")
    events.add_argument("--json", action="store_true", help="print them as a JSON array")
    events.add_argument("--limit", type=_positive, default=100, help="default %(default)s")


async def run(args: argparse.Namespace, loaded: LoadedConfig) -> int:
    """Run ``gates ...`` or ``events``. A gate or argument that is not one raises GateError."""
    if args.command == "events":
        return await _events(loaded, args)
    if args.gates_command == "answer":
        return await _answer(loaded, args)
    sources = await open_sources(loaded.settings, broker=False)
    try:
        store = sources.store
        if store is None:
            print(f"reaper: cannot read gates: {sources.store_error}", file=sys.stderr)
            return _EXIT_NOT_OK
        if args.gates_command == "show":
            view = (await _views(store, loaded, [await find_gate(store, args.gate)]))[0]
            print(json.dumps(list_json([view])[0], indent=2) if args.json else render_show(view))
            return _EXIT_OK
        now = (await store.database_facts()).now
        older = parse_duration(args.older_than) if args.older_than else None
        gates = await store.list_gates(
            open_only=not args.all,
            kind=args.kind,
            project_id=args.project,
            raised_before=None if older is None else now - older,
        )
        views = await _views(store, loaded, gates, now)
    finally:
        await sources.close()
    if args.json:
        print(json.dumps(list_json(views), indent=2))
        return _EXIT_OK
    filters = [
        f"{flag} {value}"
        for flag, value in (
            ("--kind", args.kind),
            ("--project", args.project),
            ("--older-than", args.older_than),
        )
        if value
    ]
    print(render_list(views, open_only=not args.all, filters=", ".join(filters)))
    return _EXIT_OK


async def _views(
    store: JobQueue, loaded: LoadedConfig, gates: list[Any], now: datetime | None = None
) -> list[GateView]:
    jobs = [g.job_id for g in gates if g.kind == GATE_BUS_DEAD_LETTERED and g.job_id]
    parked = await store.parked_dead_letters(jobs) if jobs else {}
    now = now if now is not None else (await store.database_facts()).now
    reap = loaded.settings.queue.reap
    return [
        view_of(
            g,
            by_job(parked, g),
            now,
            owned_queue_pattern=reap.owned_queue_pattern,
            dead_letter_queue_pattern=reap.dead_letter_queue_pattern,
        )
        for g in gates
    ]


async def _answer(loaded: LoadedConfig, args: argparse.Namespace) -> int:
    if gate_bulk.has_selection(args) or args.gate is None:
        if not gate_bulk.has_selection(args):
            print(
                "reaper: name a GATE, or select gates with --kind, --project, --older-than, "
                "--queue or --all",
                file=sys.stderr,
            )
            return 2
        return await gate_bulk.answer_selection(loaded, args)
    sources = await open_sources(loaded.settings, broker=not args.dry_run)
    try:
        if sources.store is None:
            print(f"reaper: cannot answer: {sources.store_error}", file=sys.stderr)
            return _EXIT_NOT_OK
        outcome = await answer_gate(
            sources,
            loaded.settings,
            args.gate,
            args.choice,
            answered_by=args.by or default_answerer(),
            reason=args.reason,
            dry_run=args.dry_run,
        )
    finally:
        await sources.close()
    print(outcome)
    return _EXIT_OK


async def _events(loaded: LoadedConfig, args: argparse.Namespace) -> int:
    sources = await open_sources(loaded.settings, broker=False)
    try:
        store = sources.store
        if store is None:
            print(f"reaper: cannot read the ledger: {sources.store_error}", file=sys.stderr)
            return _EXIT_NOT_OK
        since = None
        if args.since:
            since = _since(args.since, (await store.database_facts()).now)
        found = await store.read_events(
            EventFilter(
                since=since,
                project_id=args.project,
                kind=args.kind,
                condition=args.condition,
                object=args.object,
                limit=args.limit,
            )
        )
    finally:
        await sources.close()
    if args.json:
        print(json.dumps([event_json(e) for e in found], indent=2))
    else:
        for event in found:
            print(event_line(event))
        print(f"{len(found)} event{'' if len(found) == 1 else 's'}, newest last")
    return _EXIT_OK


def event_line(event: LedgerEvent) -> str:
    """One ledger event on one line; values from untrusted input are quoted and cut."""
    p = event.payload
    head = f"{_utc(event.created_at)}  {event.project_id}#{event.seq}  {event.kind}"
    shown = quote_untrusted if not event.trusted else _plain
    if event.kind == "GateAnswered":
        gate = str(p.get("gate") or "")
        line = (
            f"{head}  gate {gate[:8]} ({p.get('gate_kind')}) {p.get('choice')} by "
            f"{_plain(p.get('by'))}  job {p.get('job') or '-'}"
        )
        if p.get("message_id"):
            line += f"  published {shown(p.get('queue'))} as {shown(p.get('message_id'))}"
        if p.get("reason"):
            line += f"  reason {quote_untrusted(p.get('reason'))}"
        return line
    if event.kind == "QueueReaped":
        measured = p.get("measured")
        # a parked letter's measurement is its queue's depth then, not the letter's: not shown
        letter = p.get("condition") == "dead_letter" and p.get("action") == "park"
        figure = (
            ""
            if measured is None or letter
            else f"  {measured}/{p.get('threshold')} {p.get('unit')}"
        )
        return (
            f"{head}  {p.get('source')}/{p.get('condition')} {p.get('action')}  "
            f"{shown(p.get('object'))}{figure}"
        )
    return f"{head}  {quote_untrusted(json.dumps(dict(p), sort_keys=True))}"


def event_json(event: LedgerEvent) -> dict[str, object]:
    return {
        "project_id": str(event.project_id),
        "seq": event.seq,
        "kind": event.kind,
        "created_at": event.created_at.isoformat(),
        "trusted": event.trusted,
        "digest": event.digest,
        "payload": dict(event.payload),
    }


def _since(text: str, now: datetime) -> datetime:
    try:
        return now - parse_duration(text)
    except GateError:
        pass
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise GateError(
            f"--since {text!r}: not an age (e.g. 1h) nor an ISO time (e.g. 2026-12-01T09:00Z)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _utc(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _plain(value: object) -> str:
    return "-" if value is None else str(value)


def _uuid(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a project id (a UUID): {value!r}") from None


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {value!r}")
    return int(value)
