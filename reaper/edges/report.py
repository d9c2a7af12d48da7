"""The pass's human report, which reads like a good ``kubectl describe``.

The pass's human report: it reads like a good ``kubectl describe``. The status first
(``OK``, ``OK, N findings`` or ``NOT OK: <why>``), the target and what was read; then what made
the pass not ok, each with its fix; the findings worst first, one line each, the measurement
against its threshold once and the next step; what was done; the policies, one line each.
``-o wide`` gives every detail in full.

What was done, and each park's gate, is :mod:`reaper.edges.report_moves`; ``--json`` lists
every verdict (:mod:`reaper.edges.report_json`, re-exported here).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from reaper.core.cluster import node_summary
from reaper.core.domain import Action
from reaper.core.terminal import first_few, one_line
from reaper.edges.report_findings import finding_lines
from reaper.edges.report_json import to_json, verdict_json, write_json
from reaper.edges.report_moves import LISTED_MOVES, LeaseMoves, acted_lines, raised_since
from reaper.edges.wording import plural, short, utc
from reaper.reap.progress import SIGHTINGS_WRITE, RecordedVerdict
from reaper.reap.result import PassResult, Problem

__all__ = [
    "LEDGER_POINTER",
    "LISTED_MOVES",
    "render_text",
    "to_json",
    "verdict_json",
    "write_json",
]


def _state(r: RecordedVerdict, result: PassResult) -> str:
    """Whether a finding's sighting opened now (``new``), was open already (``seen``, with
    since when: a dry run reads that too), or would open (a dry run); ``not recorded`` when
    the ledger could not be read."""
    opened = result.sightings.since.get(r.verdict.sighting_key)
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
        result.leases.expired is not None
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


def render_text(
    result: PassResult, *, wide: bool = False, listed: Sequence[RecordedVerdict] | None = None
) -> str:
    """The human report: the status, the target and what was read; what made the pass not ok,
    each with its fix; the findings worst first, one line each; what was done; the policies.
    ``wide``: every detail in full (``-o wide``). The lease moves are counted as the pass
    counted them and listed from ``listed`` (``-o wide``: every one, read back while the pass's
    sources were open), by default the first few the pass read back as it ended."""
    lines = _header(result, wide)

    problems = result.problems()
    if problems:
        lines += ["", f"NOT OK ({len(problems)}):"]
        fixes: set[str] = set()
        for label, subject, detail, fix in _grouped(problems, wide):
            lines.append(f"  {label:<11} {one_line(subject)}: {one_line(detail)}")
            if fix and fix not in fixes:  # a fix said once
                fixes.add(fix)
                lines.append(f"  {'':<11} fix: {fix}")

    findings, aimed = result.findings(), result.target_findings()
    if findings or aimed:
        lines += ["", f"Findings ({len(findings) + len(aimed)}), worst first:"]
        for t in aimed:
            said = one_line(f"{t.subject}: {t.detail}")
            lines += [f"  {t.condition} {said}", f"  {'':<14} {t.next_step}"]
        lines += finding_lines(findings, lambda r: _state(r, result), wide=wide)

    since = raised_since(result.started_at)
    listing = result.leases.listing
    moves = LeaseMoves(listing, result.started_at, wide, result.gates.by_job, result.dry_run, since)
    for r in listing.sample if listed is None else listed:
        moves.add(r)
    # a write not done is named under NOT OK, or left alone (a note says why)
    acted = [
        r
        for r in result.verdicts
        if r.verdict.action is not Action.SURFACE and (result.dry_run or r.applied)
    ]
    verb = "Would do" if result.dry_run else "Done"
    # a policy written (a dry run: a write it plans); a refused one is under NOT OK
    written = [
        p
        for p in result.policies.outcomes
        if p.write and (p.action == "planned" if result.dry_run else p.written)
    ]
    count = moves.count + len(acted) + len(written)
    if count:
        lines += ["", f"{verb} ({count}):"]
    lines += moves.lines()
    if listing.lost is not None and moves.count:
        lines.append(f"  {listing.unread()}")
    lines += acted_lines(acted, result.gates.by_job, wide, since)
    lines += [f"  {p.write:<8} {'policy':<13} {p.name}: {p.change}" for p in written]

    lines += _dead_letter_lines(result, wide)
    lines += _policy_lines(result, wide)
    if len(result.notes) == 1:
        lines += ["", f"Note: {result.notes[0]}"]
    elif result.notes:
        lines += ["", "Notes:"]
        lines += [f"  - {n}" for n in result.notes]
    if not problems and not findings and not aimed and not count:
        lines += ["", "Nothing found, nothing to do."]
    if not result.dry_run and _ledger_read(result) and result.verdict_count:
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
    shown = first_few(ids)
    return f"job {shown}" if len(ids) == 1 else f"{len(ids)} jobs ({shown})"


def _dead_letter_lines(result: PassResult, wide: bool) -> list[str]:
    # parks are listed under Done: a queue read and emptied of news says nothing more here
    # (a dry run reads none: its note says what a real pass would read)
    shown = [
        d
        for d in result.dead_letters.queues
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
    if not result.policies.outcomes:
        return []
    lines = ["", "Policies:"]
    said: set[str] = set()
    for p in result.policies.outcomes:
        verified = {True: "in force", False: "NOT in force", None: "nothing to check"}[p.verified]
        failing = f"; failing: {one_line(', '.join(p.queues_failing))}" if p.queues_failing else ""
        where_ = f"on {plural(p.queues_checked, 'queue')}"
        if p.unenforceable:  # how many it bounds; the rest are unbounded findings
            bounded = p.queues_checked - len(p.queues_failing)
            verified = f"bounds {bounded} of {plural(p.queues_checked, 'queue')};"
            where_ = f"not enforced on {len(p.queues_failing)} (unbounded findings)"
            failing = failing if wide else ""
        lines.append(f"  {p.name}: {p.action}, {verified} {where_} [{p.reason}]" + failing)
        if wide:
            lines.append(f"    {one_line(p.detail)}")
            continue
        for fallback in p.fallbacks:
            if fallback not in said:
                said.add(fallback)
                lines.append(f"    {brief(fallback)}")
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


#: Where every verdict of a pass is kept: the ledger, never a new pass.
LEDGER_POINTER: Final = "reaper events, or SELECT payload FROM event WHERE kind = 'QueueReaped'"
