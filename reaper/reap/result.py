"""The result of one pass, and the one list of what made it not ok.

The result of one pass (SPEC §5): what the CLI prints, the metrics export and the worker hook
logs, and the one list of what made it not ok."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.broker.port import ManagementEndpoint, QueuesByVhost
from reaper.core.bounds import is_dead_letter_queue, is_owned_queue
from reaper.core.domain import (
    Action,
    BrokerFacts,
    ClaimableHead,
    Condition,
    QueueStats,
    Thresholds,
)
from reaper.core.head_age import quote
from reaper.core.terminal import first_few
from reaper.jobqueue.dispatch import DispatchInForce
from reaper.reap.dead_letters import DeadLettersOutcome
from reaper.reap.leases import LeaseReapOutcome
from reaper.reap.listing import QuietQueues
from reaper.reap.policies import PoliciesOutcome
from reaper.reap.progress import RecordedVerdict, RowNotMoved, Unreadable
from reaper.reap.sightings import GatesOutcome, SightingsOutcome

__all__ = ["SEVERITY", "Inventory", "PassResult", "Problem", "Target", "TargetFinding"]


#: What a person does about a broker that answered a read slower than the pass waits: one page
#: of a vhost of 25,000 queues took 1.6 to 9.7 s on a loaded RabbitMQ node (it sorts the whole
#: vhost for every page), against the default timeout of 10 s.
SLOW_READ_FIX: Final = (
    "the broker answered slower than bus.timeout_seconds (a vhost of many queues, or a loaded "
    "node): raise it (REAPER_BUS__TIMEOUT_SECONDS) and run reaper reap again"
)


@dataclass(frozen=True)
class Problem:
    """One thing that made a pass not ok, for a person (:meth:`line`) and a machine (the
    report's ``problems``). ``kind``: ``unreadable``, ``row_not_moved`` (a write that did not
    commit: NOT DONE), ``outcome_unknown``, ``policy``, ``dead_letter`` or ``would_drop`` (an
    owned queue whose broker would drop messages), ``not_exported`` (the pass's metrics not
    written or pushed) or ``stopped`` (a signal ended the pass early). ``fix``: what a person
    does, when known."""

    kind: str
    subject: str
    detail: str
    fix: str = ""

    @property
    def label(self) -> str:
        return _LABELS.get(self.kind, self.kind.upper())

    def line(self) -> str:
        return f"{self.label:<11} {self.subject}: {self.detail}"


def _unreadable_problems(unreadable: Sequence[Unreadable]) -> list[Problem]:
    """A problem for each source not read, and one for each reason queues could not be
    measured: several queues on one stopped node are one line that counts them and names
    the first few, not a line a queue (a node of thousands of queues would flood the report;
    the JSON's ``unreadable`` still lists each)."""
    queues: dict[tuple[str, str], list[str]] = {}
    found: list[Problem] = []
    for u in unreadable:
        if u.queue is None:
            fix = SLOW_READ_FIX if u.source == "broker" and "timed out after" in u.error else ""
            found.append(Problem("unreadable", u.source, u.error, fix))
        else:
            queues.setdefault((u.source, u.error), []).append(u.queue)
    for (_, error), names in queues.items():
        if len(names) == 1:
            found.append(Problem("unreadable", f"queue {names[0]!r}", error))
            continue
        each = first_few(names, quote)
        found.append(Problem("unreadable", f"{len(names):,} queues", f"each of {each}: {error}"))
    return found


@dataclass(frozen=True)
class TargetFinding:
    """A finding about where the pass was pointed, not a verdict on what it measured (it is
    not on the ledger): ``condition`` (``no_owned_queue``), the subject, what was seen, and
    the next step."""

    condition: str
    subject: str
    detail: str
    next_step: str


#: How each kind of problem is labelled in the human report.
_LABELS: Final = {
    "unreadable": "UNREADABLE",
    "row_not_moved": "NOT DONE",
    "outcome_unknown": "UNKNOWN",
    "policy": "POLICY",
    "dead_letter": "DEAD LETTER",
    "would_drop": "WOULD DROP",
    "stopped": "STOPPED",
    "not_exported": "NOT EXPORTED",
}

#: How a kind of problem is counted in the header's ``NOT OK: <why>`` (singular, plural).
_WHY: Final = {
    "unreadable": ("source unreadable", "sources unreadable"),
    "unreadable_queue": ("queue unreadable", "queues unreadable"),
    "row_not_moved": ("write not done", "writes not done"),
    "outcome_unknown": ("write outcome unknown", "write outcomes unknown"),
    "policy": ("policy not in force", "policies not in force"),
    "dead_letter": ("dead-letter queue not read", "dead-letter queues not read"),
    "would_drop": ("queue would drop messages", "queues would drop messages"),
    "not_exported": ("metrics export failed", "metrics exports failed"),
    "stopped": ("stopped early", "stopped early"),
}

#: Findings worst first: what holds work now, then what loses it later, then what waits.
SEVERITY: Final = (
    Condition.HUNG_HANDLER,
    Condition.HOLDER_GONE,
    Condition.POISON,
    Condition.LEASE_EXPIRED,
    Condition.DEAD_LETTER,
    Condition.UNBOUNDED,
    Condition.STALE_READY,
)


@dataclass(frozen=True)
class Target:
    """What the pass was pointed at: the database (``host:port/name``), the vhost, and each
    management URL that answered."""

    database: str
    vhost: str
    management_urls: tuple[str, ...] = ()

    def database_parts(self) -> dict[str, object]:
        where, _, name = self.database.partition("/")
        host, _, port = where.rpartition(":")
        return {
            "host": host or None,
            "port": int(port) if port.isdigit() else None,
            "name": name or None,
        }


@dataclass(frozen=True)
class Inventory:
    """What one pass read (None: that source was not read). ``jobs``: the jobs it judged, the
    expired leases and each project's oldest claimable job (a pass never counts the whole
    table); ``projects``: the projects with claimable work."""

    jobs: int | None
    projects: int | None
    expired_leases: int | None
    queues_owned: int | None
    queues_foreign: int | None
    dead_letter_queues: int | None


@dataclass(frozen=True)
class PassResult:
    dry_run: bool
    started_at: datetime
    finished_at: datetime
    broker: BrokerFacts | None
    #: Every verdict but the lease moves (those are counted and read back from the ledger:
    #: ``leases.listing``); the only ones that can surface a finding.
    verdicts: tuple[RecordedVerdict, ...]
    #: Each step's outcome, as the step returned it.
    leases: LeaseReapOutcome = field(default_factory=LeaseReapOutcome)
    policies: PoliciesOutcome = field(default_factory=PoliciesOutcome)
    dead_letters: DeadLettersOutcome = field(default_factory=DeadLettersOutcome)
    #: The open gate of each job this pass parked, for the answer command.
    gates: GatesOutcome = field(default_factory=GatesOutcome)
    #: When each finding already on record (``seen``) opened its sighting, by sighting key.
    sightings: SightingsOutcome = field(default_factory=SightingsOutcome)
    unreadable: tuple[Unreadable, ...] = ()
    notes: tuple[str, ...] = ()
    #: Queues as measured and kept, for metrics (bounded labels) and the report.
    queues: tuple[QueueStats, ...] = ()
    #: The queues listed and not kept (judged with nothing to say), as counts; those listed
    #: without their statistics by name.
    quiet: QuietQueues = field(default_factory=QuietQueues)
    #: The oldest claimable job of every project measured, for the per-project age gauge.
    claimable: tuple[ClaimableHead, ...] = ()
    project_id: UUID | None = None
    #: What the pass meant to write and could not (or cannot know whether it did).
    not_moved: tuple[RowNotMoved, ...] = ()
    #: How the host dispatches, as this pass found it (None: the job queue was not read).
    dispatch: DispatchInForce | None = None
    #: Each management URL in force and how it fared, in order of preference.
    management: tuple[ManagementEndpoint, ...] = ()
    #: What the pass was pointed at (None: a result built without settings).
    target: Target | None = None
    #: The thresholds judged against, for the inventory (owned and dead-letter queues).
    thresholds: Thresholds | None = None
    #: When the vhost holds no owned queue: the other vhosts that do (a finding).
    owned_elsewhere: QueuesByVhost = field(default_factory=lambda: QueuesByVhost({}))
    #: Exports of this pass's metrics that failed (``--metrics-textfile``, ``--pushgateway``):
    #: each (where, why, fix), added once the export was tried, before the report is printed.
    not_exported: tuple[tuple[str, str, str], ...] = ()
    #: What asked the pass to stop before its end (``SIGTERM``, ``SIGINT``), None: nothing.
    stopped: str | None = None

    @property
    def ok(self) -> bool:
        """The reaper did its whole job: every source read, every write committed, every
        declared policy the broker accepts and enforces in force, no owned queue that would
        drop a message. Findings (what the broker cannot enforce among them) do not make a
        pass not ok."""
        return not self.problems()

    def status(self) -> str:
        """``OK``, ``OK, N findings`` or ``NOT OK: <why>``, as the header says it."""
        problems = self.problems()
        if problems:
            # the unreadable counted from what was unreadable (several queues may be one
            # problem line), each source and each queue once
            kinds = Counter(
                {
                    "unreadable": len({u.source for u in self.unreadable if u.queue is None}),
                    "unreadable_queue": len({u.queue for u in self.unreadable if u.queue}),
                }
            )
            kinds.update(kind for kind, _ in _once(problems) if kind != "unreadable")
            why = ", ".join(f"{n} {_WHY.get(k, (k, k))[n != 1]}" for k, n in kinds.items() if n > 0)
            return f"NOT OK: {why}"
        n = len(self.findings()) + len(self.target_findings())
        return "OK" if not n else f"OK, {n} finding{'s' if n != 1 else ''}"

    def findings(self) -> list[RecordedVerdict]:
        """The surfaced verdicts that do not make the pass not ok, worst first (a queue that
        would drop is a problem, listed with the problems instead)."""
        rank = {c: i for i, c in enumerate(SEVERITY)}
        found = [r for r in self.surfaced() if not r.verdict.drops]
        return sorted(
            found,
            key=lambda r: (
                rank.get(r.verdict.condition, len(rank)),
                -(r.verdict.measured or 0),
                r.verdict.subject,
            ),
        )

    def inventory(self) -> Inventory:
        """What the pass read, as counted from its own measurements."""
        owned, foreign, dead = self.quiet.owned, self.quiet.foreign, self.quiet.dead_letter
        for name in itertools.chain((q.name for q in self.queues), self.quiet.without_statistics):
            mine = self.thresholds is None or is_owned_queue(name, self.thresholds)
            owned, foreign = owned + mine, foreign + (not mine)
            dead += self.thresholds is not None and is_dead_letter_queue(name, self.thresholds)
        expired = self.leases.expired
        read = expired is not None
        return Inventory(
            jobs=(expired or 0) + len(self.claimable) if read else None,
            projects=len({c.project_id for c in self.claimable}) if read else None,
            expired_leases=expired,
            queues_owned=owned if self.broker else None,
            queues_foreign=foreign if self.broker else None,
            dead_letter_queues=dead if self.broker else None,
        )

    def surfaced(self) -> Iterator[RecordedVerdict]:
        """The verdicts that surface a finding. A lease verdict never does (the lease reap
        requeues or parks), so the lease moves are not read back for them: the metrics
        collector asks on every scrape."""
        return (r for r in self.verdicts if r.verdict.action is Action.SURFACE)

    @property
    def verdict_count(self) -> int:
        """Every verdict of the pass: the lease moves (counted) and the rest."""
        return self.leases.listing.reap.moved + len(self.verdicts)

    @property
    def duration_seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    def problems(self) -> list[Problem]:
        """Everything that made this pass not ok, in the order a person should read it: the
        sources (and broker queues) it could not read, the writes it could not make, the
        policies not in force, the dead-letter queues it could not read safely. Empty: the pass
        is ok."""
        found = _unreadable_problems(self.unreadable)
        found += [
            Problem("outcome_unknown" if r.unknown else "row_not_moved", r.subject, r.reason, r.fix)
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
            for p in self.policies.outcomes
            if not p.ok and not (self.dry_run and p.planned)
        ]
        found += [
            Problem("dead_letter", d.queue, f"not read - {d.read_blocked}")
            for d in self.dead_letters.queues
            if d.read_blocked
        ]
        found += [
            Problem("would_drop", f"queue {r.verdict.subject}", *_fix(r.verdict.detail))
            for r in self.surfaced()
            if r.verdict.drops
        ]
        found += [Problem("not_exported", *export) for export in self.not_exported]
        if self.stopped is not None:
            found.append(
                Problem(
                    "stopped",
                    "the pass",
                    f"stopped by {self.stopped} before its end: what it did is reported here",
                    "run reaper reap again (or let reaper serve's next turn run) to finish",
                )
            )
        return found

    def target_findings(self) -> list[TargetFinding]:
        """Findings about where the pass was pointed, before the verdicts': the vhost holds
        no owned queue and vhosts the user may read do. A finding, not a failure: a vhost
        whose queues are not declared yet is a deployment's first day."""
        elsewhere = self.owned_elsewhere.counts
        if not elsewhere or self.target is None or self.thresholds is None:
            return []
        ranked = sorted(elsewhere.items(), key=lambda item: (-item[1], item[0]))
        if len(ranked) == 1:
            held = f"vhost {ranked[0][0]!r} holds {ranked[0][1]}"
        else:
            named = first_few(ranked, lambda held: f"{held[0]!r} ({held[1]})")
            held = f"vhosts {named} hold them"
        if not self.owned_elsewhere.complete:
            held += " (a count cut short: not every vhost was counted)"
        best = ranked[0][0]
        return [
            TargetFinding(
                "no_owned_queue",
                f"vhost {self.target.vhost!r}",
                f"no queue matches the owned pattern '{self.thresholds.owned_queue_pattern}'; "
                f"{held}",
                f"if the reaper is meant for them, point it there: REAPER_BUS__VHOST={best} (or "
                f'[bus] vhost = "{best}"), then run reaper doctor',
            )
        ]


def _once(problems: list[Problem]) -> dict[tuple[str, str], None]:
    """Each (kind, subject) once: a source whose reads failed twice is one source unreadable."""
    return dict.fromkeys((p.kind, p.subject) for p in problems)


def _fix(detail: str) -> tuple[str, str]:
    """A finding's detail and the fix it ends with (``...; fix: ...``), apart."""
    said, _, fix = detail.partition("; fix: ")
    return said, fix
