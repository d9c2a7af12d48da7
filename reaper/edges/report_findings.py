"""The report's Findings, worst first, one line each.

The report's Findings, worst first: one line each, the measurement against its threshold
said once per condition and the next step said once; findings that share a condition, a next
step and their standing in the ledger are one line with their count and names (each with its
measurement), at the place of the worst of them. ``-o wide`` lists each on its own line with
its detail."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from reaper.core.domain import Condition
from reaper.core.terminal import one_line
from reaper.edges.wording import measure, next_step, where
from reaper.reap.progress import RecordedVerdict

__all__ = ["finding_lines"]

#: A group's line names this many findings; ``-o wide`` lists each.
_NAMED: Final = 3
#: Past this width a group's next step goes on its own line, read at 3 a.m. on a terminal.
_WIDTH: Final = 150

#: How a finding's sighting stands (``new``, ``seen since 09:12Z``...), as the report says it.
State = Callable[[RecordedVerdict], str]


def finding_lines(findings: Sequence[RecordedVerdict], state: State, *, wide: bool) -> list[str]:
    """The Findings section's lines (without its heading)."""
    steps = [next_step(r.verdict) for r in findings]
    states = [state(r) for r in findings]
    groups: dict[tuple[Condition, str, str], list[RecordedVerdict]] = {}
    if not wide:
        for r, step, standing in zip(findings, steps, states, strict=True):
            if step:
                groups.setdefault((r.verdict.condition, step, standing), []).append(r)
    lines: list[str] = []
    thresholds: set[object] = set()
    said: set[str] = set()
    for r, step, standing in zip(findings, steps, states, strict=True):
        v = r.verdict
        group = groups.get((v.condition, step, standing), [])
        if len(group) > 1:
            if group[0] is r:  # the group's line, where its worst finding stands
                lines.append(_group_line(group, standing))
                said.add(step)
            continue
        # a next step, and a condition's threshold, said once: on the first that has it
        shown = "" if not step or step in said else f"; {step}"
        said.add(step)
        bound = (v.condition, v.threshold, v.unit)
        first = wide or bound not in thresholds
        thresholds.add(bound)
        lines.append(
            f"  {v.condition.value:<12} {where(v, wide=wide)}: "
            f"{measure(v, threshold=first)}{shown}  [{standing}]"
        )
        if wide and v.detail:
            lines.append(f"  {'':<12} {one_line(v.detail)}")
    return lines


def _group_line(group: Sequence[RecordedVerdict], standing: str) -> str:
    """Findings of one condition, next step and standing: the count, each name with its
    measurement, the threshold and the step once."""
    verdicts = [r.verdict for r in group]
    queues = all(v.queue and v.object == v.queue for v in verdicts)
    names = [
        f"{one_line(v.queue) if queues and v.queue else where(v)}"
        + (f" {m}" if (m := measure(v, threshold=False)) else "")
        for v in verdicts
    ]
    full, bare = measure(verdicts[0]), measure(verdicts[0], threshold=False)
    threshold = full[len(bare) :] if full.startswith(bare) else ""
    what = "queues" if queues else "findings"
    more = len(names) - _NAMED
    listed = ", ".join(names[:_NAMED]) + (
        f" and {more} more (-o wide lists each)" if more > 0 else ""
    )
    head = f"  {verdicts[0].condition.value:<12} {len(group)} {what}: {listed}{threshold}"
    step = next_step(verdicts[0], many=True)  # the same step, said of them all
    line = f"{head}; {step}  [{standing}]"
    if len(line) <= _WIDTH:
        return line
    return f"{head}  [{standing}]\n  {'':<12} {step}"
