"""The lease reap done by PostgreSQL, a batch at a time (SPEC §1 (a), (c), (d); §3; §8).

A batch is one transaction of two statements (``sql/lease_reap.sql``): one locks a lane's next
expired leases by the leased-expiry index's key (``SKIP LOCKED``) and their streams; the other
rules on each as it stands under the lock, exactly as
:func:`~reaper.core.judge_leases.judge_lease_page` does, moves it, raises a park's gate, writes
a requeue's outbox row, and appends its event with the canonical payload and digest built by
PostgreSQL. Python sends bounds and thresholds, never a lease, and keeps counts. Lanes (projects
split by a hash of their id: no two share a stream) run at once; a batch a row spoils is cut
down to that row, which is named and stepped over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final
from uuid import UUID

from reaper.core.domain import Dispatch
from reaper.errors import StoreUnavailable
from reaper.jobqueue import ledger
from reaper.jobqueue.database import (
    Connection,
    Database,
    PostgresError,
    is_row_failure,
    is_transient,
)
from reaper.jobqueue.rules import DELIVERY_EXHAUSTED_CHOICES
from reaper.jobqueue.sql import QUERIES

__all__ = ["LeaseReap", "lease_rulings", "reap_lease_lanes", "statement"]

#: The most and the fewest leases a batch takes, and how long its transaction should hold its
#: row locks: the next batch of a lane is sized from how long the last one took, to end in
#: about this time (the bound on a transaction's lock time is 0.1 s).
BATCH_MAX: Final = 1000
BATCH_MIN: Final = 100
BATCH_SECONDS: Final = 0.04

#: Lanes one pass's batches run in at once, each on its own pooled connection (at most the
#: pool's size): two keep both of a small machine's cores busy.
LANES: Final = 2

#: How often a batch that met a deadlock (or a serialization failure) is tried again as it is.
_DEADLOCK_ATTEMPTS: Final = 3

_CHOICES: Final = json.dumps(list(DELIVERY_EXHAUSTED_CHOICES))

#: Before the first batch: every real key sorts after it.
FIRST_KEY: Final = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))


def statement(name: str, dispatch: Dispatch = Dispatch.POLLING) -> str:
    """The text of ``name`` in ``sql/lease_reap.sql``, its ruling spliced in (and, for
    ``reap_lease_batch`` with outbox dispatch, the outbox parts)."""
    text = QUERIES[name].replace("{lease_ruling}", QUERIES["lease_ruling"])
    outbox = dispatch is Dispatch.OUTBOX
    for part in ("bump", "returning", "rows"):
        text = text.replace(f"/*outbox:{part}*/", QUERIES[f"lease_outbox_{part}"] if outbox else "")
    return text


@dataclass
class LeaseReap:
    """What a lease reap did: moves per (project, poison), the oldest and newest expiry moved,
    the rows named instead of moved, the leases whose commit got no answer, and (a dry run)
    the same counts of what it would have done."""

    moves: Counter[tuple[UUID, bool]] = field(default_factory=Counter)
    oldest: datetime | None = None
    newest: datetime | None = None
    failed: list[tuple[UUID, str]] = field(default_factory=list)
    unknown: int = 0
    #: Where every lane stopped (the budget spent): its last key, for counting what is left.
    stopped: list[tuple[int, tuple[datetime, UUID]]] = field(default_factory=list)

    @property
    def moved(self) -> int:
        return sum(self.moves.values())

    def add(self, projects: list[UUID], parks: list[bool], moves: list[int]) -> None:
        for project, poison, n in zip(projects, parks, moves, strict=True):
            self.moves[(project, poison)] += n

    def span(self, oldest: datetime | None, newest: datetime | None) -> None:
        if oldest is not None:
            self.oldest = oldest if self.oldest is None else min(self.oldest, oldest)
        if newest is not None:
            self.newest = newest if self.newest is None else max(self.newest, newest)


@dataclass(frozen=True)
class _Lane:
    now: datetime
    grace: int
    project_id: UUID | None
    lane: int
    lanes: int
    dispatch: Dispatch

    def pick_args(self, after: tuple[datetime, UUID], size: int) -> list[object]:
        return [self.now, self.grace, *after, self.project_id, self.lane, self.lanes, size]


class _CommitUnknown(Exception):
    """A batch's COMMIT got no answer: the connection was lost while it was committing."""

    def __init__(self, leases: int, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.leases = leases
        self.cause = cause


async def lease_rulings(
    db: Database,
    now: datetime,
    grace: int,
    after: tuple[datetime, UUID] | None,
    size: int,
    project_id: UUID | None = None,
) -> list[tuple[UUID, UUID, datetime, bool, str, str, str, str]]:
    """The rulings a batch would give the next ``size`` expired leases after ``after``, read
    only: (job, project, expiry, poison, payload, digest, gate identity, gate prompt) each."""
    lane = _Lane(now, grace, project_id, 0, 1, Dispatch.POLLING)
    async with db.session("reading expired leases") as conn, conn.transaction(readonly=True):
        await conn.execute(QUERIES["walk_leased_expiry_index"])
        args = lane.pick_args(after or FIRST_KEY, size)
        rows = await conn.fetch(statement("lease_rulings"), *args)
    return [tuple(r) for r in rows]


async def reap_lease_lanes(
    db: Database,
    now: datetime,
    grace: int,
    *,
    project_id: UUID | None,
    dispatch: Dispatch,
    deadline: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> LeaseReap:
    """Reap every expired lease past ``grace`` in batches on :data:`LANES` lanes at once,
    until none is left or ``deadline`` (by ``monotonic``) has passed; lanes stopped by the
    deadline are in ``stopped``. :class:`StoreUnavailable` when the database goes away, with
    what had committed by then in its ``reap``."""
    count = max(1, min(LANES, db.pool_size)) if project_id is None else 1
    reap = LeaseReap()
    lanes = [_Lane(now, grace, project_id, n, count, dispatch) for n in range(count)]
    try:
        async with db.seam("moving expired leases"):
            done = await asyncio.gather(
                *(_reap_lane(db, lane, reap, deadline, monotonic) for lane in lanes),
                return_exceptions=True,
            )
            for result in done:
                if isinstance(result, _CommitUnknown):
                    raise result.cause
                if isinstance(result, BaseException):
                    raise result
    except StoreUnavailable as exc:
        exc.reap = reap  # type: ignore[attr-defined]
        raise
    return reap


def next_batch_size(size: int, seconds: float) -> int:
    """The size of a lane's next batch, after one of ``size`` took ``seconds``: what would take
    :data:`BATCH_SECONDS` at the same pace, growing at most twofold at a time, within
    :data:`BATCH_MIN` and :data:`BATCH_MAX`."""
    paced = size * BATCH_SECONDS / max(seconds, 1e-6)
    return min(BATCH_MAX, max(BATCH_MIN, min(2 * size, int(paced))))


async def _reap_lane(
    db: Database, lane: _Lane, reap: LeaseReap, deadline: float, monotonic: Callable[[], float]
) -> None:
    after = FIRST_KEY
    size = BATCH_MAX // 2  # until paced
    cut = 0  # how many times the batch at `after` was halved for a row that spoils it
    async with db.connection() as conn:
        while True:
            if monotonic() >= deadline:
                reap.stopped.append((lane.lane, after))
                return
            began = time.monotonic()
            try:
                key = await _batch(conn, lane, after, size >> cut, reap)
            except _CommitUnknown as exc:
                reap.unknown += exc.leases
                raise
            except PostgresError as exc:
                if not is_row_failure(exc):
                    raise
                if size >> cut > 1:
                    cut += 1
                    continue
                failed, key = await _bad_row(conn, lane, after)
                reap.failed.append((failed, db.row_reason(exc)))
            else:
                if key is None:
                    return
                if not cut:
                    size = next_batch_size(size, time.monotonic() - began)
            cut = max(0, cut - 1)
            after = key


async def _bad_row(
    conn: Connection, lane: _Lane, after: tuple[datetime, UUID]
) -> tuple[UUID, tuple[datetime, UUID]]:
    """The lease a batch of one after ``after`` failed on: its job and its key."""
    async with conn.transaction():
        row = await conn.fetchrow(QUERIES["pick_lease_batch"], *lane.pick_args(after, 1))
    return row["last_id"], (row["last_expiry"], row["last_id"])


async def _batch(
    conn: Connection, lane: _Lane, after: tuple[datetime, UUID], size: int, reap: LeaseReap
) -> tuple[datetime, UUID] | None:
    """One batch of at most ``size`` after ``after``, in one transaction, tried again as it is
    after a deadlock; the key it ended at (None: no expired lease was left)."""
    for attempt in range(_DEADLOCK_ATTEMPTS):
        try:
            return await _transaction(conn, lane, after, size, reap)
        except PostgresError as exc:
            if not (is_transient(exc) and attempt + 1 < _DEADLOCK_ATTEMPTS):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _transaction(
    conn: Connection, lane: _Lane, after: tuple[datetime, UUID], size: int, reap: LeaseReap
) -> tuple[datetime, UUID] | None:
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(QUERIES["walk_leased_expiry_index"])  # this transaction only
        picked = await conn.fetchrow(QUERIES["pick_lease_batch"], *lane.pick_args(after, size))
        if not picked["picked"]:
            await transaction.rollback()
            return None
        key = (picked["last_expiry"], picked["last_id"])
        row = await conn.fetchrow(
            statement("reap_lease_batch", lane.dispatch),
            lane.now, lane.grace, *after, picked["projects"], *key, _CHOICES,
        )  # fmt: skip
        if row["payloads"]:
            # a host writer took those events' numbers first: they go after its events
            events = [
                ledger.Event(stream, payload, digest, True)
                for stream, payload, digest in zip(
                    row["streams"], row["payloads"], row["digests"], strict=True
                )
            ]
            await ledger.append(conn, events, lane.now, locked=True)
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
        raise _CommitUnknown(picked["picked"], exc) from exc
    reap.add(row["projects"] or [], row["parks"] or [], row["moves"] or [])
    reap.span(row["oldest"], row["newest"])
    return key
