"""The lease reap done by PostgreSQL, a batch at a time (SPEC §1 (a), (c), (d); §3; §8).

A batch is one transaction of one statement (``sql/lease_reap.sql``): it locks a lane's next
expired leases by the leased-expiry index's key (``SKIP LOCKED``) and their streams, rules on
each as it stands under the lock, exactly as
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Protocol
from uuid import UUID

from reaper.core.domain import Dispatch
from reaper.errors import StoreUnavailable
from reaper.jobqueue import ledger
from reaper.jobqueue.database import (
    Connection,
    Database,
    PostgresError,
    Record,
    is_row_failure,
    is_transient,
)
from reaper.jobqueue.port import KeepMoves, LeaseReap, LeaseReapInterrupted
from reaper.jobqueue.rules import DELIVERY_EXHAUSTED_CHOICES
from reaper.jobqueue.sql import QUERIES

__all__ = ["lease_rulings", "reap_leases", "statement"]

#: The most and the fewest leases a batch takes, and how long its transaction should hold its
#: row locks: the next batch of a lane is sized from how long the last one took, to end in
#: about this time (the bound on a transaction's lock time is 0.1 s).
BATCH_MAX: Final = 1000
BATCH_MIN: Final = 100
BATCH_SECONDS: Final = 0.04
#: A lane's first batch, until the next ones are sized by its time.
BATCH_FIRST: Final = 500

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
    rulings = QUERIES["lease_rulings"].rstrip(";")
    text = QUERIES[name].replace("{lease_rulings}", rulings)
    text = text.replace("{lease_ruling}", QUERIES["lease_ruling"])
    text = text.replace("{lease_lane}", QUERIES["lease_lane"].rstrip(";"))
    outbox = dispatch is Dispatch.OUTBOX
    for part in ("bump", "returning", "rows"):
        text = text.replace(f"/*outbox:{part}*/", QUERIES[f"lease_outbox_{part}"] if outbox else "")
    return text


@dataclass(frozen=True)
class _Lane:
    now: datetime
    grace: int
    project_id: UUID | None
    lane: int
    lanes: int
    dispatch: Dispatch
    write: bool
    keep: KeepMoves

    def pick_args(self, after: tuple[datetime, UUID], size: int) -> list[object]:
        return [self.now, self.grace, *after, self.project_id, self.lane, self.lanes, size]

    def batch_args(self, after: tuple[datetime, UUID], size: int) -> list[object]:
        return [*self.pick_args(after, size), _CHOICES]


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
    lane = _Lane(now, grace, project_id, 0, 1, Dispatch.POLLING, False, _keep_nothing)
    async with db.session("reading expired leases") as conn, conn.transaction(readonly=True):
        await conn.execute(QUERIES["walk_leased_expiry_index"])
        args = lane.pick_args(after or FIRST_KEY, size)
        rows = await conn.fetch(statement("lease_rulings"), *args)
    return [tuple(r) for r in rows]


def _keep_nothing(_recorded: str, _written: bool) -> None:
    pass


class _Store(Protocol):
    database: Database


async def reap_leases(
    self: _Store,
    now: datetime,
    grace_seconds: int,
    *,
    project_id: UUID | None,
    dispatch: Dispatch,
    write: bool,
    deadline: float,
    keep: KeepMoves,
    monotonic: Callable[[], float] = time.monotonic,
    stopping: Callable[[], bool] = lambda: False,
) -> LeaseReap:
    """:meth:`~reaper.jobqueue.port.JobQueue.reap_leases`: batches on :data:`LANES` lanes at
    once (one for one project), until none is left, ``deadline`` has passed or ``stopping()``
    (asked after each batch: the batch in flight commits or rolls back first). The store's
    method as it is (:class:`~reaper.jobqueue.leases.Leases`)."""
    db = self.database
    count = max(1, min(LANES, db.pool_size)) if project_id is None else 1
    reap = LeaseReap()
    lanes = [
        _Lane(now, grace_seconds, project_id, n, count, dispatch, write, keep) for n in range(count)
    ]
    try:
        async with db.seam("reaping expired leases" if write else "ruling on expired leases"):
            done = await asyncio.gather(
                *(_reap_lane(db, lane, reap, deadline, monotonic, stopping) for lane in lanes),
                return_exceptions=True,
            )
            for result in done:
                if isinstance(result, _CommitUnknown):
                    raise result.cause
                if isinstance(result, BaseException):
                    raise result
    except StoreUnavailable as exc:
        # The batches that committed stay moved, each with its event: the pass reports them.
        raise LeaseReapInterrupted(exc.reason, reap) from None
    return reap


def next_batch_size(size: int, seconds: float) -> int:
    """The size of a lane's next batch, after one of ``size`` took ``seconds``: what would take
    :data:`BATCH_SECONDS` at the same pace, growing at most twofold at a time, within
    :data:`BATCH_MIN` and :data:`BATCH_MAX`."""
    paced = size * BATCH_SECONDS / max(seconds, 1e-6)
    return min(BATCH_MAX, max(BATCH_MIN, min(2 * size, int(paced))))


async def _reap_lane(
    db: Database,
    lane: _Lane,
    reap: LeaseReap,
    deadline: float,
    monotonic: Callable[[], float],
    stopping: Callable[[], bool],
) -> None:
    """A lane's batches, one after another, each at least one lease past the last; a batch a
    row spoils is halved until that row is alone, named, and stepped over."""
    after = FIRST_KEY
    size = BATCH_FIRST
    cut = 0  # how many times the batch at `after` was halved for a row that spoils it
    async with db.connection() as conn:
        if lane.write:
            await _prepare(conn, lane)
        while True:
            began = time.monotonic()
            try:
                key = await _batch(conn, lane, after, max(1, size >> cut), reap)
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
                if key is None:  # no expired lease is left after it (a reaper moved it)
                    return
                reap.failed.append((failed, db.row_reason(exc)))
            else:
                if key is None:
                    return
                if not cut:
                    size = next_batch_size(size, time.monotonic() - began)
            cut = max(0, cut - 1)
            after = key
            if monotonic() >= deadline or stopping():
                reap.stopped = True
                return


async def _prepare(conn: Connection, lane: _Lane) -> None:
    """Parse a batch's statement before any batch takes a row lock (on a fresh connection
    that costs as much as a batch): run once over nothing, writing nothing. A refusal is the
    batches' to name."""
    try:
        await conn.fetchrow(
            statement("reap_lease_batch", lane.dispatch), *lane.batch_args(FIRST_KEY, 0)
        )
    except PostgresError as exc:
        if not is_row_failure(exc):
            raise


async def _bad_row(
    conn: Connection, lane: _Lane, after: tuple[datetime, UUID]
) -> tuple[UUID, tuple[datetime, UUID] | None]:
    """The lease a batch of one after ``after`` failed on, read without a lock (a role that may
    not lock may read): its job and its key (None: it is no longer there)."""
    row = await conn.fetchrow(statement("lease_rulings"), *lane.pick_args(after, 1))
    if row is None:
        return UUID(int=0), None
    return row["id"], (row["lease_expires_at"], row["id"])


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
    if not lane.write:
        return await _dry_run(conn, lane, after, size, reap)
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(QUERIES["walk_leased_expiry_index"])  # this transaction only
        row = await conn.fetchrow(
            statement("reap_lease_batch", lane.dispatch), *lane.batch_args(after, size)
        )
        if not row["picked"]:
            await transaction.rollback()
            return None
        key = (row["last_expiry"], row["last_id"])
        if row["payloads"]:
            # another writer took those events' numbers first: they go after its events
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
        raise _CommitUnknown(row["picked"], exc) from exc
    _tally(reap, row)
    if row["recorded"]:
        lane.keep(row["recorded"], True)
    return key


def _tally(reap: LeaseReap, row: Record) -> None:
    moves = zip(row["projects"] or (), row["parks"] or (), row["moves"] or (), strict=True)
    reap.add(list(moves), row["oldest"], row["newest"])


async def _dry_run(
    conn: Connection, lane: _Lane, after: tuple[datetime, UUID], size: int, reap: LeaseReap
) -> tuple[datetime, UUID] | None:
    """A dry run's batch: the same rulings, read only, nothing locked."""
    async with conn.transaction(readonly=True):
        await conn.execute(QUERIES["walk_leased_expiry_index"])  # this transaction only
        row = await conn.fetchrow(statement("lease_rulings_page"), *lane.pick_args(after, size))
    if row["last_id"] is None:
        return None
    _tally(reap, row)
    if row["recorded"]:
        lane.keep(row["recorded"], False)
    return row["last_expiry"], row["last_id"]
