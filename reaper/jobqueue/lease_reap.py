"""The lease reap done by PostgreSQL, a batch at a time (SPEC §1 (a), (c), (d); §3; §8).

A batch is one transaction of one statement (``sql/lease_reap.sql``): it locks a lane's next
expired leases by the leased-expiry index's key (``SKIP LOCKED``) and their streams, rules on
each under the lock exactly as :func:`~reaper.core.judge_leases.judge_lease_page` does, moves
it, raises a park's gate, writes a requeue's outbox row, and appends its event with the
canonical payload and digest built by PostgreSQL. Python sends bounds and thresholds, never a
lease, and keeps counts and the runs of event numbers each batch appended, by which
:func:`lease_listing` reads the moves back. Lanes (projects split by a hash of their id: no two
share a stream) run at once, one that runs out takes half of a busy one's projects, a quiet
pass opens none, and a batch a row spoils is cut down to that row, named and stepped over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Final, Protocol
from uuid import UUID

from reaper.core.domain import Dispatch, Verdict
from reaper.core.sightings import verdict_from_record
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
from reaper.jobqueue.port import (
    FIRST_KEY,
    LeaseKey,
    LeaseReap,
    LeaseReapInterrupted,
    LeaseReapRun,
)
from reaper.jobqueue.rules import DELIVERY_EXHAUSTED_CHOICES
from reaper.jobqueue.sql import QUERIES

__all__ = ["FIRST_KEY", "lease_listing", "reap_leases", "statement"]

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

#: The moves a listing holds at once: the rows of one fetch of its cursor (or one page).
LISTING_PAGE: Final = 500

_CHOICES: Final = json.dumps(list(DELIVERY_EXHAUSTED_CHOICES))


def statement(name: str, dispatch: Dispatch = Dispatch.POLLING) -> str:
    """The text of ``name`` in ``sql/lease_reap.sql`` (its ruling spliced in by the loader)
    and, for ``reap_lease_batch`` with outbox dispatch, the outbox parts."""
    text = QUERIES[name]
    outbox = dispatch is Dispatch.OUTBOX
    for part in ("bump", "returning", "rows"):
        text = text.replace(f"/*outbox:{part}*/", QUERIES[f"lease_outbox_{part}"] if outbox else "")
    return text


@dataclass(frozen=True)
class _Lane:
    """The projects whose id hashes to ``lane`` modulo ``lanes``: no two lanes share one."""

    run: LeaseReapRun
    lane: int
    lanes: int

    def pick_args(self, after: LeaseKey, size: int) -> list[object]:
        r = self.run
        return [r.now, r.grace_seconds, *after, r.project_id, self.lane, self.lanes, size]

    def batch_args(self, after: LeaseKey, size: int) -> list[object]:
        return [*self.pick_args(after, size), _CHOICES]

    def halves(self) -> tuple[_Lane, _Lane]:
        """This lane's projects in two lanes: those it keeps and those it gives away."""
        return (
            _Lane(self.run, self.lane, 2 * self.lanes),
            _Lane(self.run, self.lane + self.lanes, 2 * self.lanes),
        )


#: A lane asks for half of a busy lane's projects when it runs out, until lanes are this
#: narrow: each lane's batch walks every expired lease of the index to find its own, and a
#: lane of one eighth walks eight for one.
NARROWEST: Final = 8


class _Lanes:
    """The lanes of one lease reap, at work or out of it. A lane that runs out while others
    work waits for a busy lane to give it half of its projects, from the key the busy lane
    has reached (every lease of those projects before it is behind them both): on two cores,
    a lane that had the fewer expired leases does not leave its core idle while the other
    works alone. A busy lane gives only between its batches, after a commit, so no lease is
    in two lanes' hands; a dry run's lanes keep their projects (its listing asks each lane
    again from the start)."""

    def __init__(self, working: int, *, share: bool) -> None:
        self.working = working
        self.share = share
        self.idle: list[asyncio.Future[tuple[_Lane, LeaseKey] | None]] = []

    def give(self, lane: _Lane, after: LeaseKey) -> _Lane:
        """Between ``lane``'s batches (at ``after``): the lane it goes on as, having given half
        of its projects to a lane that waits, if one does."""
        while self.share and self.idle and lane.lanes < NARROWEST:
            waiting = self.idle.pop(0)
            if waiting.done():  # its lane was cancelled
                continue
            kept, given = lane.halves()
            self.working += 1
            waiting.set_result((given, after))
            return kept
        return lane

    async def more(self) -> tuple[_Lane, LeaseKey] | None:
        """A lane that ran out: the lane it takes next and the key to start after, once a busy
        lane gives one; None once no lane is at work."""
        self.working -= 1
        if self.working <= 0 or not self.share:
            self.stop()
            return None
        waiting: asyncio.Future[tuple[_Lane, LeaseKey] | None]
        waiting = asyncio.get_running_loop().create_future()
        self.idle.append(waiting)
        return await waiting

    def stop(self) -> None:
        """No lane gives any more (all ran out, or one failed or was stopped)."""
        self.share = False
        for waiting in self.idle:
            if not waiting.done():
                waiting.set_result(None)
        self.idle.clear()


class _CommitUnknown(Exception):
    """A batch's COMMIT got no answer: the connection was lost while it was committing."""

    def __init__(self, leases: int, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.leases = leases
        self.cause = cause


async def _rulings(conn: Connection, lane: _Lane, after: LeaseKey, size: int) -> list[Record]:
    async with conn.transaction(readonly=True):
        await conn.execute(QUERIES["walk_leased_expiry_index"])  # this transaction only
        return list(await conn.fetch(statement("lease_rulings"), *lane.pick_args(after, size)))


class _Store(Protocol):
    database: Database


async def reap_leases(self: _Store, run: LeaseReapRun) -> LeaseReap:
    """:meth:`~reaper.jobqueue.port.JobQueue.reap_leases`: batches on :data:`LANES` lanes at
    once (one for one project; :class:`_Lanes` shares them out), until none is left, the
    deadline has passed or
    ``run.stopping()`` (asked after each batch: the batch in flight commits or rolls back
    first). The store's method as it is (:class:`~reaper.jobqueue.leases.Leases`)."""
    db = self.database
    count = max(1, min(LANES, db.pool_size)) if run.project_id is None else 1
    reap = LeaseReap()
    try:
        if not await _any_expired(db, run):
            return reap
        async with db.seam("reaping expired leases" if run.write else "ruling on expired leases"):
            lanes = _Lanes(count, share=run.write)
            done = await asyncio.gather(
                *(_reap_lanes(db, _Lane(run, n, count), lanes, reap) for n in range(count)),
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


async def _any_expired(db: Database, run: LeaseReapRun) -> bool:
    """Whether a lane would find any lease to take: asked on one pooled connection, so that a
    quiet pass opens no lane (a fresh lane's connection and its statement's parse cost a
    ``reaper reap`` about 20 ms) and moves nothing it would not have moved."""
    async with db.session("looking for expired leases") as conn:
        found = await conn.fetchval(
            statement("any_expired_lease"), *_Lane(run, 0, 1).pick_args(FIRST_KEY, 1)
        )
    return bool(found)


async def lease_listing(
    self: _Store, run: LeaseReapRun, reap: LeaseReap
) -> AsyncGenerator[Verdict, None]:
    """:meth:`~reaper.jobqueue.port.JobQueue.lease_listing`: the events of ``reap``'s runs
    through a cursor (a read-only transaction on one pooled connection), or a dry run's
    rulings asked again a page at a time, lane by lane, up to the last key each lane ruled
    on. A caller that stops early closes it (``contextlib.aclosing``)."""
    db = self.database
    if not run.write:
        for (lane, lanes), last in sorted(reap.lanes.items()):
            async for verdict in _ruled_again(db, _Lane(run, lane, lanes), last):
                yield verdict
        return
    runs = [(stream, first, last) for stream, kept in reap.runs.items() for first, last in kept]
    if not runs:
        return
    doing = "reading the lease reap's events"
    async with db.session(doing) as conn, conn.transaction(readonly=True):
        query = QUERIES["reaped_events"]
        for stream, first, final in runs:  # run by run: no sort of every move before the first
            async for row in conn.cursor(query, stream, first, final, prefetch=LISTING_PAGE):
                yield _verdict(stream, row["payload"], row["trusted"])


async def _ruled_again(db: Database, lane: _Lane, last: LeaseKey) -> AsyncGenerator[Verdict, None]:
    """A dry run's lane asked again, a page at a time, up to its last key (inclusive)."""
    after = FIRST_KEY
    while True:
        async with db.session("ruling on expired leases again") as conn:
            rows = await _rulings(conn, lane, after, LISTING_PAGE)
        for row in rows:
            after = (row["lease_expires_at"], row["id"])
            if after > last:
                return
            yield _verdict(row["project_id"], row["payload"], True)
        if len(rows) < LISTING_PAGE:
            return


def _verdict(stream: UUID, payload: str, trusted: bool) -> Verdict:
    return verdict_from_record(stream, json.loads(payload), trusted)


def next_batch_size(size: int, seconds: float) -> int:
    """The size of a lane's next batch, after one of ``size`` took ``seconds``: what would take
    :data:`BATCH_SECONDS` at the same pace, growing at most twofold at a time, within
    :data:`BATCH_MIN` and :data:`BATCH_MAX`."""
    paced = size * BATCH_SECONDS / max(seconds, 1e-6)
    return min(BATCH_MAX, max(BATCH_MIN, min(2 * size, int(paced))))


async def _reap_lanes(db: Database, first: _Lane, lanes: _Lanes, reap: LeaseReap) -> None:
    """One connection's lanes: ``first``, then each lane a busy lane gives it, until none is
    left; the batch size it reached carries over."""
    lane: _Lane | None = first
    after, size = FIRST_KEY, BATCH_FIRST
    try:
        async with db.connection() as conn:
            if first.run.write:
                await _prepare(conn, first)
            while lane is not None:
                size = await _reap_lane(conn, db, lane, after, size, lanes, reap)
                handed = None if reap.stopped else await lanes.more()
                lane, after = handed if handed else (None, after)
    finally:
        lanes.stop()  # a lane that stopped or failed leaves none waiting for it


async def _reap_lane(
    conn: Connection,
    db: Database,
    lane: _Lane,
    after: LeaseKey,
    size: int,
    lanes: _Lanes,
    reap: LeaseReap,
) -> int:
    """A lane's batches from ``after``, one after another, each at least one lease past the
    last, giving half of its projects to a lane that waits between them; a batch a row spoils
    is halved until that row is alone, named, and stepped over. Returns the batch size."""
    cut = 0  # how many times the batch at `after` was halved for a row that spoils it
    run = lane.run
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
                return size
            reap.failed.append((failed, db.row_reason(exc)))
        else:
            if key is None:
                return size
            if not cut:
                size = next_batch_size(size, time.monotonic() - began)
        cut = max(0, cut - 1)
        after = key
        if run.monotonic() >= run.deadline or run.stopping():
            reap.stopped = True
            return size
        lane = lanes.give(lane, after)


async def _prepare(conn: Connection, lane: _Lane) -> None:
    """Parse a batch's statement before any batch takes a row lock (on a fresh connection
    that costs as much as a batch): run once over nothing, writing nothing. A refusal is the
    batches' to name."""
    try:
        await conn.fetchrow(
            statement("reap_lease_batch", lane.run.dispatch), *lane.batch_args(FIRST_KEY, 0)
        )
    except PostgresError as exc:
        if not is_row_failure(exc):
            raise


async def _bad_row(conn: Connection, lane: _Lane, after: LeaseKey) -> tuple[UUID, LeaseKey | None]:
    """The lease a batch of one after ``after`` failed on, read without a lock (a role that may
    not lock may read): its job and its key (None: it is no longer there)."""
    row = await conn.fetchrow(statement("lease_rulings"), *lane.pick_args(after, 1))
    if row is None:
        return UUID(int=0), None
    return row["id"], (row["lease_expires_at"], row["id"])


async def _batch(
    conn: Connection, lane: _Lane, after: LeaseKey, size: int, reap: LeaseReap
) -> LeaseKey | None:
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
    conn: Connection, lane: _Lane, after: LeaseKey, size: int, reap: LeaseReap
) -> LeaseKey | None:
    if not lane.run.write:
        return await _dry_run(conn, lane, after, size, reap)
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(QUERIES["walk_leased_expiry_index"])  # this transaction only
        row = await conn.fetchrow(
            statement("reap_lease_batch", lane.run.dispatch), *lane.batch_args(after, size)
        )
        if not row["picked"]:
            await transaction.rollback()
            return None
        key = (row["last_expiry"], row["last_id"])
        appended: list[tuple[UUID, int]] = []
        if row["payloads"]:
            # another writer took those events' numbers first: they go after its events
            events = [
                ledger.Event(stream, payload, digest, True)
                for stream, payload, digest in zip(
                    row["streams"], row["payloads"], row["digests"], strict=True
                )
            ]
            appended = await ledger.append(conn, events, lane.run.now, locked=True)
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
    columns = ("run_streams", "run_firsts", "run_lasts")
    runs = zip(*(row[c] or () for c in columns), strict=True)
    for stream, first, last in [*runs, *((s, n, n) for s, n in appended)]:
        reap.appended(stream, first, last)
    return key


def _tally(reap: LeaseReap, row: Record) -> None:
    columns = ("projects", "parks", "moves", "oldest", "newest")
    reap.add(zip(*(row[c] or () for c in columns), strict=True))


async def _dry_run(
    conn: Connection, lane: _Lane, after: LeaseKey, size: int, reap: LeaseReap
) -> LeaseKey | None:
    """A dry run's batch: the same rulings, read only, nothing locked."""
    async with conn.transaction(readonly=True):
        await conn.execute(QUERIES["walk_leased_expiry_index"])  # this transaction only
        row = await conn.fetchrow(statement("lease_rulings_page"), *lane.pick_args(after, size))
    if row["last_id"] is None:
        return None
    _tally(reap, row)
    key = (row["last_expiry"], row["last_id"])
    reap.lanes[(lane.lane, lane.lanes)] = key
    return key
