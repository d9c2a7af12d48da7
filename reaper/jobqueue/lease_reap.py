"""The lease reap as PostgreSQL does it: one statement per batch picks a lane's next expired
leases, rules on each as the lease judge would, moves it and appends its event (SPEC §1 (a),
(c); §3; §8).

Python sends each batch's bounds and thresholds and reads back one row of counts: no lease is
held here. The lanes split the projects whole (no two lanes share a ledger stream), each on its
own pooled connection; each batch takes its lane's stream locks first, then runs
``reap_leases`` in the same transaction. A batch a row spoils (a trigger raising, a constraint
violated) is halved down to that row, which is named and stepped over. Batches are sized to
end in about :data:`~reaper.jobqueue.leases.LEASE_BATCH_SECONDS`, as the page moves were.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

from reaper.core.canonical import digest_of
from reaper.core.domain import Dispatch
from reaper.jobqueue import ledger
from reaper.jobqueue.database import (
    Connection,
    Database,
    PostgresError,
    is_row_failure,
    is_transient,
)
from reaper.jobqueue.leases import (
    LEASE_BATCH_MIN,
    LEASE_BATCH_SIZE,
    LEASE_LANES,
    lanes_by_project,
    next_batch_size,
)
from reaper.jobqueue.rules import DELIVERY_EXHAUSTED_CHOICES
from reaper.jobqueue.sql import QUERIES

__all__ = [
    "CommitUnknown",
    "ExpiredLeases",
    "LeaseReap",
    "ProjectReap",
    "expired_leases",
    "reap_lease_batch",
    "reap_leases",
    "reap_statement",
]

_CHOICES: Final = json.dumps(list(DELIVERY_EXHAUSTED_CHOICES))
_FIRST_KEY: Final = (datetime(1, 1, 1, tzinfo=UTC), UUID(int=0))
_DEADLOCK_ATTEMPTS: Final = 3
_OUTBOX_MARK: Final = "-- outbox"


def reap_statement(dispatch: Dispatch) -> str:
    """``reap_leases`` as ``dispatch`` needs it: its outbox lines only with an outbox."""
    text = QUERIES["reap_leases"]
    if dispatch is Dispatch.OUTBOX:
        return text
    return "\n".join(ln for ln in text.splitlines() if not ln.endswith(_OUTBOX_MARK))


@dataclass
class ProjectReap:
    """What a pass's lease reap did in one project, and where its events are."""

    requeued: int = 0
    parked: int = 0
    first_seq: int | None = None
    last_seq: int | None = None


@dataclass
class LeaseReap:
    """What a lease reap did, as counts: no lease is kept. ``failed``: each row that spoiled
    its batch, with why; ``unknown``: leases in a batch whose COMMIT got no answer."""

    projects: dict[UUID, ProjectReap] = field(default_factory=dict)
    oldest: datetime | None = None
    newest: datetime | None = None
    failed: list[tuple[UUID, str]] = field(default_factory=list)
    unknown: int = 0
    #: Set when the budget ran out before a lane's last batch.
    cut_short: bool = False

    @property
    def requeued(self) -> int:
        return sum(p.requeued for p in self.projects.values())

    @property
    def parked(self) -> int:
        return sum(p.parked for p in self.projects.values())

    def add(self, row: Mapping[str, Any]) -> None:
        """One batch's row of ``reap_leases``, once its transaction committed."""
        for n, project in enumerate(row["projects"] or ()):
            done = self.projects.setdefault(project, ProjectReap())
            done.requeued += row["requeued"][n]
            done.parked += row["parked"][n]
            first, last = row["first_seqs"][n], row["last_seqs"][n]
            done.first_seq = first if done.first_seq is None else min(done.first_seq, first)
            done.last_seq = last if done.last_seq is None else max(done.last_seq, last)
        if row["oldest"] is not None:
            self.oldest = min(self.oldest or row["oldest"], row["oldest"])
            self.newest = max(self.newest or row["newest"], row["newest"])


@dataclass(frozen=True)
class ExpiredLeases:
    """Leases expired beyond the grace in one project, as ``expired_lease_projects`` counts
    them: how many, how many of those have their attempts spent, the oldest and newest."""

    project_id: UUID
    leases: int
    poison: int
    oldest: datetime
    newest: datetime


async def expired_leases(
    db: Database, now: datetime, grace_seconds: int, project_id: UUID | None
) -> list[ExpiredLeases]:
    """Every project's expired leases, counted (what a dry run says; what a reap splits)."""
    async with db.session("counting expired leases") as conn:
        rows = await conn.fetch(QUERIES["expired_lease_projects"], now, grace_seconds, project_id)
    return [ExpiredLeases(*row) for row in rows]


async def reap_lease_batch(
    conn: Connection,
    statement: str,
    now: datetime,
    grace_seconds: int,
    size: int,
    projects: Sequence[UUID],
    after: tuple[datetime, UUID],
) -> Mapping[str, Any]:
    """One batch, in one transaction: the lane's stream locks, then ``reap_leases``; the
    events whose numbers a host writer took first are appended after its own. A COMMIT that
    gets no answer raises :class:`CommitUnknown`."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        await ledger.lock_streams(conn, projects)
        row: Mapping[str, Any] | None = await conn.fetchrow(
            statement, now, grace_seconds, size, list(projects), *after, _CHOICES
        )
        assert row is not None  # an aggregate: always one row
        if row["unwritten_payloads"]:
            pairs = zip(row["unwritten_projects"], row["unwritten_payloads"], strict=True)
            events = [ledger.Event(p, text, digest_of(text), True) for p, text in pairs]
            await ledger.append(conn, events, now, locked=True)
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
        raise CommitUnknown(row["ruled"], exc) from exc
    return row


class CommitUnknown(Exception):
    """A batch's COMMIT got no answer: it may or may not have been applied."""

    def __init__(self, size: int, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.size = size
        self.cause = cause


async def reap_leases(
    db: Database,
    now: datetime,
    grace_seconds: int,
    dispatch: Dispatch,
    expired: Sequence[ExpiredLeases],
    *,
    deadline: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> LeaseReap:
    """Reap the leases of the ``expired`` projects (as :func:`expired_leases` counted them)
    in lanes, until none is left or ``deadline`` (by ``monotonic``) has passed. Raises
    :class:`StoreUnavailable` when the database goes away; ``done`` then still holds what
    committed (it is filled as batches commit): the caller passes its own."""
    done = LeaseReap()
    await reap_into(db, now, grace_seconds, dispatch, expired, done, deadline, monotonic)
    return done


async def reap_into(
    db: Database,
    now: datetime,
    grace_seconds: int,
    dispatch: Dispatch,
    expired: Sequence[ExpiredLeases],
    done: LeaseReap,
    deadline: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """:func:`reap_leases` into ``done``, which keeps what committed if this raises."""
    count = max(1, min(LEASE_LANES, db.pool_size))
    lane_of = lanes_by_project({e.project_id: e.leases for e in expired}, count)
    lanes: list[list[UUID]] = [[] for _ in range(count)]
    for project, lane in sorted(lane_of.items()):
        lanes[lane].append(project)
    statement = reap_statement(dispatch)
    runner = _Lane(db, statement, now, grace_seconds, done, deadline, monotonic)
    async with db.seam("moving expired leases"):
        results = await asyncio.gather(
            *(runner.run(projects) for projects in lanes if projects), return_exceptions=True
        )
        for result in results:
            if isinstance(result, CommitUnknown):
                done.unknown += result.size
                raise result.cause
        for result in results:
            if isinstance(result, BaseException):
                raise result


@dataclass
class _Lane:
    db: Database
    statement: str
    now: datetime
    grace: int
    done: LeaseReap
    deadline: float
    monotonic: Callable[[], float]

    async def run(self, projects: list[UUID]) -> None:
        after = _FIRST_KEY
        size = LEASE_BATCH_SIZE // 2  # until paced
        async with self.db.connection() as conn:
            await conn.execute("SET enable_bitmapscan = off")  # see walk_leased_expiry_index
            try:
                while True:
                    if self.monotonic() >= self.deadline:
                        self.done.cut_short = True
                        return
                    began = self.monotonic()
                    row = await self._batch(conn, projects, size, after)
                    if row is None:  # a row spoiled a batch of one: named, stepped over
                        after = await _next_key(conn, self, projects, after)
                        size = LEASE_BATCH_MIN
                        continue
                    if not row["picked"]:
                        return
                    self.done.add(row)
                    after = (row["last_expiry"], row["last_id"])
                    if row["picked"] < size:
                        return
                    size = next_batch_size(size, self.monotonic() - began)
            finally:
                with contextlib.suppress(Exception):
                    if not conn.is_closed():
                        await conn.execute("RESET enable_bitmapscan")

    async def _batch(
        self, conn: Connection, projects: list[UUID], size: int, after: tuple[datetime, UUID]
    ) -> Mapping[str, Any] | None:
        """A batch of ``size``, halved while a row spoils it; None: the next row alone did."""
        while True:
            for attempt in range(_DEADLOCK_ATTEMPTS):
                try:
                    return await self._commit(conn, projects, size, after)
                except PostgresError as exc:
                    if not is_row_failure(exc):
                        raise
                    if is_transient(exc) and attempt + 1 < _DEADLOCK_ATTEMPTS:
                        continue
                    if size == 1:
                        job = await _next_job(conn, self, projects, after)
                        self.done.failed.append((job, self.db.row_reason(exc)))
                        return None
                    break
            size = max(1, size // 2)

    async def _commit(
        self, conn: Connection, projects: list[UUID], size: int, after: tuple[datetime, UUID]
    ) -> Mapping[str, Any]:
        return await reap_lease_batch(
            conn, self.statement, self.now, self.grace, size, projects, after
        )


async def _next_job(
    conn: Connection, lane: _Lane, projects: list[UUID], after: tuple[datetime, UUID]
) -> UUID:
    key = await _next_key(conn, lane, projects, after)
    return key[1]


async def _next_key(
    conn: Connection, lane: _Lane, projects: list[UUID], after: tuple[datetime, UUID]
) -> tuple[datetime, UUID]:
    """The key of the lane's next expired lease after ``after`` (the row a batch of one
    could not move)."""
    row = await conn.fetchrow(
        QUERIES["next_expired_lease"], lane.now, lane.grace, list(projects), *after
    )
    if row is None:
        return after
    return row["lease_expires_at"], row["id"]
