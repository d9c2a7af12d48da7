"""``reaper gates list|show|answer``, and ``reaper events`` beside them: what waits, printed.

``reaper gates list|show|answer`` and ``reaper events``: what waits for a person, and the
ledger as a person reads it (SPEC §1, §3). Each command returns an exit code (SPEC §5)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final

from reaper.config import LoadedConfig
from reaper.edges import events, gate_bulk
from reaper.edges.options import default_answerer, output_of
from reaper.gates.answering import answer_gate, preview_answer
from reaper.gates.ids import find_gate
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

__all__ = ["COMMANDS", "GATE_ACTIONS", "run"]

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
