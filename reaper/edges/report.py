"""The pass's human report: it reads like a good ``kubectl describe``. The status first
(``OK``, ``OK, N findings`` or ``NOT OK: <why>``), the target and what was read; then what made
the pass not ok, each with its fix; the findings worst first, one line each, the measurement
against its threshold once and the next step; what was done; the policies, one line each.
``-o wide`` gives every detail in full.

Lease moves, routine by the thousand, are summarised per condition beyond
:data:`LISTED_MOVES`: the count, the projects with the most, and the first few jobs; every
verdict stays in the ledger, and ``--json`` lists each one (:mod:`reaper.edges.report_json`,
re-exported here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Final
from uuid import UUID

from reaper.core.cluster import node_summary
from reaper.core.domain import Action, Condition, Source, Verdict
from reaper.edges.report_findings import finding_lines
from reaper.edges.report_json import gate_json, render_json, to_json, verdict_json, write_json
from reaper.edges.wording import LEASE_CONDITIONS, age, measure, plural, short, utc, where
from reaper.reap.progress import SIGHTINGS_WRITE, RecordedVerdict
from reaper.reap.result import PassResult, Problem

__all__ = [
    "LEDGER_POINTER",
    "LISTED_MOVES",
    "gate_json",
    "render_json",
    "render_text",
    "to_json",
    "verdict_json",
    "write_json",
]

#: Lease moves of one condition listed one line each up to this many; beyond, summarised.
LISTED_MOVES: Final = 10
#: In a summary, the jobs listed (the first judged) and the projects named (the most moves).
SUMMARY_JOBS: Final = 5
SUMMARY_PROJECTS: Final = 5


def _state(r: RecordedVerdict, result: PassResult) -> str:
    """Whether a finding's sighting opened now (``new``), was open already (``seen``, with
    since when: a dry run reads that too), or would open (a dry run); ``not recorded`` when
    the ledger could not be read."""
    opened = result.since.get(r.verdict.sighting_key)
    if result.dry_run:
        return "would record" if opened is None else f"seen since {_since(opened, result)}"
    if r.recorded:
        return "new"
    if not _ledger_read(result):
        return "not recorded"
    return "seen" if opened is None else f"seen since {_since(opened, result)}"


def _since(opened: datetime, result: PassResult) -> str:
    """When a sighting opened, as the report's clock reads it (UTC): the time alone on the
    pass's own day, else the date too."""
    moment = opened.astimezone(UTC)
    same_day = moment.date() == result.started_at.astimezone(UTC).date()
    return f"{moment:%H:%M}Z" if same_day else f"{moment:%Y-%m-%d %H:%M}Z"


def _ledger_read(result: PassResult) -> bool:
    """Whether the pass read the ledger and wrote its sightings there."""
    return (
        result.expired_leases is not None
        and not any(u.source == "job_queue" and u.queue is None for u in result.unreadable)
        and not any(r.subject == SIGHTINGS_WRITE for r in result.not_moved)
    )


def _endpoints(result: PassResult) -> str:
    states = {True: "answered", False: "skipped", None: "not needed"}
    return ", ".join(f"{e.url} {states[e.answered]}" for e in result.management)


def _header(result: PassResult, wide: bool) -> list[str]:
    mode = "dry-run audit (nothing written)" if result.dry_run else "pass"
    lines = [
        f"queue-reaper {mode}: {result.status()}   {utc(result.started_at)}  "
        f"({result.duration_seconds:.2f} s)"
    ]
    t = result.target
    target: list[str] = []
    if t is not None:
        dispatch = f" (dispatch {result.dispatch.mode.value})" if result.dispatch else ""
        target.append(f"PostgreSQL {t.database}{dispatch}")
    if result.broker or t is not None:
        product = f"{result.broker.product} {result.broker.version}" if result.broker else "broker"
        vhost = f" vhost {t.vhost!r}" if t is not None else ""
        urls = t.management_urls if t is not None else ()
        via = f" via {', '.join(urls)}" if urls else " (no management URL answered)"
        target.append(f"{product}{vhost}{via}")
    if target and len("; ".join(target)) <= 146:
        lines.append(f"Target:      {'; '.join(target)}")
    else:
        lines += [f"Target:      {part}" for part in target]
    if result.broker and result.broker.nodes is not None and len(result.broker.nodes) > 1:
        lines.append(f"Nodes:       {node_summary(result.broker.nodes)}")
    if len(result.management) > 1 and (wide or any(not e.answered for e in result.management)):
        lines.append(f"Management:  {_endpoints(result)} (in order of preference)")
    if wide and result.dispatch:
        lines.append(f"Dispatch:    {result.dispatch.mode.value} ({result.dispatch.why})")
    inv = result.inventory()
    read: list[str] = []
    if inv.jobs is not None:
        read.append(
            f"{plural(inv.expired_leases or 0, 'expired lease')}, oldest claimable job of "
            f"{plural(inv.projects or 0, 'project')}"
        )
    if inv.queues_owned is not None:
        read.append(
            f"{plural(inv.queues_owned, 'owned queue')}, {inv.queues_foreign} foreign, "
            f"{inv.dead_letter_queues} dead-letter"
        )
    lines.append(f"Read:        {'; '.join(read) if read else 'nothing'}")
    return lines


def render_text(result: PassResult, *, wide: bool = False) -> str:
    """The human report: the status, the target and what was read; what made the pass not ok,
    each with its fix; the findings worst first, one line each; what was done; the policies.
    ``wide``: every detail in full (``-o wide``)."""
    lines = _header(result, wide)

    problems = result.problems()
    if problems:
        lines += ["", f"NOT OK ({len(problems)}):"]
        fixes: set[str] = set()
        for label, subject, detail, fix in _grouped(problems, wide):
            lines.append(f"  {label:<11} {subject}: {detail}")
            if fix and fix not in fixes:  # a fix said once
                fixes.add(fix)
                lines.append(f"  {'':<11} fix: {fix}")

    findings = result.findings()
    if findings:
        lines += ["", f"Findings ({len(findings)}), worst first:"]
        lines += finding_lines(findings, lambda r: _state(r, result), wide=wide)

    moves = _LeaseMoves(wide, result.gates, result.dry_run)
    acted: list[RecordedVerdict] = []
    not_done = 0
    for r in result.verdicts:
        if r.verdict.action is Action.SURFACE:
            continue
        if not result.dry_run and not r.applied:
            not_done += 1  # named under NOT OK, or left alone (a note says why)
            continue
        if r.verdict.source is Source.JOB_QUEUE and r.verdict.condition in LEASE_CONDITIONS:
            moves.add(r)
        else:
            acted.append(r)
    verb = "Would do" if result.dry_run else "Done"
    # a policy written (a dry run: a write it plans); a refused one is under NOT OK
    written = [
        p
        for p in result.policies
        if p.write and (p.action == "planned" if result.dry_run else p.written)
    ]
    count = moves.count + len(acted) + len(written)
    if count:
        lines += ["", f"{verb} ({count}):"]
    lines += moves.lines()
    lines += _acted_lines(acted, result.gates, wide)
    lines += [f"  {p.write:<8} {'policy':<13} {p.name}: {p.change}" for p in written]

    lines += _dead_letter_lines(result, wide)
    lines += _policy_lines(result, wide)
    if len(result.notes) == 1:
        lines += ["", f"Note: {result.notes[0]}"]
    elif result.notes:
        lines += ["", "Notes:"]
        lines += [f"  - {n}" for n in result.notes]
    if not problems and not findings and not count:
        lines += ["", "Nothing found, nothing to do."]
    if not result.dry_run and _ledger_read(result) and len(result.verdicts):
        lines += [f"Every verdict is a QueueReaped event in the ledger: {LEDGER_POINTER}."]
    return "\n".join(lines)


def _grouped(problems: Sequence[Problem], wide: bool) -> list[tuple[str, str, str, str]]:
    """The problems as lines: jobs that failed for the same reason are one line."""
    out: list[tuple[str, str, str, str]] = []
    jobs: dict[tuple[str, str], list[str]] = {}
    for p in problems:
        if p.kind == "row_not_moved" and p.subject.startswith("job ") and not wide:
            key = (p.detail, p.fix)
            if key not in jobs:
                jobs[key] = []
                out.append((p.label, "", p.detail, p.fix))
            jobs[key].append(short(p.subject.removeprefix("job ")))
        else:
            out.append((p.label, p.subject, p.detail, p.fix))
    grouped = iter(jobs.values())
    return [
        (label, subject or _jobs(next(grouped)), detail, fix) for label, subject, detail, fix in out
    ]


def _jobs(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return f"job {shown}" if len(ids) == 1 else f"{len(ids)} jobs ({shown})"


def _dead_letter_lines(result: PassResult, wide: bool) -> list[str]:
    # parks are listed under Done: a queue read and emptied of news says nothing more here
    # (a dry run reads none: its note says what a real pass would read)
    shown = [
        d
        for d in result.dead_letters
        if wide or d.read_blocked or (d.unread and not result.dry_run)
    ]
    if not shown:
        return []
    lines = ["", "Dead-letter queues:"]
    for d in shown:
        if d.read_blocked:
            state = "read blocked (under NOT OK)"
        elif result.dry_run:
            state = "not read (a dry run reads nothing); reading is proven safe"
        else:
            state = "read safely"
        if d.not_fetched:
            state = f"not read: {d.not_fetched}"
        lines.append(
            f"  {d.queue}: depth {d.depth}, {d.parked_new} parked now, {d.already_parked} "
            f"parked before, {d.unread} unread; {state}"
        )
    return lines


def _policy_lines(result: PassResult, wide: bool) -> list[str]:
    """One line per policy; the fallback and what is not enforced said once each; the
    long form (every detail) only ``wide``."""
    if not result.policies:
        return []
    lines = ["", "Policies:"]
    said: set[str] = set()
    for p in result.policies:
        verified = {True: "in force", False: "NOT in force", None: "nothing to check"}[p.verified]
        failing = f"; failing: {', '.join(p.queues_failing)}" if p.queues_failing else ""
        where_ = f"on {plural(p.queues_checked, 'queue')}"
        if p.unenforceable:  # how many it bounds; the rest are unbounded findings
            bounded = p.queues_checked - len(p.queues_failing)
            verified = f"bounds {bounded} of {plural(p.queues_checked, 'queue')};"
            where_ = f"not enforced on {len(p.queues_failing)} (unbounded findings)"
            failing = failing if wide else ""
        lines.append(f"  {p.name}: {p.action}, {verified} {where_} [{p.reason}]" + failing)
        if wide:
            lines.append(f"    {p.detail}")
            continue
        for fallback in p.fallbacks:
            if fallback not in said:
                said.add(fallback)
                lines.append(f"    {brief(fallback)}")
    return lines


def _joined(items: Sequence[str], head: str, pad: str, width: int = 150) -> list[str]:
    """``items`` after ``head``, comma-separated, on as few lines of ``width`` as they fit."""
    lines = [head]
    for n, item in enumerate(items):
        sep = ", " if n and not lines[-1].endswith(pad) else ""
        if n and len(lines[-1]) + len(sep) + len(item) > width:
            lines[-1] += ","
            lines.append(pad)
            sep = ""
        lines[-1] += sep + item
    return lines


def brief(text: str) -> str:
    """A sentence without its trailing evidence (a closing parenthetical, a ``, which``
    clause): the short form says what holds; ``-o wide`` says how it is known."""
    while text.endswith(")"):
        depth, cut = 0, -1
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                cut = i
                break
        if cut <= 0:
            break
        text = text[:cut].rstrip()
    head, sep, _ = text.partition(", which ")
    return head if sep else text


def _acted_line(v: Verdict, wide: bool = False, gates: Mapping[str, UUID] | None = None) -> str:
    # A parked letter's verdict measures its queue's depth, not the letter: not quoted here.
    letter = v.condition is Condition.DEAD_LETTER and v.object != v.queue
    measured = "" if letter else measure(v)
    line = f"  {v.action.value:<8} {v.condition.value:<13} {where(v, wide=wide)}" + (
        f": {measured}" if measured else ""
    )
    gate = (gates or {}).get(v.object) if v.action is Action.PARK else None
    if gate is not None:
        # the usual answer, pasteable, and the other one the gate takes
        choice, other = (
            ("retry", "cancel") if v.condition is Condition.POISON else ("replay", "dismiss")
        )
        line += (
            f"; gate {short(gate)}: reaper gates answer {short(gate)} --choice {choice}"
            f" (or {other})"
        )
    return line


def _acted_lines(
    acted: Sequence[RecordedVerdict], gates: Mapping[str, UUID], wide: bool
) -> list[str]:
    """Moves that are not lease moves, one line each; in the short form a queue's dead-letter
    parks are one line, with their gates."""
    if wide:
        return [_acted_line(r.verdict, True, gates) for r in acted]
    groups: dict[tuple[str, str, str | None], list[Verdict]] = {}
    for r in acted:
        v = r.verdict
        groups.setdefault((v.action.value, v.condition.value, v.queue), []).append(v)
    lines: list[str] = []
    for (action, condition, queue), verdicts in groups.items():
        if len(verdicts) == 1 or queue is None:
            lines += [_acted_line(v, False, gates) for v in verdicts]
            continue
        shown = [short(gates[v.object]) for v in verdicts if v.object in gates]
        lines.append(
            f"  {action:<8} {condition:<13} {len(verdicts)} letters from queue {queue}"
            + (
                f"; gates {', '.join(shown)}: reaper gates answer ID --choice replay|dismiss"
                if shown
                else ""
            )
        )
    return lines


class _LeaseMoves:
    """Lease moves (requeues, parks) as they stream past, per condition: the count, the count
    per project, and the first few (all of them while there are no more than
    :data:`LISTED_MOVES`)."""

    def __init__(
        self, wide: bool = False, gates: Mapping[str, UUID] | None = None, dry_run: bool = False
    ) -> None:
        self.wide = wide
        self.dry_run = dry_run
        self.gates = gates or {}
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
        if self.wide or len(first) < LISTED_MOVES:  # wide: every move, one line each
            first.append(v)

    def lines(self) -> list[str]:
        out: list[str] = []
        for condition in LEASE_CONDITIONS:
            count = self.per_condition.get(condition, 0)
            if not count:
                continue
            first = self.first[condition]
            if self.wide or (
                count <= LISTED_MOVES and (count == 1 or condition is Condition.POISON)
            ):
                out += [_acted_line(v, self.wide, self.gates) for v in first]
                continue
            if count <= LISTED_MOVES:
                # a few requeues on one line: each job and how long ago its lease expired
                shown = [f"{short(v.object)} {age(v.measured or 0)}" for v in first]
                verb = first[0].action.value
                head = f"  {verb:<8} {condition.value:<13} {count} jobs, expired ago: "
                out += _joined(shown, head, " " * len(head))
                continue
            action = first[0].action.value
            projects = self.projects[condition]
            out.append(
                f"  {action:<8} {condition.value:<13} {count} job(s) in {len(projects)} project(s)"
            )
            top = sorted(projects.items(), key=lambda item: (-item[1], str(item[0])))
            named = ", ".join(
                f"{p if self.wide else short(p)} {n}" for p, n in top[:SUMMARY_PROJECTS]
            )
            rest = len(top) - SUMMARY_PROJECTS
            out.append(
                f"  {'':<22} by project: {named}"
                + (f", and {rest} more project(s)" if rest > 0 else "")
            )
            out += [
                f"  {'':<22} {where(v, wide=self.wide)}: {measure(v)}" for v in first[:SUMMARY_JOBS]
            ]
            out.append(f"  {'':<22} {self._rest(condition, count)}")
        return out

    def _rest(self, condition: Condition, count: int) -> str:
        """What is said of the moves a summary does not list: where to see each."""
        rest = count - SUMMARY_JOBS
        if self.dry_run:
            return (
                f"{rest} more not listed here: `reaper reap --dry-run -o wide` lists every one; "
                "a real pass would record each as a QueueReaped event"
            )
        gates = "; `reaper gates list --kind poison` lists their gates" * (
            condition is Condition.POISON and bool(self.gates)
        )
        return (
            f"{rest} more not listed here{gates}; each is a QueueReaped event in the ledger: "
            f"reaper events --condition {condition.value} --limit {count}"
        )


#: Where every verdict of a pass is kept: the ledger, never a new pass.
LEDGER_POINTER: Final = "reaper events, or SELECT payload FROM event WHERE kind = 'QueueReaped'"
