"""What a pass did, as the report's ``Done`` lists it: lease moves, parks, dead letters.

What a pass did, as the report's ``Done`` (a dry run: ``Would do``) lists it: lease moves,
parks and dead letters parked, each park with its gate and the command that answers it.

Lease moves, routine by the thousand, are summarised per condition beyond
:data:`LISTED_MOVES`: the count, the projects with the most, and the first few jobs; every
verdict stays in the ledger. A park is never cut off from its gate: a summary names the gate of
each job it lists and gives the one command that lists every gate the pass raised (each was
raised at the pass's instant, so ``gates list --since`` that instant selects them), and the one
that answers them all; ``-o wide`` names every park and its whole gate id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core.domain import Action, Condition, Verdict
from reaper.core.judge_leases import RULING_KINDS
from reaper.edges.wording import LEASE_CONDITIONS, age, measure, short, utc, where
from reaper.reap.leases import SAMPLED_MOVES, LeaseListing
from reaper.reap.progress import RecordedVerdict

__all__ = ["LISTED_MOVES", "LeaseMoves", "acted_lines", "joined", "raised_since"]

#: Lease moves of one condition listed one line each up to this many; beyond, summarised
#: (the pass reads back as many of each as the short report lists).
LISTED_MOVES: Final = SAMPLED_MOVES
#: In a summary, the jobs listed (the first judged) and the projects named (the most moves).
SUMMARY_JOBS: Final = 5
SUMMARY_PROJECTS: Final = 5
#: The gates a queue's dead-letter parks name on their one line before a command lists them.
LISTED_GATES: Final = 10

#: The answers each kind of park takes: the usual one first.
_CHOICES: Final = {
    Condition.POISON: ("retry", "cancel"),
    Condition.DEAD_LETTER: ("replay", "dismiss"),
}

#: What a lease move of each condition does.
_ACTIONS: Final = {condition: action for condition, action in RULING_KINDS.values()}


def raised_since(started_at: datetime) -> str:
    """The ``--since`` that selects the gates a pass raised: its instant to the millisecond,
    cut down (never rounded up past the instant the gates carry)."""
    return utc(started_at, "milliseconds")


def joined(items: Sequence[str], head: str, pad: str, width: int = 150) -> list[str]:
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


def _gate(gate: UUID, wide: bool) -> str:
    return str(gate) if wide else short(gate)


def acted_line(v: Verdict, wide: bool = False, gates: Mapping[str, UUID] | None = None) -> str:
    """One move on one line; a park with its gate and the command that answers it."""
    # A parked letter's verdict measures its queue's depth, not the letter: not quoted here.
    letter = v.condition is Condition.DEAD_LETTER and v.object != v.queue
    measured = "" if letter else measure(v)
    line = f"  {v.action.value:<8} {v.condition.value:<13} {where(v, wide=wide)}" + (
        f": {measured}" if measured else ""
    )
    gate = (gates or {}).get(v.object) if v.action is Action.PARK else None
    if gate is not None:
        # the usual answer, pasteable, and the other one the gate takes
        choice, other = _CHOICES.get(v.condition, _CHOICES[Condition.DEAD_LETTER])
        named = _gate(gate, wide)
        line += f"; gate {named}: reaper gates answer {named} --choice {choice} (or {other})"
    return line


def acted_lines(
    acted: Sequence[RecordedVerdict], gates: Mapping[str, UUID], wide: bool, since: str
) -> list[str]:
    """Moves that are not lease moves, one line each; in the short form a queue's dead-letter
    parks are one line, with their gates (past :data:`LISTED_GATES`, the first few and the
    command that lists them all)."""
    if wide:
        return [acted_line(r.verdict, True, gates) for r in acted]
    groups: dict[tuple[str, str, str | None], list[Verdict]] = {}
    for r in acted:
        v = r.verdict
        groups.setdefault((v.action.value, v.condition.value, v.queue), []).append(v)
    lines: list[str] = []
    for (action, condition, queue), verdicts in groups.items():
        if len(verdicts) == 1 or queue is None:
            lines += [acted_line(v, False, gates) for v in verdicts]
            continue
        shown = [short(gates[v.object]) for v in verdicts if v.object in gates]
        head = f"  {action:<8} {condition:<13} {len(verdicts)} letters from queue {queue}"
        if not shown:
            lines.append(head)
        elif len(shown) <= LISTED_GATES:
            lines.append(
                f"{head}; gates {', '.join(shown)}: reaper gates answer ID --choice replay|dismiss"
            )
        else:
            lines.append(f"{head}; gates {', '.join(shown[:SUMMARY_JOBS])} and more")
            lines += _all_gates(Condition.DEAD_LETTER, since)
    return lines


def _all_gates(condition: Condition, since: str) -> list[str]:
    """The one command that lists every gate of ``condition`` a pass raised, and the one
    that answers them all (it shows them and asks before it writes)."""
    kind = condition.value
    choice, other = _CHOICES[condition]
    pad = " " * 25  # under the summary's own lines
    return [
        f"{pad}their gates: reaper gates list --kind {kind} --since {since} (with any raised "
        "since)",
        f"{pad}answer them at once: reaper gates answer --kind {kind} --since {since} "
        f"--choice {choice} (or {other})",
    ]


class LeaseMoves:
    """Lease moves (requeues, parks) per condition: the counts as the pass counted them (per
    project, and how long ago the newest and the oldest moved lease expired), and the first few
    read back (all of them while there are no more than :data:`LISTED_MOVES`; ``wide``: every
    one given)."""

    def __init__(
        self,
        listing: LeaseListing,
        now: datetime,
        wide: bool = False,
        gates: Mapping[str, UUID] | None = None,
        dry_run: bool = False,
        since: str = "",
    ) -> None:
        self.wide = wide
        self.dry_run = dry_run
        self.gates = gates or {}
        self.since = since
        # a pass that wrote nothing (its ledger unread) did none of them
        self.per_condition = listing.counts() if dry_run or listing.recorded else {}
        self.count = sum(self.per_condition.values())
        self.projects: dict[Condition, Counter[UUID | None]] = {}
        for (project, poison), n in listing.reap.moves.items():
            self.projects.setdefault(RULING_KINDS[poison][0], Counter())[project] += n
        #: per condition, how long ago the newest and the oldest moved lease expired
        self.span = {
            RULING_KINDS[poison][0]: (
                (now - newest).total_seconds(),
                (now - oldest).total_seconds(),
            )
            for poison, (oldest, newest) in listing.reap.spans.items()
        }
        self.first: dict[Condition, list[Verdict]] = {}

    def add(self, r: RecordedVerdict) -> None:
        """One move read back: kept to be listed (the first few of its condition)."""
        v = r.verdict
        first = self.first.setdefault(v.condition, [])
        if self.wide or len(first) < LISTED_MOVES:  # wide: every move, one line each
            first.append(v)

    def lines(self) -> list[str]:
        out: list[str] = []
        for condition in LEASE_CONDITIONS:
            count = self.per_condition.get(condition, 0)
            if not count:
                continue
            first = self.first.get(condition, [])
            if len(first) < min(count, LISTED_MOVES):  # not read back: counted alone
                out += self._summary(condition, count, first)
                continue
            if self.wide or (
                count <= LISTED_MOVES and (count == 1 or condition is Condition.POISON)
            ):
                out += [acted_line(v, self.wide, self.gates) for v in first]
                continue
            if count <= LISTED_MOVES:
                # a few requeues on one line: each job and how long ago its lease expired
                shown = [f"{short(v.object)} {age(v.measured or 0)}" for v in first]
                verb = first[0].action.value
                head = f"  {verb:<8} {condition.value:<13} {count} jobs, expired ago: "
                out += joined(shown, head, " " * len(head))
                continue
            out += self._summary(condition, count, first)
        return out

    def _summary(self, condition: Condition, count: int, first: list[Verdict]) -> list[str]:
        action = _ACTIONS[condition].value
        projects = self.projects[condition]
        top = sorted(projects.items(), key=lambda item: (-item[1], str(item[0])))
        named = ", ".join(f"{short(p)} {n}" for p, n in top[:SUMMARY_PROJECTS])
        seen = self.span.get(condition)
        span = "" if seen is None else f", expired {age(seen[0])} to {age(seen[1])} ago"
        rest = len(top) - SUMMARY_PROJECTS
        out = [
            f"  {action:<8} {condition.value:<13} {count} job(s) in {len(projects)} project(s)"
            + span,
            f"  {'':<22} by project: {named}"
            + (f", and {rest} more project(s)" if rest > 0 else ""),
        ]
        for v in first[:SUMMARY_JOBS]:
            gate = self.gates.get(v.object)
            named_gate = f"; gate {short(gate)}" if gate is not None else ""
            out.append(f"  {'':<22} {where(v)}: {measure(v)}{named_gate}")
        return out + self._rest(condition, count - len(first[:SUMMARY_JOBS]))

    def _rest(self, condition: Condition, rest: int) -> list[str]:
        """What is said of the ``rest`` of the moves a summary does not list: where to see
        each."""
        count = self.per_condition[condition]
        pad = " " * 25  # under the summary's own lines
        if self.dry_run:
            return [
                f"{pad}{rest} more not listed here: `reaper reap --dry-run -o wide` lists every "
                "one; a real pass would record each as a QueueReaped event"
            ]
        ledger = (
            f"each is a QueueReaped event in the ledger: reaper events --condition "
            f"{condition.value} --limit {count}"
        )
        if condition is not Condition.POISON or not self.gates or not self.since:
            return [f"{pad}{rest} more not listed here; {ledger}"]
        return [
            f"{pad}{rest} more not listed here; {ledger}",
            *_all_gates(condition, self.since),
        ]
