"""The pass's lease log (``reaper.reap.lease_log``): pages spooled column by column and read
back as the verdicts they were, with what was recorded, however many pages and passes over it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from reaper.core.domain import Action, Condition, Thresholds
from reaper.core.judge_leases import LeaseColumns, judge_lease_page
from reaper.reap.lease_log import LeaseLog

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _page(first: int, size: int) -> LeaseColumns:
    return LeaseColumns.of_rows(
        [
            (
                UUID(int=first + n),
                UUID(int=n % 3 + 1),
                "build" if n % 2 else "mail",
                None if n % 5 == 0 else f"worker-{n % 4}",
                NOW - timedelta(seconds=31 + n * 7.25),
                7 if n % 4 == 0 else 2,
                7,
            )
            for n in range(size)
        ]
    )


def test_pages_come_back_as_their_verdicts_with_what_was_recorded() -> None:
    log = LeaseLog()
    expected = []
    for first, size in ((1000, 9), (2000, 1), (3000, 12)):
        page = _page(first, size)
        rulings = judge_lease_page(page, Thresholds(), NOW)
        moved = {page.job_ids[i] for i in rulings.rows[::2]}
        log.add(page, rulings, moved)
        expected += [(v, v.lease.job_id in moved) for v in rulings.verdicts(page)]
    try:
        for _ in range(2):  # a second reading finds the same
            assert [(r.verdict, r.recorded) for r in log] == expected
        assert len(log) == len(expected) == 22
        assert sum(log.tally.values()) == 22
        parked = sum(n for (c, a, _, _), n in log.tally.items() if a is Action.PARK)
        assert parked == sum(1 for v, _ in expected if v.condition is Condition.POISON) > 0
    finally:
        log.close()
