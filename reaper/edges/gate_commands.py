"""``reaper gates list|show|answer``, and ``reaper events`` beside them: what waits, printed.

``reaper gates list|show|answer`` and ``reaper events``: what waits for a person, and the
ledger as a person reads it (SPEC §1, §3). Each command returns an exit code (SPEC §5)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from reaper.config import LoadedConfig
from reaper.core.domain import GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED
from reaper.edges import events, gate_bulk
from reaper.edges.options import add_actions, add_output, add_project, default_answerer, output_of
from reaper.gates.answering import answer_gate, preview_answer
from reaper.gates.ids import argument, find_gate, gate_kind
from reaper.gates.selection import Selection, select
from reaper.gates.views import (
    list_json,
    parse_duration,
    render_list,
    render_show,
    views_of,
    with_history,
)
from reaper.gates.wording import answered_line, would_line
from reaper.reap.sources import store_sources

__all__ = ["COMMANDS", "GATE_ACTIONS", "add_parsers", "run"]

#: The top-level commands this module answers.
COMMANDS: Final = ("gates", "events")

_EXIT_OK = 0

#: What ``reaper gates`` alone prints: its actions.
GATE_ACTIONS: Final = """\
reaper gates ACTION: what waits for a person
  list     open gates, oldest first, with the command for each answer (-o wide|json|name)
  show     one gate, whole: reaper gates show ID
  answer   answer a gate: reaper gates answer ID --choice CHOICE (--dry-run writes nothing)
start with: reaper gates list"""

ANSWER_DESCRIPTION = """\
Answer a gate, named by its id or any unique prefix of it (the 8 characters `gates list`
shows), or every open gate a selection names (--kind, --project, --older-than, --since,
--queue, --all): the gates are shown with their count, and answered only with --yes (or the count
typed back at a terminal), each in its own transaction with its own GateAnswered event.
delivery_exhausted: retry (the job is re-readied for exactly one more delivery) or cancel
(the job ends cancelled and is never delivered again). bus_dead_lettered: replay (publish
the body back to the owned queue it died on) or dismiss (settle it, send nothing); the
broker's copy stays either way. The answer, who gave it and one GateAnswered event on the
ledger commit together with the job's move. --dry-run says what the answer would do and writes
nothing."""


def add_parsers(commands: Any) -> None:
    """Add ``gates`` and ``events`` to the CLI's subcommands."""
    # not required: ``reaper gates`` alone prints its actions (GATE_ACTIONS)
    gate_commands = add_actions(
        commands,
        "gates",
        help="what waits for a person",
        description="What waits for a person: poison jobs (delivery_exhausted) and dead "
        "letters (bus_dead_lettered) parked as gates. Nothing is deleted; each answer is a "
        "GateAnswered event on the ledger.",
        required=False,
    )
    listing = gate_commands.add_parser(
        "list",
        help="open gates, oldest first, with the command for each answer",
        description="The open gates, oldest first: short id, age, project, kind, job kind, "
        "and the exact command for each answer really possible.",
    )
    add_output(
        listing,
        ("text", "wide", "json", "name"),
        "text (default: a table, short ids), wide (whole ids), json, or name (one whole "
        "gate id a line, for xargs)",
    )
    listing.add_argument("--all", action="store_true", help="include answered gates")
    listing.add_argument(
        "--kind",
        type=argument(gate_kind),
        metavar="KIND",
        help=f"only gates of this kind: {GATE_DELIVERY_EXHAUSTED} (or poison), "
        f"{GATE_BUS_DEAD_LETTERED} (or dead_letter)",
    )
    add_project(listing, "only this project's gates (id, prefix or fleet)")
    listing.add_argument(
        "--older-than", metavar="AGE", help="only gates raised longer ago than AGE (e.g. 1h)"
    )
    listing.add_argument(
        "--since",
        metavar="AGE|ISO",
        help="only gates raised at or after: 1h, or 2026-12-01T09:00Z (a report's parks: the "
        "time it prints)",
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
    events.add_parser(commands)


async def run(args: argparse.Namespace, loaded: LoadedConfig) -> int:
    """Run ``gates ...`` or ``events``. A gate or argument that is not one raises GateError."""
    if args.command == "events":
        return await events.run(args, loaded)
    if args.gates_command == "answer":
        return await _answer(loaded, args)
    async with store_sources(loaded.settings, "read gates") as (_, store):
        if args.gates_command == "show":
            [view] = await views_of(store, loaded.settings, [await find_gate(store, args.gate)])
            view = await with_history(store, view)
            print(json.dumps(list_json([view])[0], indent=2) if args.json else render_show(view))
            return _EXIT_OK
        chosen = Selection(
            open_only=not args.all,
            kind=args.kind,
            project=args.project,
            older_than=parse_duration(args.older_than) if args.older_than else None,
            since=args.since,
        )
        views = await select(store, loaded.settings, chosen)
    output = output_of(args)
    if output == "json":
        print(json.dumps(list_json(views), indent=2))
        return _EXIT_OK
    if output == "name":
        print("\n".join(str(v.gate.id) for v in views))
        return _EXIT_OK
    filters = [
        f"{flag} {value}"
        for flag, value in (
            ("--kind", args.kind),
            ("--project", args.project),
            ("--older-than", args.older_than),
            ("--since", args.since),
        )
        if value
    ]
    text = render_list(
        views, open_only=not args.all, filters=", ".join(filters), wide=output == "wide"
    )
    print(text)
    return _EXIT_OK


async def _answer(loaded: LoadedConfig, args: argparse.Namespace) -> int:
    if gate_bulk.has_selection(args) or args.gate is None:
        if not gate_bulk.has_selection(args):
            print(
                "reaper: name a GATE, or select gates with --kind, --project, --older-than, "
                "--since, --queue or --all",
                file=sys.stderr,
            )
            return 2
        return await gate_bulk.answer_selection(loaded, args)
    async with store_sources(loaded.settings, "answer", broker=not args.dry_run) as (sources, _):
        by = args.by or default_answerer()
        if args.dry_run:
            preview = await preview_answer(
                sources, loaded.settings, args.gate, args.choice, answered_by=by
            )
            outcome = would_line(preview)
        else:
            answer = await answer_gate(
                sources, loaded.settings, args.gate, args.choice, answered_by=by, reason=args.reason
            )
            outcome = answered_line(answer)
    print(outcome)
    return _EXIT_OK
