"""Expired leases judged, purely (SPEC §1 (a), (c)).

The rule for a lease is this module's alone: :func:`reaper.core.judge.judge` judges the rest of
a pass's measurements. A pass does not run it on its leases: the store rules on them in SQL, a
batch at a time, as this rule does (its twin, held to the same rulings and event payloads by
a property test); the in-memory double and the tests rule with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final

from reaper.core.canonical import quote_owner
from reaper.core.domain import (
    Action,
    Condition,
    HeldLease,
    Source,
    Thresholds,
    Unit,
    Verdict,
)
from reaper.core.judge_queues import num

__all__ = ["RULING_KINDS", "judge_lease_page"]

_MICROSECOND = timedelta(microseconds=1)

#: A lease ruling's condition and action, by whether the lease is poison.
RULING_KINDS: Final = {
    False: (Condition.LEASE_EXPIRED, Action.REQUEUE),
    True: (Condition.POISON, Action.PARK),
}


def judge_lease_page(
    leases: Iterable[HeldLease], thresholds: Thresholds, now: datetime
) -> list[Verdict]:
    """Rule on every lease: past ``lease_grace_seconds`` (rounded up to the millisecond, as
    every measurement is) with its attempts spent is poison (park behind a
    ``delivery_exhausted`` gate); past the grace otherwise is expired (requeue); not yet past
    the grace concludes nothing (the store's filter is not trusted). ``now`` must be
    timezone-aware. The store's SQL (``reaper/jobqueue/sql/lease_reap.sql``) is this rule's twin,
    held to the same rulings and payloads by ``tests/integration/test_lease_reap_sql.py``."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    grace = thresholds.lease_grace_seconds
    verdicts: list[Verdict] = []
    for lease in leases:
        past = -(-((now - lease.lease_expires_at) // _MICROSECOND) // 1000) / 1000  # ceil ms
        if not past > grace:
            continue
        held = quote_owner(lease.lease_owner, "no recorded owner", more="…")
        attempts, limit = lease.attempts, lease.max_attempts
        poison = attempts >= limit
        if poison:
            detail = (
                f"lease of {lease.kind} job held by {held} expired {num(past)}s ago with "
                f"{attempts} of {limit} attempts spent: park for a person "
                "(delivery_exhausted gate)"
            )
        else:
            detail = (
                f"lease of {lease.kind} job held by {held} expired {num(past)}s ago, past the "
                f"grace of {grace}s: requeue (attempt {attempts} of {limit} spent)"
            )
        condition, action = RULING_KINDS[poison]
        verdicts.append(
            Verdict(
                source=Source.JOB_QUEUE,
                object=str(lease.job_id),
                condition=condition,
                measured=attempts if poison else past,
                threshold=limit if poison else grace,
                unit=Unit.ATTEMPTS if poison else Unit.SECONDS,
                action=action,
                project_id=lease.project_id,
                detail=detail,
                lease=lease,
            )
        )
    return verdicts
