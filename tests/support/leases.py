"""Leases for the in-memory job queue (``reaper.testing.memory``): a leased row of a job that
became due an hour before ``now``, and a run of expired ones, as the unit tests of the pass and
the worker hook build them."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from reaper.testing.memory import JobRow, MemoryJobQueue


def lease_row(
    project: uuid.UUID,
    owner: str,
    expires_at: datetime,
    *,
    now: datetime,
    attempts: int = 1,
) -> JobRow:
    """A job of ``project`` due an hour before ``now``, leased by ``owner`` until
    ``expires_at`` with ``attempts`` spent."""
    return JobRow(
        project_id=project,
        run_after=now - timedelta(hours=1),
        state="leased",
        attempts=attempts,
        lease_owner=owner,
        lease_expires_at=expires_at,
    )


def add_expired_leases(
    store: MemoryJobQueue,
    count: int,
    *,
    now: datetime,
    owner: Callable[[int], str],
    expired_ago: Callable[[int], timedelta],
) -> list[uuid.UUID]:
    """``count`` expired leases in one new project: the ``n``-th held by ``owner(n)``, run out
    ``expired_ago(n)`` before ``now``. Their ids, in order."""
    project = uuid.uuid4()
    return [
        store.add_job(lease_row(project, owner(n), now - expired_ago(n), now=now))
        for n in range(count)
    ]
