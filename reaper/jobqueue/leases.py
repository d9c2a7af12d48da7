"""Leases: reading what expired and what is claimable, and moving expired leases (SPEC §1 (a),
(c), (d); §3).

A move is guarded: a lease is moved only while it is still exactly as it was read (still
leased, in the same project, by the same owner, with the same expiry and attempts), each move
commits with its ledger event, and one row that cannot be moved is named instead of blocking
the rest. Moves run in set-based batches (one statement and one transaction each) on a few
lanes at once, split by whole projects (so that no two lanes share a ledger stream) into lanes
as even as the projects allow.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from hashlib import sha256
from typing import Final
from uuid import UUID

from reaper.core.canonical import digest_of, lease_payload
from reaper.core.domain import ClaimableHead, Dispatch, HeldLease, UnsentDispatch
from reaper.core.judge_leases import LeaseColumns, LeaseRulings
from reaper.errors import StoreUnavailable
from reaper.jobqueue import ledger
from reaper.jobqueue.database import (
    Connection,
    Database,
    PostgresError,
    is_row_failure,
    is_transient,
)
from reaper.jobqueue.port import LeaseMoves, MovesInterrupted
from reaper.jobqueue.rules import (
    DELIVERY_EXHAUSTED_CHOICES,
    check_lease_page,
    park_identity,
    park_prompt,
)
from reaper.jobqueue.sql import QUERIES

__all__ = [
    "LEASE_BATCH_MIN",
    "LEASE_BATCH_SECONDS",
    "LEASE_BATCH_SIZE",
    "LEASE_LANES",
    "claimable_heads",
    "count_expired_leases",
    "expired_lease_page",
    "lanes_by_project",
    "move_lease_page",
    "next_batch_size",
]

#: The most leases moved per batch (one statement, one transaction). Each batch holds its
#: rows' locks until it commits, and the host's claims skip those rows meanwhile: a batch is
#: sized to end within :data:`LEASE_BATCH_SECONDS`, and never larger than this, so that a
#: batch spoiled by one bad row is cheap to split down to that row.
LEASE_BATCH_SIZE: Final = 1000

#: The fewest leases a batch is cut down to when the database is slow (each batch costs a
#: commit's flush and a few round trips, whatever its size).
LEASE_BATCH_MIN: Final = 100

#: How long a batch's transaction should hold its row locks: the next batch of a lane is
#: sized from how long the last one took, to end in about this time, however busy the machine
#: (measured at 2,000,000 jobs on a shared 2-core machine: 40 to 130 ms for a batch of 1,000,
#: with the same rows; the bound on a transaction's lock time is 0.1 s).
LEASE_BATCH_SECONDS: Final = 0.04

#: Lanes one pass's lease moves run in at once, split by project (so no two lanes share a
#: ledger stream), each on its own pooled connection (at most the pool's size). Two keep
#: both of a small machine's cores busy. Lanes are safe together for the reasons several
#: reapers are: SKIP LOCKED rows, re-checked guards, streams locked in order.
LEASE_LANES: Final = 2

#: How often a batch that met a deadlock (or a serialization failure) is tried again as it is.
_DEADLOCK_ATTEMPTS: Final = 3

_DELIVERY_EXHAUSTED_CHOICES_JSON: Final = json.dumps(list(DELIVERY_EXHAUSTED_CHOICES))


#: Before the first page: every real key sorts after it.
_FIRST_KEY: Final = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))


async def expired_lease_page(
    db: Database,
    now: datetime,
    grace_seconds: int,
    size: int,
    after: tuple[datetime, UUID] | None,
    project_id: UUID | None,
) -> LeaseColumns:
    """At most ``size`` expired leases, oldest first, after the key ``after`` (the last page's
    :meth:`~LeaseColumns.last_key`; None: from the first), as columns."""
    expiry, job_id = after or _FIRST_KEY
    async with db.session("reading expired leases") as conn, conn.transaction(readonly=True):
        await conn.execute(QUERIES["walk_leased_expiry_index"])  # this transaction only
        rows = await conn.fetch(
            QUERIES["expired_lease_page"], now, grace_seconds, size, project_id, expiry, job_id
        )
    return LeaseColumns.of_rows(rows)  # the query's columns are HeldLease's fields


async def count_expired_leases(
    db: Database,
    now: datetime,
    grace_seconds: int,
    project_id: UUID | None,
    after: tuple[datetime, UUID] | None = None,
) -> int:
    expiry, job_id = after or _FIRST_KEY
    async with db.session("counting expired leases") as conn:
        count = await conn.fetchval(
            QUERIES["count_expired_leases"], now, grace_seconds, project_id, expiry, job_id
        )
    return int(count)


async def claimable_heads(
    db: Database, now: datetime, known_phases: frozenset[str], project_id: UUID | None
) -> list[ClaimableHead]:
    async with db.session("reading claimable work") as conn:
        rows = await conn.fetch(QUERIES["claimable_heads"], now, sorted(known_phases), project_id)
    return [ClaimableHead(*r) for r in rows]  # likewise


async def unsent_dispatches(db: Database, project_id: UUID | None) -> list[UnsentDispatch]:
    async with db.session("reading unsent dispatches") as conn:
        rows = await conn.fetch(QUERIES["unsent_dispatches"], project_id)
    return [UnsentDispatch(*r) for r in rows]  # the query's columns are its fields


# --------------------------------------------------------------------------- moves


@dataclass
class _Progress:
    """What the lanes have done so far, as their batches commit."""

    moved: dict[UUID, str] = field(default_factory=dict)
    failed: list[tuple[UUID, str]] = field(default_factory=list)
    unknown: list[UUID] = field(default_factory=list)

    def outcome(self, job_ids: Sequence[UUID]) -> LeaseMoves:
        unknown = set(self.unknown)
        settled = self.moved.keys() | {job_id for job_id, _ in self.failed} | unknown
        return LeaseMoves(
            requeued=tuple(j for j in job_ids if self.moved.get(j) == "requeue"),
            parked=tuple(j for j in job_ids if self.moved.get(j) == "park"),
            skipped=tuple(j for j in job_ids if j not in settled),
            failed=tuple(self.failed),
            unknown=tuple(j for j in job_ids if j in unknown),
        )


class _CommitUnknown(Exception):
    """A batch's COMMIT got no answer: the connection was lost while it was committing."""

    def __init__(self, job_ids: Sequence[UUID], cause: BaseException) -> None:
        super().__init__(str(cause))
        self.job_ids = list(job_ids)
        self.cause = cause


async def move_lease_page(
    db: Database, page: LeaseColumns, rulings: LeaseRulings, now: datetime, dispatch: Dispatch
) -> LeaseMoves:
    """Requeue or park each lease of ``page`` as ``rulings`` say, if it is still as read, each
    with the very event its verdict would give (no verdict object is built).

    The moves are split into :data:`LEASE_LANES` lanes by project, all at once, each on its own
    pooled connection, in set-based batches (each one transaction: its moves, gates, events).
    A batch a row spoils (a trigger raising, a constraint violated) is halved down to that row,
    named in ``failed``. With outbox dispatch each requeue starts a dispatch episode in the same
    transaction. ``ValueError`` before anything moves for a page a move cannot trust
    (:func:`~reaper.jobqueue.rules.check_lease_page`); :class:`MovesInterrupted` (carrying
    what had committed) when the database goes away part-way."""
    check_lease_page(page, rulings)
    projects = page.project_ids
    lanes = _Lanes(db, dispatch, Counter(projects[i] for i in rulings.rows))
    lanes.add_page(page, rulings)
    return await lanes.move(db, now)


def lanes_by_project(moves_per_project: Mapping[UUID, int], lanes: int) -> dict[UUID, int]:
    """Each project's lane (``0 .. lanes - 1``), every project's moves in one lane: the largest
    project first, each to the lane with the fewest moves so far, so that no lane has more
    moves than another by more than the largest project's."""
    loads = [0] * lanes
    lane_of: dict[UUID, int] = {}
    for project, moves in sorted(moves_per_project.items(), key=lambda kv: (-kv[1], kv[0])):
        lane = loads.index(min(loads))
        loads[lane] += moves
        lane_of[project] = lane
    return lane_of


class _Lanes:
    """The moves of one call, split by project into lanes (no two lanes share a ledger
    stream) of as near equal size as whole projects allow (the lanes run at once, so the call
    takes as long as its longest lane)."""

    def __init__(self, db: Database, dispatch: Dispatch, moves_per_project: Counter[UUID]) -> None:
        count = max(1, min(LEASE_LANES, db.pool_size))
        self.lanes = [_LeaseMoves(dispatch=dispatch) for _ in range(count)]
        self._lane_of = lanes_by_project(moves_per_project, count)
        self.job_ids: list[UUID] = []

    def add_page(self, page: LeaseColumns, rulings: LeaseRulings) -> None:
        """Every ruling of a checked page (its jobs all distinct, as a page read by its key's)."""
        projects = page.project_ids
        chosen: list[list[int]] = [[] for _ in self.lanes]
        for k, i in enumerate(rulings.rows):
            chosen[self._lane_of[projects[i]]].append(k)
        for lane, rulings_of_lane in zip(self.lanes, chosen, strict=True):
            lane.add_rulings(page, rulings, rulings_of_lane)
        self.job_ids.extend(page.job_ids[i] for i in rulings.rows)

    async def move(self, db: Database, now: datetime) -> LeaseMoves:
        progress = _Progress()
        try:
            async with db.seam("moving expired leases"):
                done = await asyncio.gather(
                    *(_move_lane(db, lane, now, progress) for lane in self.lanes if lane),
                    return_exceptions=True,
                )
                for result in done:
                    if isinstance(result, _CommitUnknown):
                        raise result.cause
                    if isinstance(result, BaseException):
                        raise result
        except StoreUnavailable as exc:
            # The batches that committed before the failure stay moved, each with its event:
            # the pass must report them, so what is known travels with the error.
            raise MovesInterrupted(exc.reason, progress.outcome(self.job_ids)) from None
        return progress.outcome(self.job_ids)


def next_batch_size(size: int, seconds: float) -> int:
    """The size of a lane's next batch, after one of ``size`` took ``seconds``: what would take
    :data:`LEASE_BATCH_SECONDS` at the same pace, growing at most twofold at a time, within
    :data:`LEASE_BATCH_MIN` and :data:`LEASE_BATCH_SIZE`."""
    paced = size * LEASE_BATCH_SECONDS / max(seconds, 1e-6)
    return min(LEASE_BATCH_SIZE, max(LEASE_BATCH_MIN, min(2 * size, int(paced))))


def _batch_end(start: int, size: int, total: int) -> int:
    """Where a batch of ``size`` from ``start`` ends: a tail under half a batch joins it."""
    stop = min(total, start + size)
    if total - stop < size // 2 and total - start <= LEASE_BATCH_SIZE:
        return total
    return stop


async def _move_lane(db: Database, moves: _LeaseMoves, now: datetime, progress: _Progress) -> None:
    size = min(LEASE_BATCH_SIZE, max(LEASE_BATCH_MIN, LEASE_BATCH_SIZE // 2))  # until paced
    start = 0
    async with db.connection() as conn:
        # Parsed before any batch takes a row lock (on a fresh connection that costs as much as
        # a batch; each batch is still planned for its own rows): an empty move writes nothing;
        # a refusal is the batches' to name.
        try:
            await conn.fetchrow(QUERIES["move_leases"], *_LeaseMoves().args(0, 0, now))
        except PostgresError as exc:
            if not is_row_failure(exc):
                raise
        while start < len(moves):
            stop = _batch_end(start, size, len(moves))
            began = time.monotonic()
            try:
                moved = await _move_or_split(db, conn, moves, start, stop, now, progress)
            except _CommitUnknown as exc:
                progress.unknown.extend(exc.job_ids)
                raise
            progress.moved.update(moved)
            size = next_batch_size(stop - start, time.monotonic() - began)
            start = stop


async def _move_or_split(
    db: Database,
    conn: Connection,
    moves: _LeaseMoves,
    start: int,
    stop: int,
    now: datetime,
    progress: _Progress,
) -> dict[UUID, str]:
    """Move ``start:stop``; if a row spoils it, halve and retry until the bad row is alone,
    then name it in ``failed``. A deadlock with another writer (the host's, waiting on an event
    this batch holds) is no row's fault: the batch is tried again as it is."""
    for attempt in range(_DEADLOCK_ATTEMPTS):
        try:
            return await _move_leases(conn, moves, start, stop, now)
        except PostgresError as exc:
            if not is_row_failure(exc):
                raise
            if is_transient(exc) and attempt + 1 < _DEADLOCK_ATTEMPTS:
                continue
            if stop - start == 1:
                progress.failed.append((moves.job_ids[start], db.row_reason(exc)))
                return {}
            break
    middle = (start + stop) // 2
    moved = await _move_or_split(db, conn, moves, start, middle, now, progress)
    moved.update(await _move_or_split(db, conn, moves, middle, stop, now, progress))
    return moved


async def _move_leases(
    conn: Connection, moves: _LeaseMoves, start: int, stop: int, now: datetime
) -> dict[UUID, str]:
    """Moves ``start:stop`` and their events, in one transaction; returns ``{job: action}``
    of the rows moved (the others changed since they were read, or are held elsewhere)."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        await ledger.lock_streams(conn, moves.projects[start:stop])
        row = await conn.fetchrow(QUERIES["move_leases"], *moves.args(start, stop, now))
        if row["unwritten"]:
            # a host writer took those events' numbers first: they go after its events
            events = [moves.event(start + i - 1) for i in row["unwritten"]]
            await ledger.append(conn, events, now, locked=True)
        job_ids = moves.job_ids[start:stop]
        moved = set(job_ids if row["moved"] is None else row["moved"])
        requeued = moved - set(row["parked"] or ())
        if moves.dispatch is Dispatch.OUTBOX and requeued:
            await conn.fetch(QUERIES["dispatch_jobs"], now, sorted(requeued))
    except BaseException:
        with contextlib.suppress(Exception):  # a dead connection rolls back on its own
            if not conn.is_closed():
                await transaction.rollback()
        raise
    try:
        await transaction.commit()
    except PostgresError:
        raise  # the server answered: the transaction did not commit
    except Exception as exc:
        # No answer to the COMMIT: it may or may not have been applied.
        raise _CommitUnknown(sorted(moved), exc) from exc
    parked = set(row["parked"] or ())
    return {job_id: "park" if job_id in parked else "requeue" for job_id in moved}


#: Between payloads in ``move_leases``'s text: canonical JSON escapes it, so never holds it raw.
_PAYLOAD_SEPARATOR: Final = "\x1e"


@dataclass
class _LeaseMoves:
    """A lane's lease moves as the columns ``move_leases`` takes (one entry per job), with
    what each move's event says. The events' payloads and digests are built a batch at a time
    as it is sent (:meth:`args`), each kind as one value, which costs the driver a fraction of
    what a thousand array elements do."""

    job_ids: list[UUID] = field(default_factory=list)
    projects: list[UUID] = field(default_factory=list)
    owners: list[str | None] = field(default_factory=list)
    expiries: list[datetime] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    #: Each move's event: poison (a park) or not (a requeue), measurement, threshold, detail.
    poison: list[bool] = field(default_factory=list)
    measured: list[float | int] = field(default_factory=list)
    thresholds: list[int] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    #: How the host dispatches: with an outbox, each requeue starts a new dispatch episode.
    dispatch: Dispatch = Dispatch.POLLING
    #: The jobs to park (the rest are requeued), each with its gate's identity and prompt.
    parks: list[UUID] = field(default_factory=list)
    gate_identities: list[str] = field(default_factory=list)
    gate_prompts: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.job_ids)

    def park(self, lease: HeldLease) -> None:
        """Mark the move of ``lease``'s job, already added, a park behind its gate."""
        self.parks.append(lease.job_id)
        self.gate_identities.append(park_identity(lease))
        self.gate_prompts.append(park_prompt(lease))

    def add_rulings(self, page: LeaseColumns, rulings: LeaseRulings, chosen: list[int]) -> None:
        """Add the moves of the rulings at positions ``chosen`` of a judged page."""
        rows, poison = rulings.rows, rulings.poison
        at = [rows[k] for k in chosen]
        self.job_ids.extend(page.job_ids[i] for i in at)
        self.projects.extend(page.project_ids[i] for i in at)
        self.owners.extend(page.owners[i] for i in at)
        self.expiries.extend(page.expiries[i] for i in at)
        self.attempts.extend(page.attempts[i] for i in at)
        self.poison.extend(poison[k] for k in chosen)
        self.measured.extend(rulings.measured[k] for k in chosen)
        self.details.extend(rulings.details[k] for k in chosen)
        limits, grace, pairs = page.max_attempts, rulings.grace, list(zip(chosen, at, strict=True))
        self.thresholds.extend(limits[i] if poison[k] else grace for k, i in pairs)
        for k, i in pairs:
            if poison[k]:
                self.park(page.lease(i))

    def payload(self, i: int) -> str:
        """The canonical payload of move ``i``'s event."""
        if self.poison[i]:
            condition, action, unit = "poison", "park", "attempts"
        else:
            condition, action, unit = "lease_expired", "requeue", "seconds"
        return lease_payload(
            str(self.job_ids[i]), condition, action, self.measured[i], self.thresholds[i], unit,
            self.details[i],
        )  # fmt: skip

    def event(self, i: int) -> ledger.Event:
        """The event of move ``i``, on its job's project stream."""
        payload = self.payload(i)
        return ledger.Event(self.projects[i], payload, digest_of(payload), True)

    def args(self, start: int, stop: int, now: datetime) -> list[object]:
        """The parameters of ``move_leases`` for moves ``start:stop``."""
        if start == 0 and stop == len(self.job_ids):
            parks, identities, prompts = self.parks, self.gate_identities, self.gate_prompts
        else:
            wanted = set(self.job_ids[start:stop])
            chosen = [i for i, job_id in enumerate(self.parks) if job_id in wanted]
            parks = [self.parks[i] for i in chosen]
            identities = [self.gate_identities[i] for i in chosen]
            prompts = [self.gate_prompts[i] for i in chosen]
        payloads = [self.payload(i) for i in range(start, stop)]
        joined = _PAYLOAD_SEPARATOR.join(payloads)
        if joined.count(_PAYLOAD_SEPARATOR) != max(0, stop - start - 1):
            raise ValueError("a lease event's payload holds the payload separator")
        return [
            now,
            self.job_ids[start:stop],
            self.owners[start:stop],
            self.expiries[start:stop],
            self.attempts[start:stop],
            parks,
            identities,
            prompts,
            _DELIVERY_EXHAUSTED_CHOICES_JSON,
            self.projects[start:stop],
            joined,
            b"".join(sha256(payload.encode()).digest() for payload in payloads),
        ]
