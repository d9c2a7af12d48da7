"""``reaper serve``'s status page, rendered on the server.

A page a person would rather look at than read (SPEC §6): A coloured bar with the last pass's
status and how long ago it ran, tiles with the counts that matter (findings, open gates and the
oldest one's age, owned queues, dead letters), what made the pass not ok with each fix, the
findings in words (human durations, short ids, the next step), the owned queues
(:mod:`reaper.edges.status_queues`), the dead-letter queues and which are safe to clear with the
command, the open gates oldest first with the command for each answer, and the last passes. It
refreshes itself (``<meta http-equiv=refresh>``); no JavaScript, no asset from outside, no form:
nothing on it writes. Every value is escaped (:func:`escape`), and whatever came from a dead
letter's headers is quoted and cut as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from reaper.config import Settings
from reaper.core.dead_letters import quote_untrusted
from reaper.core.moments import utc
from reaper.edges.status_queues import dead_letter_section, escape, queue_section
from reaper.edges.wording import age, measure, next_step, where
from reaper.errors import scrub
from reaper.gates.board import GateBoard, safe_to_clear
from reaper.gates.ids import project_name
from reaper.gates.views import view_of
from reaper.reap.result import PassResult

__all__ = ["PageTarget", "PassLine", "escape", "page_target", "pass_line", "render_page"]

#: At most this many findings are listed (the report and the ledger have them all).
FINDINGS_SHOWN: Final = 50
#: The page reloads itself this often at most, and at least this often.
REFRESH_BOUNDS: Final = (5, 60)

_STYLE: Final = (
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;"
    "background:#f5f6f8;color:#1d2330}"
    "main{max-width:78em;margin:0 auto;padding:0 1.5em 2em}"
    ".bar{padding:.9em 1.5em;color:#fff;display:flex;gap:1.2em;align-items:baseline;"
    "flex-wrap:wrap}.bar h1{font-size:1.15em;margin:0}.bar .status{font-size:1.3em;"
    "font-weight:700}.bar.ok{background:#1f7a3a}.bar.warn{background:#9a6200}"
    ".bar.bad{background:#b3261e}.bar.none{background:#4a5160}.bar a{color:#fff}"
    ".target{color:#4a5160;margin:.8em 0}"
    ".tiles{display:flex;gap:.8em;flex-wrap:wrap;margin:1em 0}"
    ".tile{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:.6em 1em;"
    "min-width:9em}.tile .n{font-size:1.8em;font-weight:700}.tile .l{color:#4a5160}"
    ".tile.bad .n{color:#b3261e}.tile.warn .n{color:#9a6200}"
    "h2{font-size:1.15em;margin:1.6em 0 .5em}"
    "table{border-collapse:collapse;background:#fff;width:100%;border:1px solid #dde1e8}"
    "th,td{padding:.35em .6em;text-align:left;vertical-align:top;border-bottom:1px solid "
    "#eceef2}th{background:#eef0f4;font-weight:600}.num{text-align:right}"
    "code{background:#eef0f4;padding:0 .3em;border-radius:3px;font-size:.92em}"
    ".tag{display:inline-block;padding:0 .45em;border-radius:3px;font-size:.85em;"
    "font-weight:600}.tag.ok{background:#dcf1e2;color:#1f7a3a}.tag.warn{background:#fbecd0;"
    "color:#7a4d00}.tag.bad{background:#f8dcd9;color:#b3261e}.muted{color:#6b7280}"
    "footer{color:#6b7280;margin-top:2em}"
)


@dataclass(frozen=True)
class PageTarget:
    """What the reaper points at, as the page names it (no password)."""

    database: str
    vhost: str
    management_urls: tuple[str, ...]
    owned_queue_pattern: str
    dead_letter_queue_pattern: str


@dataclass(frozen=True)
class PassLine:
    """One earlier pass, as the page lists the last few: when, how it went, what it did."""

    started_at: datetime | None
    status: str
    ok: bool
    took_seconds: float | None
    findings: int = 0
    leases_moved: int = 0


def pass_line(result: PassResult) -> PassLine:
    """What the page keeps of a pass once the next one has run."""
    return PassLine(
        result.started_at,
        result.status(),
        result.ok,
        result.duration_seconds,
        len(result.findings()),
        result.leases.expired or 0,
    )


def page_target(settings: Settings) -> PageTarget:
    """What the page names as the reaper's target (the DSN scrubbed of its password)."""
    reap = settings.queue.reap
    return PageTarget(
        database=scrub(settings.database.dsn),
        vhost=settings.bus.vhost,
        management_urls=tuple(scrub(u) for u in settings.bus.urls_in_force()),
        owned_queue_pattern=reap.owned_queue_pattern,
        dead_letter_queue_pattern=reap.dead_letter_queue_pattern,
    )


def render_page(
    result: PassResult | None,
    board: GateBoard | None,
    target: PageTarget,
    *,
    board_error: str | None = None,
    passes: Sequence[PassLine] = (),
    refresh_seconds: float = 30,
    now: datetime | None = None,
) -> str:
    """The whole page, as HTML text; ``now`` (default: this host's clock) ages what it says."""
    now = now or datetime.now(UTC)
    low, high = REFRESH_BOUNDS
    refresh = int(min(max(refresh_seconds, low), high))
    broker = (
        [
            *queue_section(result),
            *dead_letter_section(result, board, target.vhost),
        ]
        if result is not None and result.broker is not None
        else []
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{refresh}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>queue-reaper status</title>",
        f"<style>{_STYLE}</style></head><body>",
        _bar(result, now),
        "<main>",
        _target(target, result),
        *_tiles(result, board, target),
        *_problems(result),
        *_findings(result),
        *broker,
        *_gates(board, target, board_error),
        *_passes(result, passes, now),
        f"<footer>This page refreshes every {refresh} s. Read-only: answer a gate with the "
        'command shown; nothing here writes. <a href="/metrics">/metrics</a> · '
        '<a href="/healthz">/healthz</a></footer>',
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _bar(result: PassResult | None, now: datetime) -> str:
    if result is None:
        tone, status, when = "none", "no pass yet", "the first pass is running"
    else:
        found = result.findings() or result.target_findings()
        tone = "bad" if not result.ok else ("warn" if found else "ok")
        status = result.status()
        ago = age((now - result.finished_at).total_seconds())
        mode = "dry-run audit" if result.dry_run else "last pass"
        when = (
            f'{mode} {ago} ago (<span title="{escape(utc(result.started_at))}">'
            f"{escape(utc(result.started_at))}</span>), took {_took(result.duration_seconds)}"
        )
    return (
        f'<div class="bar {tone}"><h1>queue-reaper</h1><span class="status">'
        f"{escape(status)}</span><span>{when}</span></div>"
    )


def _took(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 60 else age(seconds)


def _target(target: PageTarget, result: PassResult | None) -> str:
    urls = ", ".join(f"<code>{escape(u)}</code>" for u in target.management_urls)
    product = ""
    if result is not None and result.broker is not None:
        product = f"{escape(result.broker.product)} {escape(result.broker.version)} "
    return (
        f'<p class="target">PostgreSQL <code>{escape(target.database)}</code> · {product}'
        f"vhost <code>{escape(target.vhost)}</code> via {urls}</p>"
    )


def _tile(n: object, label: str, tone: str = "") -> str:
    return (
        f'<div class="tile {tone}"><div class="n">{escape(str(n))}</div>'
        f'<div class="l">{label}</div></div>'
    )


def _tiles(result: PassResult | None, board: GateBoard | None, target: PageTarget) -> list[str]:
    tiles = []
    if result is not None:
        problems = len(result.problems())
        findings = len(result.findings()) + len(result.target_findings())
        if problems:
            tiles.append(_tile(problems, "not ok", "bad"))
        tiles.append(_tile(findings, "findings", "warn" if findings else ""))
        inventory = result.inventory()
        if inventory.queues_owned is not None:  # the broker was read
            dead = inventory.dead_letter_queues or 0
            label = f"owned queues, {dead} dead-letter" if dead else "owned queues"
            tiles.append(_tile(inventory.queues_owned, label))
            letters = sum(d.depth for d in result.dead_letters.queues)
            tiles.append(_tile(letters, "dead letters", "warn" if letters else ""))
            if board is not None and letters:
                clear = safe_to_clear(result.dead_letters.queues, board.waiting, target.vhost)
                tiles.append(_tile(len(clear), "queues safe to clear"))
    if board is not None:
        first = min((c.oldest for c in board.counts), default=board.now)
        oldest = age((board.now - first).total_seconds())
        label = f"open gates, the oldest {oldest}" if board.total_open else "open gates"
        tiles.append(_tile(board.total_open, label, "warn" if board.total_open else ""))
    return ['<div class="tiles">', *tiles, "</div>"]


def _problems(result: PassResult | None) -> list[str]:
    if result is None or not result.problems():
        return []
    lines = ["<h2>Not ok</h2>", "<table><tr><th>what</th><th>why</th><th>fix</th></tr>"]
    for p in result.problems():
        lines.append(
            f'<tr><td><span class="tag bad">{escape(p.label)}</span> {escape(p.subject)}</td>'
            f"<td>{escape(p.detail)}</td><td>{escape(p.fix) or '-'}</td></tr>"
        )
    return [*lines, "</table>"]


def _findings(result: PassResult | None) -> list[str]:
    if result is None:
        return []
    findings, aimed = result.findings(), result.target_findings()
    if not findings and not aimed:
        return ["<h2>Findings</h2>", "<p>None: nothing holds work or waits too long.</p>"]
    lines = [
        "<h2>Findings</h2>",
        "<table><tr><th>condition</th><th>what</th><th>measured</th><th>next step</th></tr>",
    ]
    lines += [
        f'<tr><td><span class="tag warn">{escape(t.condition)}</span></td>'
        f"<td><code>{escape(t.subject)}</code></td><td>{escape(t.detail)}</td>"
        f"<td>{escape(t.next_step)}</td></tr>"
        for t in aimed
    ]
    for r in findings[:FINDINGS_SHOWN]:
        v = r.verdict
        subject = where(v)  # escaped below, every control shown (SPEC §11)
        lines.append(
            f'<tr><td><span class="tag warn">{escape(v.condition.value)}</span></td>'
            f"<td><code>{escape(subject)}</code></td><td>{escape(measure(v))}</td>"
            f"<td>{escape(next_step(v))}</td></tr>"
        )
    lines.append("</table>")
    if len(findings) > FINDINGS_SHOWN:
        rest = len(findings) - FINDINGS_SHOWN
        lines.append(f"<p class=muted>And {rest} more: reaper reap -o wide lists each.</p>")
    return lines


def _gates(board: GateBoard | None, target: PageTarget, error: str | None) -> list[str]:
    lines = ["<h2>Open gates</h2>"]
    if board is None:
        why = f": {escape(error)}" if error else " yet"
        return [*lines, f"<p>The gates have not been read{why}.</p>"]
    if not board.oldest:
        return [*lines, "<p>None: nothing waits for a person.</p>"]
    shown = len(board.oldest)
    cut = f", the oldest {shown} shown" if board.total_open > shown else ""
    lines.append(
        f"<p>{board.total_open} open, oldest first{cut}. Many at once: "
        "<code>reaper gates answer --kind KIND --older-than AGE --choice CHOICE</code> "
        "shows the selection and asks before it writes.</p>"
    )
    lines.append(
        "<table><tr><th>gate</th><th>age</th><th>project</th><th>kind</th><th>job</th>"
        "<th>answer with</th></tr>"
    )
    for gate in board.oldest:
        parked = board.parked.get(gate.job_id) if gate.job_id else None
        view = view_of(
            gate,
            parked,
            board.now,
            owned_queue_pattern=target.owned_queue_pattern,
            dead_letter_queue_pattern=target.dead_letter_queue_pattern,
        )
        commands = "<br>".join(f"<code>{escape(c)}</code>" for c in view.commands())
        withheld = "".join(f"<br><small>{escape(w)}</small>" for w in view.withheld)
        job = quote_untrusted(gate.job_kind) if gate.job_kind else "-"
        job_id = f" <small>{escape(str(gate.job_id)[:8])}</small>" if gate.job_id else ""
        lines.append(
            f"<tr><td><code>{escape(view.short)}</code></td>"
            f"<td>{escape(age(view.age_seconds))}</td>"
            f"<td>{escape(project_name(gate.project_id))}</td><td>{escape(gate.kind)}</td>"
            f"<td>{escape(job)}{job_id}</td><td>{commands}{withheld}</td></tr>"
        )
    lines.append("</table>")
    return lines


def _passes(result: PassResult | None, passes: Sequence[PassLine], now: datetime) -> list[str]:
    shown = list(passes) or ([pass_line(result)] if result is not None else [])
    if not shown:
        return []
    lines = [
        "<h2>Last passes</h2>",
        "<table><tr><th>started</th><th>status</th><th class=num>took</th>"
        "<th class=num>findings</th><th class=num>leases moved</th></tr>",
    ]
    for p in reversed(shown):
        when = "-" if p.started_at is None else f"{age((now - p.started_at).total_seconds())} ago"
        at = "" if p.started_at is None else f" <small>{escape(utc(p.started_at))}</small>"
        tone = "bad" if not p.ok else ("warn" if p.findings else "ok")
        took = "-" if p.took_seconds is None else _took(p.took_seconds)
        lines.append(
            f'<tr><td>{escape(when)}{at}</td><td><span class="tag {tone}">{escape(p.status)}'
            f"</span></td><td class=num>{escape(took)}</td><td class=num>{p.findings}</td>"
            f"<td class=num>{p.leases_moved}</td></tr>"
        )
    return [*lines, "</table>"]
