"""What a person sees of a gate: listed in a line, or shown whole.

What a person sees of a gate (SPEC §1): its short id, age, project, kinds, the answers really
possible now and the exact command for each, and for ``gates show`` the whole of it. Pure: the
gates, the dead letters their jobs keep and ``now`` come in; text and JSON go out.

A choice is offered only when taking it can succeed: an answered gate offers none, nor does a
gate whose job has been parked again since (the later gate is the one to answer), and a dead
letter's ``replay`` only where the replay rule allows it (it says why not otherwise).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Final
from uuid import UUID

from reaper.config import Settings
from reaper.core.dead_letters import decoded_body, quote_untrusted, replay_decision
from reaper.core.domain import EVENT_KIND, GATE_BUS_DEAD_LETTERED
from reaper.core.moments import utc
from reaper.core.records import Gate, LedgerEvent
from reaper.core.terminal import for_terminal, one_line, table
from reaper.errors import GateError
from reaper.gates.ids import project_name, short_id
from reaper.jobqueue.port import EventFilter, JobQueue, ParkedDeadLetter
from reaper.jobqueue.rules import DEAD_LETTER_REPLAY, offered_choices

__all__ = [
    "GateView",
    "answer_command",
    "format_age",
    "list_json",
    "parse_duration",
    "parse_since",
    "render_list",
    "render_show",
    "view_of",
    "views_of",
    "with_history",
]

#: How much of a dead letter's body ``gates show`` prints.
BODY_PREVIEW_BYTES: Final = 200
#: The newest events of a gate's job ``gates show`` prints (the ledger keeps every one).
HISTORY_EVENTS: Final = 20

_DURATION: Final = re.compile(r"(?P<n>\d+)(?P<unit>[smhdw])")
_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class GateView:
    """One gate as a person works through it."""

    gate: Gate
    age_seconds: float
    #: The answers that can be taken now, in the gate's order.
    choices: tuple[str, ...]
    #: Why an answer the gate was raised with is not offered (empty: every one is).
    withheld: tuple[str, ...]
    parked: ParkedDeadLetter | None = None
    #: What the ledger holds of the gate's job, oldest first (``gates show`` reads it), and
    #: how many events it holds in all.
    history: tuple[LedgerEvent, ...] = ()
    history_total: int = 0

    @property
    def short(self) -> str:
        return short_id(self.gate.id)

    def commands(self) -> list[str]:
        return [answer_command(self.short, c) for c in self.choices]


def answer_command(short: str, choice: str) -> str:
    """The command a person pastes to answer."""
    return f"reaper gates answer {short} --choice {choice}"


def view_of(
    gate: Gate,
    parked: ParkedDeadLetter | None,
    now: datetime,
    *,
    owned_queue_pattern: str,
    dead_letter_queue_pattern: str,
) -> GateView:
    """What can be done with ``gate`` now, and why anything it was raised with cannot."""
    age = max(0.0, (now - gate.created_at).total_seconds())
    if not gate.is_open:
        when = utc(gate.answered_at) if gate.answered_at else "?"
        by = f" by {one_line(gate.answered_by)}" if gate.answered_by else ""
        return GateView(gate, age, (), (f"answered {gate.answer!r} at {when}{by}",), parked)
    if gate.superseded_by is not None:
        why = f"its job has been parked again since: answer gate {short_id(gate.superseded_by)}"
        return GateView(gate, age, (), (why,), parked)
    choices = list(offered_choices(gate))
    withheld: list[str] = []
    if gate.kind == GATE_BUS_DEAD_LETTERED and DEAD_LETTER_REPLAY in choices:
        if parked is None:
            allowed, why = False, "its job keeps no dead letter"
        else:
            allowed, why = replay_decision(
                parked.letter, owned_queue_pattern, dead_letter_queue_pattern
            )
        if not allowed:
            choices.remove(DEAD_LETTER_REPLAY)
            withheld.append(f"replay: not possible, {why}")
    return GateView(gate, age, tuple(choices), tuple(withheld), parked)


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``1h``, ``2d``, ``1w`` or a sum like ``1h30m``; ``GateError`` else."""
    compact = text.strip().lower()
    parts = list(_DURATION.finditer(compact))
    if not parts or "".join(p.group(0) for p in parts) != compact:
        raise GateError(f"not a duration: {text!r} (write e.g. 90s, 15m, 1h, 2d or 1h30m)")
    return timedelta(seconds=sum(int(p["n"]) * _SECONDS[p["unit"]] for p in parts))


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: an age before ``now`` (``1h``) or an ISO time (``2026-12-01T09:00Z``, UTC
    when it names no zone); ``GateError`` else."""
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


def format_age(seconds: float) -> str:
    """An age as a person reads it at a glance: ``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def render_list(
    views: Sequence[GateView], *, open_only: bool, filters: str = "", wide: bool = False
) -> str:
    """``gates list``: a table under a header row, oldest first, each gate's commands under
    it, and a count line; ids cut to 8 hex unless ``wide``."""
    lines: list[str] = []
    rows = [
        (
            str(v.gate.id) if wide else v.short,
            format_age(v.age_seconds),
            project_name(v.gate.project_id, wide=wide),
            v.gate.kind,
            quote_untrusted(v.gate.job_kind) if v.gate.job_kind else "-",
            "open" if v.gate.is_open else f"answered {v.gate.answer!r}",
        )
        for v in views
    ]
    if views:
        header, *body = table(("GATE", "AGE", "PROJECT", "KIND", "JOB KIND", "STATE"), rows)
        lines.append(header)
        for v, row in zip(views, body, strict=True):
            lines.append(row)
            lines.extend(f"    {command}" for command in v.commands())
            lines.extend(f"    ({why})" for why in v.withheld if v.gate.is_open)
    what = "open gate" if open_only else "gate"
    count = f"{len(views)} {what}{'' if len(views) == 1 else 's'}"
    if views and open_only:
        count += f", the oldest {format_age(max(v.age_seconds for v in views))} old"
    lines.append(count + (f" ({filters})" if filters else ""))
    if views:
        lines.append("`reaper gates show ID` prints one whole; any unique prefix of an id works")
    return "\n".join(lines)


def render_show(view: GateView) -> str:
    """``gates show``: one gate whole."""
    g = view.gate
    lines = [
        f"gate {g.id} (short {view.short})",
        f"  kind:     {g.kind}",
        f"  project:  {g.project_id}",
        f"  job:      {g.job_id or '-'}"
        + (f" ({quote_untrusted(g.job_kind)})" if g.job_kind else ""),
        f"  raised:   {utc(g.created_at)} ({format_age(view.age_seconds)} ago)",
        f"  identity: {quote_untrusted(g.identity) if g.identity else '-'}",
    ]
    if g.is_open:
        lines.append("  state:    open")
    else:
        at = utc(g.answered_at) if g.answered_at else "?"
        lines.append(
            f"  state:    answered {g.answer!r} at {at} by "
            + one_line(g.answered_by or "nobody named")
        )
    if view.parked is not None:
        lines.extend(_letter_lines(view.parked))
    lines.extend(_history_lines(view))
    lines.append("  question:")
    lines.extend(f"    {line}" for line in _prompt_lines(g))
    if view.choices:
        lines.append("  answers:")
        lines.extend(f"    {command}" for command in view.commands())
    lines.extend(f"  {why}" for why in view.withheld)
    return "\n".join(lines)


def _prompt_lines(gate: Gate) -> list[str]:
    """A dead letter's question is lines the reaper wrote, its headers quoted in them; every
    other question is one line, a job's kind in it as the host wrote it (newlines shown)."""
    if gate.kind == GATE_BUS_DEAD_LETTERED:
        return gate.prompt.splitlines()
    return [one_line(gate.prompt)]


def _letter_lines(parked: ParkedDeadLetter) -> list[str]:
    letter = parked.letter
    body = decoded_body(letter)[:BODY_PREVIEW_BYTES].decode("utf-8", "replace")
    cut = " (first bytes)" if letter.body_bytes > BODY_PREVIEW_BYTES else ""
    return [
        "  dead letter (its headers are untrusted: quoted and cut to 200 characters):",
        f"    read from:  {quote_untrusted(letter.queue)}",
        f"    origin:     {quote_untrusted(letter.origin_queue)}",
        f"    reason:     {quote_untrusted(letter.reason)}",
        f"    message id: {quote_untrusted(letter.message_id)}",
        f"    body:       {letter.body_bytes} bytes"
        + (", cut short by the broker" if letter.body_truncated else "")
        + (", a JSON object" if letter.is_json_object else ", not a JSON object"),
        f"    body{cut}: {quote_untrusted(body, BODY_PREVIEW_BYTES)}",
        f"    parked:     {utc(parked.parked_at)}; job {parked.job_state}",
    ]


def _history_lines(view: GateView) -> list[str]:
    """The ledger's events of the gate's job: each lease that ran out (its holder, how long
    ago, the attempts spent), each requeue and park, each answer and who gave it."""
    job = view.gate.job_id
    if job is None:
        return []
    if not view.history:
        return ["  history:  nothing on the ledger for this job"]
    lines = [f"  history of job {short_id(job)} (the ledger, oldest first):"]
    lines += [f"    {history_line(e)}" for e in view.history]
    if view.history_total > len(view.history):
        lines.append(
            f"    showing the newest {len(view.history)} of {view.history_total}: "
            f"reaper events --object {short_id(job)} --limit {view.history_total}"
        )
    return lines


def history_line(event: LedgerEvent) -> str:
    """One event of a job's history: when, what, and what the ledger says of it."""
    p = event.payload
    when = utc(event.created_at)
    if event.kind == "GateAnswered":
        by = for_terminal(one_line(str(p.get("by") or "nobody named")))
        gate = str(p.get("gate") or "")[:8]
        reason = f"; reason {quote_untrusted(p.get('reason'))}" if p.get("reason") else ""
        return f"{when}  answered {p.get('choice')} by {by} (gate {gate}){reason}"
    if event.kind == EVENT_KIND:
        # the reaper's sentence, a host's job kind and a letter's quoted headers in it: shown
        # escaped, its newlines too (a line of its own would read as another event)
        shown = for_terminal(str(p.get("detail") or "")).replace("\n", "\\n")
        return f"{when}  {p.get('action')!s:<8} {p.get('condition')}: {shown}"
    return f"{when}  {for_terminal(event.kind)}  {quote_untrusted(json.dumps(dict(p)))}"


def list_json(views: Sequence[GateView]) -> list[dict[str, object]]:
    """``gates list --json`` / ``gates show --json``: each gate with what can be done now."""
    return [_json(v) for v in views]


def _json(view: GateView) -> dict[str, object]:
    g = view.gate
    return {
        "id": str(g.id),
        "short_id": view.short,
        "project_id": str(g.project_id),
        "project": project_name(g.project_id, wide=True),
        "job_id": _text(g.job_id),
        "job_kind": g.job_kind,
        "kind": g.kind,
        "prompt": g.prompt,
        "created_at": utc(g.created_at, "milliseconds"),
        "age_seconds": round(view.age_seconds, 3),
        "answer": g.answer,
        "answered_at": utc(g.answered_at, "milliseconds") if g.answered_at else None,
        "answered_by": g.answered_by,
        "choices": list(view.choices),
        "commands": view.commands(),
        "not_offered": list(view.withheld),
        "superseded_by": _text(g.superseded_by),
        "history": [
            {
                "created_at": utc(e.created_at, "milliseconds"),
                "project_id": str(e.project_id),
                "seq": e.seq,
                "kind": e.kind,
                "payload": dict(e.payload),
            }
            for e in view.history
        ],
        "history_total": view.history_total,
    }


def _text(value: UUID | None) -> str | None:
    return None if value is None else str(value)


async def views_of(
    store: JobQueue, settings: Settings, gates: Sequence[Gate], now: datetime | None = None
) -> list[GateView]:
    """``gates`` as a person sees them at ``now`` (the database's clock when None), each with
    the dead letter its job keeps, read from ``store``."""
    jobs = [g.job_id for g in gates if g.kind == GATE_BUS_DEAD_LETTERED and g.job_id]
    parked = await store.parked_dead_letters(jobs) if jobs else {}
    now = now if now is not None else (await store.database_facts()).now
    reap = settings.queue.reap
    return [
        view_of(
            g,
            None if g.job_id is None else parked.get(g.job_id),
            now,
            owned_queue_pattern=reap.owned_queue_pattern,
            dead_letter_queue_pattern=reap.dead_letter_queue_pattern,
        )
        for g in gates
    ]


async def with_history(store: JobQueue, view: GateView) -> GateView:
    """``view`` with the ledger's newest events of its job, and how many there are in all."""
    job = view.gate.job_id
    if job is None:
        return view
    chosen = EventFilter(object=str(job), limit=HISTORY_EVENTS)
    found = await store.read_events(chosen)
    total = len(found)
    if total == chosen.limit:
        total = await store.count_events(chosen)
    return replace(view, history=tuple(found), history_total=total)
