"""The pass's report for machines: one JSON object, written verdict by verdict.

One JSON object (SPEC §5): :func:`write_json` writes every verdict, the lease moves as they are
read back from the ledger (while the pass's sources are open), never the whole list in memory;
:func:`to_json` is the same object with the lease moves counted (``lease_reap``) but not
listed."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Final, TextIO

from reaper.core.domain import Condition, Verdict
from reaper.core.moments import utc
from reaper.core.values import display_number
from reaper.edges.wording import next_step
from reaper.errors import SourceUnreadable
from reaper.reap.progress import RecordedVerdict
from reaper.reap.result import PassResult

__all__ = ["iso", "to_json", "verdict_json", "write_json"]


def iso(moment: datetime) -> str:
    """A time in the JSON: UTC, ``Z``, to the millisecond (the text says it to the second)."""
    return utc(moment, "milliseconds")


def verdict_json(
    verdict: Verdict, recorded: bool, applied: bool | None = None
) -> dict[str, object]:
    """One verdict as ``--json`` lists it; ``applied`` (default: as
    :attr:`~reaper.reap.progress.RecordedVerdict.applied` reads it) is true only when its
    write committed."""
    if applied is None:
        applied = RecordedVerdict(verdict, recorded).applied
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
        "applied": applied,
    }


def to_json(result: PassResult, *, verdicts: bool = True) -> dict[str, object]:
    """The report object of SPEC §5, its verdicts all but the lease moves (``verdicts`` false:
    an empty verdict list, for :func:`write_json` to stream into); the lease moves counted in
    ``lease_reap``."""
    inventory = result.inventory()
    target = result.target
    return {
        "ok": result.ok,
        "status": result.status(),
        "dry_run": result.dry_run,
        "started_at": iso(result.started_at),
        "finished_at": iso(result.finished_at),
        "target": (
            {
                "database": target.database_parts(),
                "vhost": target.vhost,
                "management_urls": list(target.management_urls),
            }
            if target
            else None
        ),
        "inventory": {
            "jobs": inventory.jobs,
            "projects": inventory.projects,
            "expired_leases": inventory.expired_leases,
            "queues_owned": inventory.queues_owned,
            "queues_foreign": inventory.queues_foreign,
            "dead_letter_queues": inventory.dead_letter_queues,
        },
        "broker": _broker_json(result),
        "dispatch": (
            {"in_force": result.dispatch.mode.value, "why": result.dispatch.why}
            if result.dispatch
            else None
        ),
        "verdicts": (
            [verdict_json(r.verdict, r.recorded, r.applied) for r in result.verdicts]
            if verdicts
            else []
        ),
        "lease_reap": _lease_reap_json(result),
        "policies": [_attributes(p, _POLICY_KEYS) for p in result.policies.outcomes],
        "dead_letters": [_attributes(d, _DEAD_LETTER_KEYS) for d in result.dead_letters.queues],
        "unreadable": [
            {"source": u.source, "queue": u.queue, "error": u.error} for u in result.unreadable
        ],
        "management_urls": [
            {"url": e.url, "answered": e.answered, "error": e.error} for e in result.management
        ],
        # SPEC §5's `failed`: each write the pass meant to make and did not (or cannot know
        # whether it did), and each metrics export that failed
        "failed": [
            {"kind": p.kind, "subject": p.subject, "reason": p.detail, "fix": p.fix}
            for p in result.problems()
            if p.kind in ("row_not_moved", "outcome_unknown", "not_exported")
        ],
        "problems": [
            {"kind": p.kind, "subject": p.subject, "detail": p.detail, "fix": p.fix}
            for p in result.problems()
        ],
        "findings": _findings_json(result),
        "notes": list(result.notes),
    }


def _lease_reap_json(result: PassResult) -> dict[str, object]:
    """The lease reap, counted: its moves per condition and project, the oldest and newest
    expiry moved, whether they were recorded, and whether ``verdicts`` lists each (``listed``;
    else ``unlisted`` says why and how to list them)."""
    listing = result.leases.listing
    reap = listing.reap
    projects: dict[str, dict[str, int]] = {}
    for (project, poison), n in sorted(reap.moves.items(), key=lambda m: (str(m[0][0]), m[0][1])):
        condition = "poison" if poison else "lease_expired"
        projects.setdefault(str(project), {"lease_expired": 0, "poison": 0})[condition] += n
    counts = listing.counts()
    return {
        "moved": reap.moved,
        "lease_expired": counts.get(Condition.LEASE_EXPIRED, 0),
        "poison": counts.get(Condition.POISON, 0),
        "recorded": listing.recorded and not result.dry_run,
        "oldest_expiry": iso(reap.oldest) if reap.oldest else None,
        "newest_expiry": iso(reap.newest) if reap.newest else None,
        "projects": [{"project_id": p, **n} for p, n in projects.items()],
        "listed": listing.listed == reap.moved,
        "unlisted": listing.unread() if listing.lost is not None and reap.moved else None,
    }


def _broker_json(result: PassResult) -> dict[str, object] | None:
    if not result.broker:
        return None
    nodes = result.broker.nodes
    return {
        "product": result.broker.product,
        "version": result.broker.version,
        "capabilities": result.broker.capabilities(),
        "nodes": (
            [{"name": n.name, "running": n.running} for n in nodes] if nodes is not None else None
        ),
    }


#: The keys of each policy in the report, in order: each its outcome's attribute of that name.
_POLICY_KEYS: Final = (
    "name",
    "action",
    "verified",
    "reason",
    "queues_checked",
    "queues_failing",
    "detail",
    "write",
    "change",
    "unenforceable",
)

#: The keys of each owned dead-letter queue in the report, likewise.
_DEAD_LETTER_KEYS: Final = (
    "queue",
    "depth",
    "parked_new",
    "already_parked",
    "unread",
    "read_blocked",
    "stale_pointers",
    "bodies_read",
)


def _attributes(outcome: object, keys: tuple[str, ...]) -> dict[str, object]:
    """``outcome``'s attributes named ``keys``, under their own names (a tuple as a list)."""
    values = {key: getattr(outcome, key) for key in keys}
    return {key: list(v) if isinstance(v, tuple) else v for key, v in values.items()}


def _findings_json(result: PassResult) -> list[dict[str, object]]:
    aimed: list[dict[str, object]] = [
        {
            "condition": t.condition,
            "subject": t.subject,
            "project_id": None,
            "measured": 0,
            "threshold": None,
            "unit": "queues",
            "next_step": t.next_step,
            "recorded": False,
            "since": None,
            "detail": t.detail,
        }
        for t in result.target_findings()
    ]
    return aimed + [
        {
            "condition": r.verdict.condition.value,
            "subject": r.verdict.subject,
            "project_id": str(r.verdict.project_id) if r.verdict.project_id else None,
            "measured": display_number(r.verdict.measured),
            "threshold": display_number(r.verdict.threshold),
            "unit": r.verdict.unit.value,
            "next_step": next_step(r.verdict),
            "recorded": r.recorded,
            "since": (
                iso(result.sightings.since[r.verdict.sighting_key])
                if r.verdict.sighting_key in result.sightings.since
                else None
            ),
        }
        for r in result.findings()
    ]


async def write_json(result: PassResult, out: TextIO) -> None:
    """The report written to ``out``, every verdict encoded as it is read: the lease moves
    first, read back from the ledger (only while the pass's sources are open: the pass's
    ``report`` consumer calls this), then the rest. A listing that cannot be read (or is cut
    short) says so in ``lease_reap`` and ``notes``; a dry run's that lists other than it
    counted says so in ``notes``."""
    report = to_json(result, verdicts=False)
    said: list[str] = []
    out.write("{")
    for n, (key, value) in enumerate(report.items()):
        out.write(("," if n else "") + "\n  " + json.dumps(key) + ": ")
        if key == "verdicts":
            said = await _write_verdicts(result, out)
            continue
        if key == "lease_reap":
            value = _lease_reap_json(result)  # as the listing ended
        elif key == "notes":
            value = [*value, *said]  # type: ignore[misc]
        out.write(_indented(value, "  "))
    out.write("\n}\n" if report else "}\n")


async def _write_verdicts(result: PassResult, out: TextIO) -> list[str]:
    """The verdict list, streamed; what is to be said of the lease moves' listing."""
    listing = result.leases.listing
    empty = True

    def write(r: RecordedVerdict) -> None:
        nonlocal empty
        out.write(("[" if empty else ",") + "\n    ")
        out.write(_indented(verdict_json(r.verdict, r.recorded, r.applied), "    "))
        empty = False

    try:
        async for r in listing:
            write(r)
    except SourceUnreadable as exc:
        listing.lost = exc.reason
    said = [listing.unread()] if listing.lost is not None and listing.reap.moved else []
    changed = listing.changed()
    said += [changed] if changed else []
    for r in result.verdicts:
        write(r)
    out.write("[]" if empty else "\n  ]")
    return said


def _indented(value: object, pad: str) -> str:
    # a newline inside a JSON string is escaped: every newline is the encoder's own
    return json.dumps(value, indent=2).replace("\n", "\n" + pad)
