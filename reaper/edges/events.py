"""``reaper events``: the ledger as a person reads it, one line per event.

``reaper events``: the ledger as a person reads it (SPEC §3), newest last, one line per
event; every id option takes the short id the outputs print (``fleet`` for the fleet's
stream), every word option is checked against the vocabulary, and a listing cut at its limit
says how many it did not show and how to see them."""

from __future__ import annotations

import argparse
import json
from typing import Final
from uuid import UUID

from reaper.config import LoadedConfig
from reaper.core.dead_letters import quote_untrusted
from reaper.core.domain import EVENT_KIND
from reaper.core.records import LedgerEvent
from reaper.core.terminal import one_line
from reaper.edges.options import output_of
from reaper.edges.wording import utc
from reaper.gates.ids import (
    choose,
    project_name,
    resolve_object,
    resolve_project,
)
from reaper.gates.views import parse_since
from reaper.jobqueue.port import EventFilter, JobQueue
from reaper.reap.sources import store_sources

__all__ = ["OUTPUTS", "event_json", "event_line", "run"]

#: The reaper's own event kinds; a host's own kinds are taken where the ledger holds them.
KINDS: Final = (EVENT_KIND, "GateAnswered")

#: ``-o``: a line per event (short ids), wide (whole ids), json, or name (``project#seq``).
OUTPUTS: Final = ("text", "wide", "json", "name")

_EXIT_OK = 0


async def run(args: argparse.Namespace, loaded: LoadedConfig) -> int:
    """``reaper events``; an argument that names nothing raises GateError (exit 2)."""
    output = output_of(args)
    async with store_sources(loaded.settings, "read the ledger") as (_, store):
        chosen = await _filter(store, args)
        found = await store.read_events(chosen)
        total = len(found)
        if total == chosen.limit:  # a full page: say how many more the filter holds
            total = await store.count_events(chosen)
    if output == "json":
        print(json.dumps([event_json(e) for e in found], indent=2))
    elif output == "name":
        for event in found:
            print(f"{event.project_id}#{event.seq}")
    else:
        for event in found:
            print(event_line(event, wide=output == "wide"))
        print(_footer(len(found), total))
    return _EXIT_OK


async def _filter(store: JobQueue, args: argparse.Namespace) -> EventFilter:
    since = None
    if args.since:
        since = parse_since(args.since, (await store.database_facts()).now)
    chosen = EventFilter(
        since=since,
        project_id=None if args.project is None else await resolve_project(store, args.project),
        kind=args.kind,
        condition=args.condition,
        object=None if args.object is None else await resolve_object(store, args.object),
        action=args.action,
        source=args.source,
        limit=args.limit,
    )
    # a host's own kind is taken where the ledger holds it; anything else is a typo
    unknown = args.kind is not None and args.kind not in KINDS
    if unknown and not await store.count_events(EventFilter(kind=args.kind, limit=1)):
        choose("event kind", args.kind, KINDS)
    return chosen


def _footer(shown: int, total: int) -> str:
    if shown == total:
        return f"{total:,} event{'' if total == 1 else 's'}, newest last"
    return (
        f"showing the newest {shown:,} of {total:,} events, newest last: --limit {total} "
        "shows them all (or narrow with --since, --project, --kind, --object)"
    )


def event_line(event: LedgerEvent, *, wide: bool = False) -> str:
    """One ledger event on one line; values from untrusted input are quoted and cut; ids cut
    to 8 hex unless ``wide``."""
    p = event.payload
    project = project_name(event.project_id, wide=wide)
    head = f"{utc(event.created_at)}  {project}#{event.seq}  {event.kind}"
    shown = quote_untrusted if not event.trusted else _plain
    if event.kind == "GateAnswered":
        gate = str(p.get("gate") or "")
        line = (
            f"{head}  gate {gate if wide else gate[:8]} ({p.get('gate_kind')}) "
            f"{p.get('choice')} by {_plain(p.get('by'))}  job {_id(p.get('job'), wide)}"
        )
        if p.get("message_id"):
            line += f"  published {shown(p.get('queue'))} as {shown(p.get('message_id'))}"
        if p.get("reason"):
            line += f"  reason {quote_untrusted(p.get('reason'))}"
        return line
    if event.kind == EVENT_KIND:
        measured = p.get("measured")
        # a parked letter's measurement is its queue's depth then, not the letter's: not shown
        letter = p.get("condition") == "dead_letter" and p.get("action") == "park"
        figure = (
            ""
            if measured is None or letter
            else f"  {measured}/{p.get('threshold')} {p.get('unit')}"
        )
        subject = _id(p.get("object"), wide) if event.trusted else shown(p.get("object"))
        return (
            f"{head}  {p.get('source')}/{p.get('condition')} {p.get('action')}  {subject}{figure}"
        )
    return f"{head}  {quote_untrusted(json.dumps(dict(p), sort_keys=True))}"


def event_json(event: LedgerEvent) -> dict[str, object]:
    return {
        "project_id": str(event.project_id),
        "project": project_name(event.project_id, wide=True),
        "seq": event.seq,
        "kind": event.kind,
        "created_at": utc(event.created_at, timespec="milliseconds"),
        "trusted": event.trusted,
        "digest": event.digest,
        "payload": dict(event.payload),
    }


def _id(value: object, wide: bool) -> str:
    """A job's id, cut to 8 hex unless ``wide``; anything else (a queue's name) whole."""
    if value is None:
        return "-"
    try:
        return str(value) if wide else str(UUID(str(value)))[:8]
    except ValueError:
        return one_line(str(value))


def _plain(value: object) -> str:
    """A value the reaper or an operator wrote (an answer's ``--by``), kept on its line."""
    return "-" if value is None else one_line(str(value))
