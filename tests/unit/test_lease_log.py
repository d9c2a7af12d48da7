"""The pass's lease log (``reaper.reap.lease_log``): each batch the store hands it (every move's
stream and event payload, one text) spooled, and read back as the verdicts their events record,
with what was recorded, however many batches and passes over it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

from reaper.core.canonical import canonical_json
from reaper.core.domain import Action, Condition, HeldLease, Thresholds, Verdict
from reaper.core.judge_leases import judge_lease_page
from reaper.jobqueue.port import LeaseReap
from reaper.reap.lease_log import LeaseLog

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _page(first: int, size: int) -> list[HeldLease]:
    return [
        HeldLease(
            UUID(int=first + n),
            UUID(int=n % 3 + 1),
            "build" if n % 2 else "mail",
            None if n % 5 == 0 else f'worker-{n % 4} "quoted" \\ é\n',
            NOW - timedelta(seconds=31 + n * 7.25),
            7 if n % 4 == 0 else 2,
            7,
        )
        for n in range(size)
    ]


def kept(verdicts: list[Verdict]) -> str:
    """A batch as a store hands it: each move's stream and canonical payload."""
    return "\x1e".join(f"{v.project_id}{canonical_json(v.payload())}" for v in verdicts)


def test_batches_come_back_as_the_verdicts_their_events_record() -> None:
    log = LeaseLog()
    expected = []
    reap = LeaseReap()
    for first, size, recorded in ((1000, 9, True), (2000, 1, False), (3000, 12, True)):
        page = _page(first, size)
        verdicts = judge_lease_page(page, Thresholds(), NOW)
        log.keep(kept(verdicts), recorded)
        reap.add([(v.project_id, v.action is Action.PARK, 1) for v in verdicts], None, None)  # type: ignore[misc]
        expected += [(replace(v, lease=None), recorded) for v in verdicts]
    log.count(reap, True)
    try:
        for _ in range(2):  # a second reading finds the same
            assert [(r.verdict, r.recorded) for r in log] == expected
        assert len(log) == len(expected) == 22
        parked = sum(n for (c, a, _, _), n in log.tally.items() if a is Action.PARK)
        assert parked == sum(1 for v, _ in expected if v.condition is Condition.POISON) > 0
    finally:
        log.close()
