"""The result of one pass (SPEC §5): what the CLI prints, the metrics export and the worker hook
logs, and the one list of what made it not ok."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.broker.port import ManagementEndpoint
from reaper.core.domain import Action, BrokerFacts, ClaimableHead, QueueStats
from reaper.policies.reconcile import PolicyOutcome
from reaper.reap.dead_letters import DeadLetterOutcome
from reaper.reap.dispatch import DispatchInForce
from reaper.reap.lease_log import VerdictLog
from reaper.reap.progress import RecordedVerdict, RowNotMoved, Unreadable

__all__ = ["PassResult", "Problem"]


@dataclass(frozen=True)
class Problem:
    """One thing that made a pass not ok, for a person (:meth:`line`) and a machine (the
    report's ``problems``). ``kind``: ``unreadable``, ``row_not_moved``, ``outcome_unknown``,
    ``policy`` or ``dead_letter``."""

    kind: str
    subject: str
    detail: str

    def line(self) -> str:
        return f"{_LABELS.get(self.kind, self.kind.upper()):<11} {self.subject}: {self.detail}"


#: How each kind of problem is labelled in the human report.
_LABELS: Final = {
    "unreadable": "UNREADABLE",
    "row_not_moved": "FAILED ROW",
    "outcome_unknown": "UNKNOWN",
    "policy": "POLICY",
    "dead_letter": "DEAD LETTER",
}


@dataclass(frozen=True)
class PassResult:
    dry_run: bool
    started_at: datetime
    finished_at: datetime
    broker: BrokerFacts | None
    #: Every verdict: a pass's own is a :class:`~reaper.reap.lease_log.VerdictLog` (its lease
    #: verdicts spooled, read back as they are iterated), any sequence otherwise.
    verdicts: Sequence[RecordedVerdict]
    policies: tuple[PolicyOutcome, ...] = ()
    dead_letters: tuple[DeadLetterOutcome, ...] = ()
    unreadable: tuple[Unreadable, ...] = ()
    notes: tuple[str, ...] = ()
    #: Queues as measured, for metrics (bounded labels) and the report.
    queues: tuple[QueueStats, ...] = ()
    #: The oldest claimable job of every project measured, for the per-project age gauge.
    claimable: tuple[ClaimableHead, ...] = ()
    project_id: UUID | None = None
    #: What the pass meant to write and could not (or cannot know whether it did).
    not_moved: tuple[RowNotMoved, ...] = ()
    #: How the host dispatches, as this pass found it (None: the job queue was not read).
    dispatch: DispatchInForce | None = None
    #: Each management URL in force and how it fared, in order of preference.
    management: tuple[ManagementEndpoint, ...] = ()
    #: Expired leases the lease reap left when its time budget was spent: while any remain,
    #: the next turn comes at once (``reaper serve``, the worker hook), not after the interval.
    leases_remaining: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems()

    def surfaced(self) -> Iterator[RecordedVerdict]:
        """The verdicts that surface a finding. A lease verdict never does (the lease reap
        requeues or parks), so a pass's spooled lease verdicts are not read back for them: the
        metrics collector asks on every scrape."""
        verdicts = self.verdicts.others if isinstance(self.verdicts, VerdictLog) else self.verdicts
        return (r for r in verdicts if r.verdict.action is Action.SURFACE)

    @property
    def duration_seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    def problems(self) -> list[Problem]:
        """Everything that made this pass not ok, in the order a person should read it: the
        sources (and broker queues) it could not read, the writes it could not make, the
        policies not in force, the dead-letter queues it could not read safely. Empty: the pass
        is ok."""
        found = [
            Problem("unreadable", u.source if u.queue is None else f"queue {u.queue!r}", u.error)
            for u in self.unreadable
        ]
        found += [
            Problem("outcome_unknown" if r.unknown else "row_not_moved", r.subject, r.reason)
            for r in self.not_moved
        ]
        found += [
            Problem(
                "policy",
                p.name,
                f"{p.action}, {'verified' if p.verified else 'NOT verified'}"
                + (f" ({p.reason})" if p.reason else "")
                + f" - {p.detail}",
            )
            for p in self.policies
            if not p.ok
        ]
        found += [
            Problem("dead_letter", d.queue, f"not read - {d.read_blocked}")
            for d in self.dead_letters
            if d.read_blocked
        ]
        return found
