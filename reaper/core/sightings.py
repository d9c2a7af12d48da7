"""The sighting rule: what a surfaced condition records (SPEC §1 "Sightings").

Recorded when first seen and again only after it has cleared: a sighting (its
:class:`SightingRef`: stream and :class:`~reaper.core.domain.SightingKey`) is open while its
latest record is ``surface``, closed by ``cleared``. An open sighting this pass did not
observe is cleared only if its source was read (the job queue: within the project measured;
the broker: its queue measured): what could not be read clears nothing.

The ledger decides: the store hands this rule the latest record of every ref in question,
read under a lock, and writes what it returns. Pure: no clock, no I/O. Of several verdicts
for one ref in a pass, the first in the judge's stable order is the one recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final
from uuid import UUID

from reaper.core.domain import (
    FLEET_PROJECT_ID,
    Action,
    Condition,
    SightingKey,
    Source,
    Unit,
    Verdict,
)

#: The detail of a ``cleared`` record.
CLEARED_DETAIL = "no longer observed"


@dataclass(frozen=True, order=True)
class SightingRef:
    """Where a sighting lives: its ledger stream and its key there."""

    stream: UUID
    key: SightingKey


@dataclass(frozen=True)
class SightingsPass:
    """One pass as its sightings see it: when it ran, the sources it read, the project it was
    scoped to (None: all), and the broker queues it listed but could not read."""

    now: datetime
    sources_read: frozenset[Source]
    project_id: UUID | None = None
    unread_queues: frozenset[str] = field(default_factory=frozenset)


def ref_of(verdict: Verdict) -> SightingRef:
    """The ref of a verdict as the ledger sees it: its stream, and its key there (the scope
    is :func:`reaper.core.domain.sighting_scope`)."""
    return SightingRef(verdict.stream, verdict.sighting_key)


def observed_sightings(verdicts: Iterable[Verdict]) -> dict[SightingRef, Verdict]:
    """The surfaced verdicts of one pass, one per ref: the first in order wins. Verdicts
    with any other action (requeue, park, none, cleared) are not sightings."""
    observed: dict[SightingRef, Verdict] = {}
    for verdict in verdicts:
        if verdict.action is Action.SURFACE:
            observed.setdefault(ref_of(verdict), verdict)
    return observed


def is_read(
    verdict: Verdict,
    sources_read: frozenset[Source],
    project_id: UUID | None,
    unread_queues: frozenset[str] = frozenset(),
) -> bool:
    """Whether this pass read the source that would show the condition of the sighting
    ``verdict`` recorded: its source was read and, for the job queue in a pass scoped to one
    project, it is that project's; for the broker, the queue it is about was measured (not in
    ``unread_queues``: a queue whose node is down is listed but not read)."""
    if verdict.source not in sources_read:
        return False
    if verdict.source is Source.BROKER:
        return verdict.subject not in unread_queues
    return not (project_id is not None and verdict.stream != project_id)


def _bucketed(verdict: Verdict) -> tuple[UUID, Source, Condition, str] | None:
    """The measure a bucketed sighting belongs to (its buckets are scopes of one measure)."""
    if verdict.bucket is None:
        return None
    return (verdict.stream, verdict.source, verdict.condition, verdict.subject)


def cleared(verdict: Verdict) -> Verdict:
    """The ``cleared`` record that closes the sighting ``verdict`` opened."""
    return replace(verdict, measured=None, action=Action.CLEARED, detail=CLEARED_DETAIL, lease=None)


def is_open(latest: Verdict | None) -> bool:
    """A sighting is open while its latest record is a surface record."""
    return latest is not None and latest.action is Action.SURFACE


def records_to_write(
    observed: Mapping[SightingRef, Verdict],
    latest: Mapping[SightingRef, Verdict],
    sources_read: frozenset[Source],
    project_id: UUID | None = None,
    unread_queues: frozenset[str] = frozenset(),
) -> list[Verdict]:
    """The records one pass writes, given what it observed (one verdict per ref, see
    :func:`observed_sightings`) and the latest record of each ref in question (refs with no
    record are absent). A new episode's surface record for every observed ref not open; a
    ``cleared`` record for every open ref not observed whose source (and, on the broker,
    queue) was read. Observed refs come first in their given order, then clears in ref order.

    A bucketed measure (a verdict with a ``bucket``) is recorded again only when it reaches a
    bucket higher than every one open for it: then its new bucket opens and the lower ones
    close. While it stays within, or falls below, the highest bucket open, nothing is
    written and that bucket stays open; it closes when the measure is no longer observed.
    """
    highest: dict[tuple[UUID, Source, Condition, str], int] = {}
    for verdict in latest.values():
        measure = _bucketed(verdict)
        if measure is not None and is_open(verdict) and verdict.bucket is not None:
            highest[measure] = max(highest.get(measure, verdict.bucket), verdict.bucket)
    held: set[tuple[UUID, Source, Condition, str]] = set()
    records: list[Verdict] = []
    for ref, verdict in observed.items():
        measure = _bucketed(verdict)
        if measure in highest and (verdict.bucket or 0) <= highest[measure]:
            held.add(measure)  # within the highest bucket open: nothing new
            continue
        if not is_open(latest.get(ref)):
            records.append(verdict)
    for ref in sorted(latest):
        verdict = latest[ref]
        if ref in observed or not is_open(verdict):
            continue
        measure = _bucketed(verdict)
        if measure in held and verdict.bucket == highest[measure]:
            continue  # the highest bucket open stays open while the measure is observed
        if is_read(verdict, sources_read, project_id, unread_queues):
            records.append(cleared(verdict))
    return records


def verdict_from_record(stream: UUID, payload: Mapping[str, object], trusted: bool) -> Verdict:
    """Rebuild the verdict a stored ``QueueReaped`` sighting record was written from: enough
    of it to compute its ref and the ``cleared`` record that closes it."""
    source = Source(str(payload["source"]))
    queue = payload.get("queue")
    return Verdict(
        source=source,
        object=str(payload["object"]),
        condition=Condition(str(payload["condition"])),
        measured=_number(payload.get("measured")),
        threshold=_number(payload.get("threshold")),
        unit=Unit(str(payload["unit"])),
        action=Action(str(payload["action"])),
        queue=None if queue is None else str(queue),
        project_id=None if source is Source.BROKER or stream == FLEET_PROJECT_ID else stream,
        detail=str(payload.get("detail") or ""),
        trusted=trusted,
        bucket=_bucket(payload.get("bucket")),
    )


def _bucket(value: object) -> int | None:
    return value if type(value) is int else None


def _number(value: object) -> float | int | None:
    """A number as this reaper wrote it into a payload (JSON numbers only)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


#: Sightings locked, read and written per transaction by the store.
SIGHTING_BATCH: Final = 1000


def batches(refs: Iterable[SightingRef], size: int = SIGHTING_BATCH) -> list[list[SightingRef]]:
    """The refs in ascending batches of about ``size``, for a store to lock, read and write one
    transaction each: one advisory lock per sighting in one transaction fills PostgreSQL's
    lock table at some 20,000. The buckets of one measure stay in one batch (the rule of
    :func:`records_to_write` weighs them together)."""
    measures: dict[tuple[object, ...], list[SightingRef]] = {}
    for r in sorted(refs):
        measure = (r.stream, r.key.source, r.key.condition, r.key.scope.split("#")[0])
        measures.setdefault(measure, []).append(r)
    grouped: list[list[SightingRef]] = [[]]
    for group in measures.values():
        if grouped[-1] and len(grouped[-1]) + len(group) > size:
            grouped.append([])
        grouped[-1].extend(group)
    return [sorted(b) for b in grouped if b]
