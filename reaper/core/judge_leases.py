"""Expired leases judged a page at a time, column by column (SPEC §1 (a), (c)). Pure.

The lease reap judges thousands of leases per pass, and a verdict object per routine requeue
is most of what judging them would cost. So a page of leases arrives as plain columns
(:class:`LeaseColumns`, straight from the rows read) and the judge answers in columns too
(:class:`LeaseRulings`): which rows are past their grace, which of those are poison (park) and
which are expired (requeue), how far past, and the detail each event records. A full
:class:`~reaper.core.domain.Verdict` is built only when something asks for one
(:meth:`LeaseRulings.verdict`): the report, a test. The rule for a lease is this module's
alone: :func:`reaper.core.judge.judge` judges the rest of a pass's measurements.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final
from uuid import UUID

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

__all__ = ["RULING_KINDS", "LeaseColumns", "LeaseRulings", "judge_lease_page"]

_MICROSECOND = timedelta(microseconds=1)

#: A lease ruling's condition and action, by whether the lease is poison.
RULING_KINDS: Final = {
    False: (Condition.LEASE_EXPIRED, Action.REQUEUE),
    True: (Condition.POISON, Action.PARK),
}


@dataclass(frozen=True, slots=True)
class LeaseColumns:
    """A page of leases as read, one sequence per :class:`HeldLease` field, in read order."""

    job_ids: Sequence[UUID]
    project_ids: Sequence[UUID]
    kinds: Sequence[str]
    owners: Sequence[str | None]
    expiries: Sequence[datetime]
    attempts: Sequence[int]
    max_attempts: Sequence[int]

    def __len__(self) -> int:
        return len(self.job_ids)

    @classmethod
    def of_rows(cls, rows: Sequence[Sequence[object]]) -> LeaseColumns:
        """Columns of rows laid out as :class:`HeldLease`'s fields."""
        if not rows:
            return cls((), (), (), (), (), (), ())
        return cls(*zip(*rows, strict=True))

    @classmethod
    def of_leases(cls, leases: Iterable[HeldLease]) -> LeaseColumns:
        return cls.of_rows(
            [
                (
                    lease.job_id,
                    lease.project_id,
                    lease.kind,
                    lease.lease_owner,
                    lease.lease_expires_at,
                    lease.attempts,
                    lease.max_attempts,
                )
                for lease in leases
            ]
        )

    def lease(self, i: int) -> HeldLease:
        return HeldLease(
            self.job_ids[i],
            self.project_ids[i],
            self.kinds[i],
            self.owners[i],
            self.expiries[i],
            self.attempts[i],
            self.max_attempts[i],
        )

    def last_key(self) -> tuple[datetime, UUID] | None:
        """Where the next page starts: after this page's last (expiry, job id)."""
        if not self.job_ids:
            return None
        return self.expiries[-1], self.job_ids[-1]


@dataclass(frozen=True, slots=True)
class LeaseRulings:
    """The judge's rulings on one :class:`LeaseColumns` page: for each lease past its grace
    (``rows``: its position in the page), whether it is poison (park) or merely expired
    (requeue), its measurement (attempts for poison, seconds past expiry otherwise) and its
    detail. A lease not past its grace has no ruling: nothing is concluded from it."""

    grace: int
    rows: tuple[int, ...]
    poison: tuple[bool, ...]
    measured: tuple[float | int, ...]
    details: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def condition(self, k: int) -> Condition:
        return RULING_KINDS[self.poison[k]][0]

    def action(self, k: int) -> Action:
        return RULING_KINDS[self.poison[k]][1]

    def threshold(self, page: LeaseColumns, k: int) -> int:
        return page.max_attempts[self.rows[k]] if self.poison[k] else self.grace

    def unit(self, k: int) -> Unit:
        return Unit.ATTEMPTS if self.poison[k] else Unit.SECONDS

    def verdict(self, page: LeaseColumns, k: int) -> Verdict:
        """Ruling ``k`` as a full verdict, carrying its lease as read."""
        i = self.rows[k]
        poison = self.poison[k]
        condition, action = RULING_KINDS[poison]
        return Verdict(
            source=Source.JOB_QUEUE,
            object=str(page.job_ids[i]),
            condition=condition,
            measured=self.measured[k],
            threshold=page.max_attempts[i] if poison else self.grace,
            unit=Unit.ATTEMPTS if poison else Unit.SECONDS,
            action=action,
            project_id=page.project_ids[i],
            detail=self.details[k],
            lease=page.lease(i),
        )

    def verdicts(self, page: LeaseColumns) -> Iterator[Verdict]:
        return (self.verdict(page, k) for k in range(len(self.rows)))


def judge_lease_page(page: LeaseColumns, thresholds: Thresholds, now: datetime) -> LeaseRulings:
    """Rule on every lease of ``page``: past ``lease_grace_seconds`` (rounded up to the
    millisecond, as every measurement is) with its attempts spent is poison (park behind a
    ``delivery_exhausted`` gate); past the grace otherwise is expired (requeue); not yet past
    the grace concludes nothing (the store's filter is not trusted). ``now`` must be
    timezone-aware."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    grace = thresholds.lease_grace_seconds
    rows: list[int] = []
    poison: list[bool] = []
    measured: list[float | int] = []
    details: list[str] = []
    owners: dict[str | None, str] = {}  # a page has few holders: quote each once
    kinds, attempts_of, max_of = page.kinds, page.attempts, page.max_attempts
    micro = _MICROSECOND
    for i, (owner, expiry) in enumerate(zip(page.owners, page.expiries, strict=True)):
        past = -(-((now - expiry) // micro) // 1000) / 1000  # ceil_seconds
        if not past > grace:
            continue
        held = owners.get(owner)
        if held is None:
            held = owners[owner] = quote_owner(owner, "no recorded owner", more="…")
        attempts, limit = attempts_of[i], max_of[i]
        rows.append(i)
        past_text = num(past)
        if attempts >= limit:
            poison.append(True)
            measured.append(attempts)
            details.append(
                f"lease of {kinds[i]} job held by {held} expired {past_text}s ago with "
                f"{attempts} of {limit} attempts spent: park for a person "
                "(delivery_exhausted gate)"
            )
        else:
            poison.append(False)
            measured.append(past)
            details.append(
                f"lease of {kinds[i]} job held by {held} expired {past_text}s ago, past the "
                f"grace of {grace}s: requeue (attempt {attempts} of {limit} spent)"
            )
    return LeaseRulings(grace, tuple(rows), tuple(poison), tuple(measured), tuple(details))
