"""The entry point, :func:`check_invariants`, and the ledger's and sightings' checks: gapless
streams, digests, sightings that alternate."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter, defaultdict
from typing import Any

import asyncpg

from reaper.core.canonical import canonical_json
from reaper.core.domain import (
    EVENT_KIND,
)
from tests.support.invariants.expectation import Seeded, Summary
from tests.support.invariants.move_checks import check_broker, check_dead_letter_parks, check_leases
from tests.support.services import BrokerUnderTest


async def check_invariants(
    dsn: str,
    seeded: Seeded,
    broker: BrokerUnderTest | None = None,
    *,
    converged: bool = True,
    read_broker: bool = True,
) -> Summary:
    """Check every invariant (module docstring) over ``dsn`` (and ``broker``'s vhost).

    ``converged``: every seeded episode must have been moved and every dead letter parked
    (else: at most that). ``read_broker``: also read every dead letter back, with
    ``reject_requeue_true`` (do it at the very end: on 3.x a read reorders a quorum queue)."""
    problems: list[str] = []
    summary = Summary()
    conn = await asyncpg.connect(dsn)
    try:
        events = [
            dict(r)
            for r in await conn.fetch(
                "SELECT project_id, seq, kind, payload::text AS payload, digest, trusted, "
                "created_at FROM event ORDER BY project_id, seq"
            )
        ]
        jobs = {
            r["id"]: dict(r)
            for r in await conn.fetch(
                "SELECT id, project_id, kind, state, attempts, max_attempts, lease_owner, "
                "lease_expires_at, run_after, updated_at, idempotency_key FROM job"
            )
        }
        gates = [
            dict(r)
            for r in await conn.fetch(
                "SELECT id, project_id, job_id, kind, identity, created_at, answered_at "
                "FROM human_gate"
            )
        ]
        letters = [
            dict(r)
            for r in await conn.fetch(
                "SELECT identity, job_id, queue, body, body_encoding, body_truncated "
                "FROM dead_letter"
            )
        ]
    finally:
        await conn.close()
    for event in events:
        event["payload"] = json.loads(event["payload"])
    _check_ledger(events, problems)
    # The host may append its own events to the same streams: the reaper's are its QueueReaped
    events = [e for e in events if e["kind"] == EVENT_KIND]
    summary.events = len(events)
    summary.streams = len({e["project_id"] for e in events})

    _check_sightings(events, summary, problems)
    check_leases(events, jobs, gates, seeded, converged, summary, problems)
    check_dead_letter_parks(events, jobs, gates, letters, seeded, converged, summary, problems)
    if broker is not None:
        await check_broker(broker, seeded, letters, read_broker, summary, problems)

    if problems:
        shown = "\n  - ".join(problems[:40])
        more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
        raise AssertionError(f"{len(problems)} invariant violation(s):\n  - {shown}{more}")
    return summary


def _check_ledger(events: list[dict[str, Any]], problems: list[str]) -> None:
    """Every stream gapless and unique, whoever wrote it; every event's digest the sha256 of its
    payload's canonical JSON; every QueueReaped payload complete."""
    by_stream: dict[uuid.UUID, list[int]] = defaultdict(list)
    for event in events:
        by_stream[event["project_id"]].append(event["seq"])
        canonical = canonical_json(event["payload"])
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        if digest != event["digest"]:
            problems.append(
                f"event {event['project_id']}#{event['seq']}: digest {event['digest']} is not "
                f"the sha256 of its payload's canonical JSON ({digest})"
            )
        if event["kind"] != EVENT_KIND:
            continue  # the host's own event
        payload = event["payload"]
        for key in (
            "object",
            "queue",
            "source",
            "condition",
            "measured",
            "threshold",
            "unit",
            "action",
            "detail",
        ):
            if key not in payload:
                problems.append(f"event {event['project_id']}#{event['seq']}: no {key!r}")
    for stream, seqs in by_stream.items():
        if seqs != list(range(1, len(seqs) + 1)):
            gaps = sorted(set(range(1, max(seqs) + 1)) - set(seqs))[:10]
            problems.append(
                f"stream {stream}: seqs not gapless 1..{len(seqs)} (missing {gaps}, "
                f"duplicates {[s for s, n in Counter(seqs).items() if n > 1][:10]})"
            )


def _sighting_scope(stream: uuid.UUID, payload: dict[str, Any]) -> str:
    # mirrors reaper_sighting_scope_v2 (migration 0008): a bucketed record's scope ends in
    # `#<bucket>` (a dead-letter queue's unread remainder, by power of ten)
    if payload.get("source") == "broker":
        subject = str(payload.get("queue") or payload.get("object"))
        bucket = payload.get("bucket")
        return subject if bucket is None else f"{subject}#{bucket}"
    return str(stream)


def _check_sightings(events: list[dict[str, Any]], summary: Summary, problems: list[str]) -> None:
    history: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for event in events:  # ordered by stream, seq
        payload = event["payload"]
        action = payload.get("action")
        if action not in ("surface", "cleared"):
            continue
        key = (
            event["project_id"],
            payload.get("source"),
            payload.get("condition"),
            _sighting_scope(event["project_id"], payload),
        )
        history[key].append(action)
        summary.sightings[action] += 1
    for key, actions in history.items():
        expected = ["surface" if i % 2 == 0 else "cleared" for i in range(len(actions))]
        if actions != expected:
            problems.append(f"sighting {key}: records {actions} do not alternate from surface")


def sighting_key(event: dict[str, Any]) -> tuple[str, str, str, str]:
    """A sighting record's key: its stream, source, condition and scope."""
    payload = event["payload"]
    return (
        str(event["project_id"]),
        str(payload.get("source")),
        str(payload.get("condition")),
        _sighting_scope(event["project_id"], payload),
    )


def open_sightings(events: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """The keys whose latest sighting record is a surface."""
    latest: dict[tuple[str, str, str, str], str] = {}
    for event in sorted(events, key=lambda e: (str(e["project_id"]), e["seq"])):
        if event["payload"].get("action") in ("surface", "cleared"):
            latest[sighting_key(event)] = event["payload"]["action"]
    return {key for key, action in latest.items() if action == "surface"}
