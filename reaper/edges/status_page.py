"""``reaper serve``'s ``/``: a small read-only status page, rendered on the server (SPEC §6).

The last pass (its status, target and findings), the open gates oldest first with the command
for each answer, the dead-letter queues whose letters are all answered (safe to clear, with the
command: the act is left to the person), and links to ``/metrics`` and ``/healthz``. No
JavaScript, no asset from outside, no form: nothing on it writes. Every value is escaped, and
whatever came from a dead letter's headers is quoted and cut as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape as escape_markup
from typing import Final

from reaper.config import Settings
from reaper.core.dead_letters import quote_untrusted
from reaper.core.moments import utc
from reaper.core.terminal import for_terminal
from reaper.edges.gate_board import GateBoard, safe_to_clear
from reaper.edges.gate_views import format_age, view_of
from reaper.errors import scrub
from reaper.reap.result import PassResult

__all__ = ["PageTarget", "page_target", "render_page"]

#: At most this many findings are listed (the report and the ledger have them all).
FINDINGS_SHOWN: Final = 50

_STYLE: Final = (
    "body{font-family:sans-serif;margin:2em;max-width:70em}"
    "code{background:#f3f3f3;padding:0 .3em}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;"
    "text-align:left;vertical-align:top}.ok{color:#176317}.bad{color:#a01010}"
)


@dataclass(frozen=True)
class PageTarget:
    """What the reaper points at, as the page names it (no password)."""

    database: str
    vhost: str
    management_urls: tuple[str, ...]
    owned_queue_pattern: str
    dead_letter_queue_pattern: str


def escape(text: str) -> str:
    """Text for the page: markup escaped, and what would drive a terminal shown escaped too
    (``\x1b``, ``\u202e``), as every text output shows it."""
    return escape_markup(for_terminal(text))


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
) -> str:
    """The whole page, as HTML text."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>queue-reaper status</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>queue-reaper</h1>",
        '<p><a href="/metrics">/metrics</a> · <a href="/healthz">/healthz</a></p>',
        *_target(target),
        *_last_pass(result),
        *_gates(board, target, board_error),
        *_safe_to_clear(result, board, target),
        "<p>Read-only: answer a gate with the command shown; nothing here writes.</p>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _target(target: PageTarget) -> list[str]:
    urls = ", ".join(f"<code>{escape(u)}</code>" for u in target.management_urls)
    return [
        "<h2>Target</h2>",
        f"<p>database <code>{escape(target.database)}</code>, vhost "
        f"<code>{escape(target.vhost)}</code>, management {urls}</p>",
    ]


def _last_pass(result: PassResult | None) -> list[str]:
    if result is None:
        return ["<h2>Last pass</h2>", "<p>No pass has completed yet.</p>"]
    problems = [p.line() for p in result.problems()]
    findings = list(result.surfaced())
    if problems:
        status = f'<span class="bad">NOT OK</span>: {escape("; ".join(problems))}'
    elif findings:
        status = f'<span class="ok">OK</span>, {len(findings)} finding(s)'
    else:
        status = '<span class="ok">OK</span>'
    mode = "dry-run audit" if result.dry_run else "pass"
    lines = [
        "<h2>Last pass</h2>",
        f"<p>{status}</p>",
        f"<p>{mode} started {escape(utc(result.started_at))}, took "
        f"{result.duration_seconds:.2f} s</p>",
    ]
    if findings:
        lines.append("<h3>Findings</h3><ul>")
        for r in findings[:FINDINGS_SHOWN]:
            v = r.verdict
            shown = v.object if v.trusted else quote_untrusted(v.object)
            lines.append(
                f"<li><code>{escape(v.source.value)}/{escape(v.condition.value)}</code> "
                f"{escape(shown)}: {escape(str(v.measured))} against "
                f"{escape(str(v.threshold))} {escape(v.unit.value)}</li>"
            )
        if len(findings) > FINDINGS_SHOWN:
            lines.append(f"<li>and {len(findings) - FINDINGS_SHOWN} more (see reaper reap)</li>")
        lines.append("</ul>")
    return lines


def _gates(board: GateBoard | None, target: PageTarget, error: str | None) -> list[str]:
    lines = ["<h2>Open gates</h2>"]
    if board is None:
        why = f": {escape(error)}" if error else " yet"
        return [*lines, f"<p>The gates have not been read{why}.</p>"]
    if not board.oldest:
        return [*lines, "<p>None: nothing waits for a person.</p>"]
    lines.append(
        f"<p>{board.total_open} open, oldest first"
        + (
            f" (the oldest {len(board.oldest)} shown)"
            if board.total_open > len(board.oldest)
            else ""
        )
        + "</p>"
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
        job_kind = quote_untrusted(gate.job_kind) if gate.job_kind else "-"
        lines.append(
            f"<tr><td><code>{escape(view.short)}</code></td>"
            f"<td>{escape(format_age(view.age_seconds))}</td>"
            f"<td>{escape(str(gate.project_id))}</td><td>{escape(gate.kind)}</td>"
            f"<td>{escape(job_kind)}</td><td>{commands}{withheld}</td></tr>"
        )
    lines.append("</table>")
    return lines


def _safe_to_clear(
    result: PassResult | None, board: GateBoard | None, target: PageTarget
) -> list[str]:
    if result is None or board is None:
        return []
    clear = safe_to_clear(result.dead_letters, board.waiting, target.vhost)
    if not clear:
        return []
    lines = ["<h2>Dead-letter queues whose letters are all answered</h2><ul>"]
    for s in clear:
        lines.append(
            f"<li><code>{escape(s.queue)}</code>: {s.letters} letter(s), every one parked and "
            f"answered. Safe to clear: <code>{escape(s.command)}</code> (the reaper never "
            "clears a queue: that act is yours)</li>"
        )
    lines.append("</ul>")
    return lines
