"""The status page's broker half: the owned and dead-letter queues at a glance.

The status page's broker half: the owned queues at a glance (depth, unacknowledged,
consumers, the bound in force, the verdict) and the dead-letter queues (letters, parked,
answered, whether safe to clear and the command). Pure: the last pass and the gate board in,
HTML out, every name escaped by :func:`escape`."""

from __future__ import annotations

from collections import defaultdict
from html import escape as escape_markup
from typing import Final

from reaper.core.bounds import (
    consumer_timeout_bound,
    delivery_limit_applies,
    delivery_limit_bound,
    is_dead_letter_queue,
    is_owned_queue,
)
from reaper.core.domain import BrokerFacts, Condition, QueueStats
from reaper.core.terminal import for_terminal, one_line
from reaper.edges.wording import age
from reaper.gates.board import GateBoard, safe_to_clear
from reaper.reap.dead_letters import DeadLetterOutcome
from reaper.reap.result import PassResult

__all__ = ["dead_letter_section", "escape", "queue_section"]

#: At most this many owned queues are listed (the busiest first; the report has them all).
QUEUES_SHOWN: Final = 100


def escape(text: str) -> str:
    """Text for the page: markup escaped, and what would drive a terminal shown escaped too
    (``\\x1b``, ``\\u202e``, a newline as ``\\n``), as every text output shows it (SPEC §11)."""
    return escape_markup(for_terminal(one_line(text)))


def queue_section(result: PassResult) -> list[str]:
    """The owned queues the last pass kept (those holding or listing anything), busiest
    first, each with its bound in force and its verdict; the quiet ones as a count."""
    thresholds = result.thresholds
    owned = [
        q
        for q in result.queues
        if thresholds is None
        or (is_owned_queue(q.name, thresholds) and not is_dead_letter_queue(q.name, thresholds))
    ]
    owned.sort(key=lambda q: (-(q.messages_ready + q.messages_unacknowledged), q.name))
    verdicts = _verdicts_by_queue(result)
    lines = ["<h2>Owned queues</h2>"]
    quiet = result.quiet.owned
    unmeasured = sum(
        thresholds is None or is_owned_queue(name, thresholds)
        for name in result.quiet.without_statistics
    )
    if not owned:
        said = []
        if quiet:
            said.append(f"{quiet} owned queue(s), each quiet: nothing held, no consumer to watch")
        if unmeasured:
            said.append(f"{unmeasured} listed without statistics yet")
        return [*lines, f"<p>{'; '.join(said) or 'None read in the last pass.'}</p>"]
    lines.append(
        "<table><tr><th>queue</th><th>type</th><th class=num>ready</th>"
        "<th class=num>unacked</th><th class=num>consumers</th><th>bound in force</th>"
        "<th>verdict</th></tr>"
    )
    for q in owned[:QUEUES_SHOWN]:
        found = verdicts.get(q.name, {})
        verdict = (
            " ".join(
                f'<span class="tag {tone}">{escape(said)}</span>' for said, tone in found.items()
            )
            or '<span class="tag ok">ok</span>'
        )
        lines.append(
            f"<tr><td><code>{escape(q.name)}</code></td><td>{escape(q.type or '-')}</td>"
            f"<td class=num>{_count(q.messages_ready, q)}</td>"
            f"<td class=num>{_count(q.messages_unacknowledged, q)}</td>"
            f"<td class=num>{_count(q.consumers, q)}</td>"
            f"<td>{_bound(q, result.broker)}</td><td>{verdict}</td></tr>"
        )
    lines.append("</table>")
    rest = len(owned) - QUEUES_SHOWN
    tail = [f"{rest} more kept (reaper reap -o wide lists each)"] if rest > 0 else []
    tail += [f"{quiet} quiet (nothing held, bounds in force)"] if quiet else []
    tail += [f"{unmeasured} listed without statistics yet"] if unmeasured else []
    if tail:
        lines.append(f"<p class=muted>And {'; '.join(tail)}.</p>")
    return lines


def _count(n: int, q: QueueStats) -> str:
    return str(n) if q.counts_known else "?"


def _verdicts_by_queue(result: PassResult) -> dict[str, dict[str, str]]:
    """What the last pass said of each queue, each with its tone: a queue that would drop
    messages or holds work now in red, the rest in amber."""
    said: dict[str, dict[str, str]] = defaultdict(dict)
    for r in result.surfaced():
        v = r.verdict
        if v.queue:
            holds = v.drops or v.condition in (Condition.HUNG_HANDLER, Condition.HOLDER_GONE)
            said[v.queue]["would drop" if v.drops else v.condition.value] = (
                "bad" if holds else "warn"
            )
    return said


def _bound(q: QueueStats, broker: BrokerFacts | None) -> str:
    """The consumer timeout and delivery limit the broker enforces on ``q``, in words (a
    delivery limit only where one can bind the queue: not on RabbitMQ's classic queues)."""
    timeout = consumer_timeout_bound(q, broker)
    limit = delivery_limit_bound(q, broker) if delivery_limit_applies(q, broker) else None
    if not timeout.known or (limit is not None and not limit.known):
        return "<span class=muted>not known yet</span>"
    shown = []
    if timeout.enforced and timeout.value:
        shown.append(f"timeout {age(timeout.value / 1000)}")
    if limit is not None and limit.enforced and limit.value is not None and limit.value >= 0:
        shown.append(f"delivery limit {limit.value}")
    if not shown:
        return '<span class="tag warn">none enforced</span> <small>(watched by the reaper)</small>'
    return ", ".join(shown)


def dead_letter_section(result: PassResult, board: GateBoard | None, vhost: str) -> list[str]:
    """Each owned dead-letter queue: its letters, how many are parked and answered, and
    whether it is safe to clear (with the command) or why not."""
    lines = ["<h2>Dead-letter queues</h2>"]
    if not result.dead_letters.queues:
        return [*lines, "<p>None of ours holds a letter.</p>"]
    waiting = board.waiting if board is not None else {}
    clear = {s.queue: s for s in safe_to_clear(result.dead_letters.queues, waiting, vhost)}
    lines.append(
        "<table><tr><th>queue</th><th class=num>letters</th><th class=num>parked</th>"
        "<th class=num>answered</th><th>clear?</th></tr>"
    )
    for d in sorted(result.dead_letters.queues, key=lambda d: d.queue):
        parked = d.parked_here if d.parked_here is not None else d.already_parked + d.parked_new
        open_here = waiting.get(d.queue, 0) if board is not None else None
        answered = "?" if open_here is None else str(max(0, parked - open_here))
        if d.queue in clear:
            verdict = (
                '<span class="tag ok">Safe to clear</span> '
                f"<code>{escape(clear[d.queue].command)}</code>"
            )
        else:
            verdict = f'<span class="tag warn">not yet</span> {escape(_not_yet(d, open_here))}'
        lines.append(
            f"<tr><td><code>{escape(d.queue)}</code></td><td class=num>{d.depth}</td>"
            f"<td class=num>{parked}</td><td class=num>{answered}</td><td>{verdict}</td></tr>"
        )
    lines.append("</table>")
    lines.append("<p class=muted>The reaper never clears a queue: that act is yours.</p>")
    return lines


def _not_yet(d: DeadLetterOutcome, open_here: int | None) -> str:
    """Why a dead-letter queue is not safe to clear yet."""
    if d.read_blocked:
        return f"not read: {d.read_blocked}"
    if d.depth == 0:
        return "empty"
    if d.unread or d.parked_new:
        return "letters still to park or read"
    if open_here is None:
        return "the gates are not read yet"
    if open_here:
        return f"{open_here} gate(s) still open: reaper gates list --kind dead_letter"
    return "a letter on it is not parked from it"
