"""The pass's report: one JSON object for machines (SPEC §5), and a human report that reads
like a good ``kubectl describe``: what is wrong first, one line each, the numbers against
their thresholds, then what was done.

Both keep every verdict available without building them all at once. ``--json`` lists every
verdict, written as it is read from the pass's verdict log (:func:`write_json`: the same bytes
as ``json.dumps(to_json(result), indent=2)``, never the whole list in memory). The human
report lists each finding, but summarises lease moves, routine by the thousand: per condition,
the count, the projects with the most, and the first few jobs, then how many were not listed
and that ``--json`` has them all. A condition with few moves is listed in full.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Final, TextIO
from uuid import UUID

from reaper.core.cluster import node_summary
from reaper.core.domain import Action, Condition, Gate, Verdict
from reaper.core.values import display_number
from reaper.reap.progress import RecordedVerdict
from reaper.reap.result import PassResult

#: Lease moves of one condition listed one line each up to this many; beyond, summarised.
LISTED_MOVES: Final = 10
#: In a summary, the jobs listed (the first judged) and the projects named (the most moves).
SUMMARY_JOBS: Final = 5
SUMMARY_PROJECTS: Final = 5

_LEASE_CONDITIONS: Final = (Condition.LEASE_EXPIRED, Condition.POISON)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def verdict_json(verdict: Verdict, recorded: bool) -> dict[str, object]:
    return {
        "source": verdict.source.value,
        "object": verdict.object,
        "queue": verdict.queue,
        "project_id": str(verdict.project_id) if verdict.project_id else None,
        "condition": verdict.condition.value,
        "measured": display_number(verdict.measured),
        "threshold": display_number(verdict.threshold),
        "unit": verdict.unit.value,
        "action": verdict.action.value,
        "detail": verdict.detail,
        "trusted": verdict.trusted,
        "recorded": recorded,
    }


def to_json(result: PassResult, *, verdicts: bool = True) -> dict[str, object]:
    """The report object of SPEC §5 (``verdicts`` false: with an empty verdict list, for
    :func:`write_json` to stream into)."""
    broker = (
        {
            "product": result.broker.product,
            "version": result.broker.version,
            "capabilities": result.broker.capabilities(),
            "nodes": (
                [{"name": n.name, "running": n.running} for n in result.broker.nodes]
                if result.broker.nodes is not None
                else None
            ),
        }
        if result.broker
        else None
    )
    return {
        "ok": result.ok,
        "dry_run": result.dry_run,
        "started_at": _iso(result.started_at),
        "finished_at": _iso(result.finished_at),
        "broker": broker,
        "dispatch": (
            {"in_force": result.dispatch.mode.value, "why": result.dispatch.why}
            if result.dispatch
            else None
        ),
        "verdicts": (
            [verdict_json(r.verdict, r.recorded) for r in result.verdicts] if verdicts else []
        ),
        "policies": [
            {
                "name": p.name,
                "action": p.action,
                "verified": p.verified,
                "reason": p.reason,
                "queues_checked": p.queues_checked,
                "queues_failing": list(p.queues_failing),
                "detail": p.detail,
            }
            for p in result.policies
        ],
        "dead_letters": [
            {
                "queue": d.queue,
                "depth": d.depth,
                "parked_new": d.parked_new,
                "already_parked": d.already_parked,
                "unread": d.unread,
                "read_blocked": d.read_blocked,
                "stale_pointers": d.stale_pointers,
                "bodies_read": d.bodies_read,
            }
            for d in result.dead_letters
        ],
        "unreadable": [
            {"source": u.source, "queue": u.queue, "error": u.error} for u in result.unreadable
        ],
        "management_urls": [
            {"url": e.url, "answered": e.answered, "error": e.error} for e in result.management
        ],
        "problems": [
            {"kind": p.kind, "subject": p.subject, "detail": p.detail} for p in result.problems()
        ],
        "notes": list(result.notes),
    }


def render_json(result: PassResult) -> str:
    return json.dumps(to_json(result), indent=2, sort_keys=False)


def write_json(result: PassResult, out: TextIO) -> None:
    """:func:`render_json` written to ``out`` with each verdict encoded as it is read from
    the pass's verdict log: the same text, one verdict in memory at a time."""
    report = to_json(result, verdicts=False)
    out.write("{")
    for n, (key, value) in enumerate(report.items()):
        out.write(("," if n else "") + "\n  " + json.dumps(key) + ": ")
        if key != "verdicts":
            out.write(_indented(value, "  "))
            continue
        empty = True
        for r in result.verdicts:
            out.write(("[" if empty else ",") + "\n    ")
            out.write(_indented(verdict_json(r.verdict, r.recorded), "    "))
            empty = False
        out.write("[]" if empty else "\n  ]")
    out.write("\n}\n" if report else "}\n")


def _indented(value: object, pad: str) -> str:
    # a newline inside a JSON string is escaped: every newline is the encoder's own
    return json.dumps(value, indent=2).replace("\n", "\n" + pad)


def _measure(verdict: Verdict) -> str:
    measured = display_number(verdict.measured)
    threshold = display_number(verdict.threshold)
    unit = verdict.unit.value
    if measured is None:
        return ""
    if threshold is None:
        return f"{measured} {unit}"
    return f"{measured} {unit} (threshold {threshold})"


def _where(verdict: Verdict) -> str:
    if verdict.queue and verdict.object != verdict.queue:
        return f"{verdict.object} from queue {verdict.queue}"
    if verdict.queue:
        return f"queue {verdict.queue}"
    return f"job {verdict.object} (project {verdict.project_id})"


def _endpoints(result: PassResult) -> str:
    states = {True: "answered", False: "skipped", None: "not needed"}
    return ", ".join(f"{e.url} {states[e.answered]}" for e in result.management)


def render_text(result: PassResult) -> str:
    """The human report: problems first, then what was done, then context."""
    lines: list[str] = []
    mode = "dry-run audit (nothing written)" if result.dry_run else "pass"
    status = "OK" if result.ok else "NOT OK"
    lines.append(
        f"queue-reaper {mode}: {status}   {_iso(result.started_at)}  "
        f"({result.duration_seconds:.2f} s)"
    )
    answered = [e.url for e in result.management if e.answered]
    if result.broker:
        via = f" via {answered[0]}" if answered else ""
        lines.append(f"Broker:      {result.broker.product} {result.broker.version}{via}")
        if result.broker.nodes is not None and len(result.broker.nodes) > 1:
            lines.append(f"Nodes:       {node_summary(result.broker.nodes)}")
    if len(result.management) > 1:
        lines.append(f"Management:  {_endpoints(result)} (in order of preference)")
    if result.dispatch:
        lines.append(f"Dispatch:    {result.dispatch.mode.value} ({result.dispatch.why})")

    problems = [p.line() for p in result.problems()]
    findings = list(result.surfaced())
    lines.append("")
    lines.append(f"Problems ({len(problems) + len(findings)}):")
    if not problems and not findings:
        lines.append("  none")
    lines += [f"  {p}" for p in problems]
    for r in findings:
        v = r.verdict
        new = "new" if r.recorded else ("seen" if not result.dry_run else "would record")
        lines.append(f"  {v.condition.value:<13} {_where(v)}: {_measure(v)}  [{new}]")
        if v.detail:
            lines.append(f"  {'':<13} {v.detail}")

    moves = _LeaseMoves()
    acted: list[RecordedVerdict] = []
    for r in result.verdicts:
        if r.verdict.action is Action.SURFACE:
            continue
        if r.verdict.lease is not None and r.verdict.condition in _LEASE_CONDITIONS:
            moves.add(r)
        else:
            acted.append(r)
    lines.append("")
    verb = "Would do" if result.dry_run else "Done"
    lines.append(f"{verb} ({moves.count + len(acted)}):")
    if not acted and not moves.count:
        lines.append("  nothing")
    lines += moves.lines()
    for r in acted:
        lines.append(_acted_line(r.verdict))

    if result.dead_letters:
        lines.append("")
        lines.append("Dead-letter queues:")
        for d in result.dead_letters:
            if d.read_blocked:
                state = f"read blocked: {d.read_blocked}"
            elif result.dry_run:
                state = "not read (a dry run reads nothing); reading is proven safe"
            else:
                state = "read safely"
            lines.append(
                f"  {d.queue}: depth {d.depth}, parked {d.parked_new} new, "
                f"{d.already_parked} already parked, {d.unread} unread, "
                f"{d.bodies_read} bodies read; {state}"
            )
    if result.policies:
        lines.append("")
        lines.append("Policies:")
        for p in result.policies:
            verified = {True: "verified", False: "NOT verified", None: "not checked"}[p.verified]
            lines.append(
                f"  {p.name}: {p.action}, {verified}"
                + (f" ({p.reason})" if p.reason else "")
                + f" on {p.queues_checked} queue(s)"
                + (f"; failing: {', '.join(p.queues_failing)}" if p.queues_failing else "")
            )
            if p.detail:
                lines.append(f"    {p.detail}")
    if result.notes:
        lines.append("")
        lines.append("Notes:")
        lines += [f"  - {n}" for n in result.notes]
    return "\n".join(lines)


def _acted_line(v: Verdict) -> str:
    # A parked letter's verdict measures its queue's depth, not the letter: not quoted here.
    letter = v.condition is Condition.DEAD_LETTER and v.object != v.queue
    measured = "" if letter else _measure(v)
    return f"  {v.action.value:<8} {v.condition.value:<13} {_where(v)}" + (
        f": {measured}" if measured else ""
    )


class _LeaseMoves:
    """Lease moves (requeues, parks) as they stream past, per condition: the count, the count
    per project, and the first few (all of them while there are no more than
    :data:`LISTED_MOVES`)."""

    def __init__(self) -> None:
        self.count = 0
        self.per_condition: dict[Condition, int] = {}
        self.projects: dict[Condition, Counter[UUID | None]] = {}
        self.first: dict[Condition, list[Verdict]] = {}

    def add(self, r: RecordedVerdict) -> None:
        v = r.verdict
        self.count += 1
        self.per_condition[v.condition] = self.per_condition.get(v.condition, 0) + 1
        self.projects.setdefault(v.condition, Counter())[v.project_id] += 1
        first = self.first.setdefault(v.condition, [])
        if len(first) < LISTED_MOVES:
            first.append(v)

    def lines(self) -> list[str]:
        out: list[str] = []
        for condition in _LEASE_CONDITIONS:
            count = self.per_condition.get(condition, 0)
            if not count:
                continue
            first = self.first[condition]
            if count <= LISTED_MOVES:
                out += [_acted_line(v) for v in first]
                continue
            action = first[0].action.value
            projects = self.projects[condition]
            out.append(
                f"  {action:<8} {condition.value:<13} {count} job(s) in {len(projects)} project(s)"
            )
            top = sorted(projects.items(), key=lambda item: (-item[1], str(item[0])))
            named = ", ".join(f"{p} {n}" for p, n in top[:SUMMARY_PROJECTS])
            rest = len(top) - SUMMARY_PROJECTS
            out.append(
                f"  {'':<22} by project: {named}"
                + (f", and {rest} more project(s)" if rest > 0 else "")
            )
            out += [f"  {'':<22} {_where(v)}: {_measure(v)}" for v in first[:SUMMARY_JOBS]]
            out.append(
                f"  {'':<22} {count - SUMMARY_JOBS} more not listed here: `reaper reap --json` "
                "lists every verdict"
            )
        return out


def gate_json(gate: Gate) -> dict[str, object]:
    """One gate as ``reaper gates list --json`` prints it."""
    return {
        "id": str(gate.id),
        "project_id": str(gate.project_id),
        "job_id": str(gate.job_id) if gate.job_id else None,
        "kind": gate.kind,
        "prompt": gate.prompt,
        "choices": list(gate.choices),
        "answer": gate.answer,
        "answered_at": gate.answered_at.isoformat() if gate.answered_at else None,
        "created_at": gate.created_at.isoformat() if gate.created_at else None,
    }
