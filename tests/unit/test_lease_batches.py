"""How a lane's lease moves are cut into batches (``reaper.jobqueue.leases``): each batch is
one transaction holding its rows' locks until it commits, so the next batch is sized from how
long the last took, to end within ``LEASE_BATCH_SECONDS``, within the bounds; and what a batch
sends of its events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

from hypothesis import given, settings
from hypothesis import strategies as st

from reaper.core.canonical import canonical_payload, digest_of
from reaper.core.domain import HeldLease, Thresholds
from reaper.core.judge_leases import LeaseColumns, judge_lease_page
from reaper.jobqueue.leases import (
    LEASE_BATCH_MIN,
    LEASE_BATCH_SECONDS,
    LEASE_BATCH_SIZE,
    _batch_end,
    _LeaseMoves,
    next_batch_size,
)


def test_a_slow_batch_makes_the_next_smaller_and_a_quick_one_larger() -> None:
    assert next_batch_size(500, LEASE_BATCH_SECONDS * 2) == 250
    assert next_batch_size(500, LEASE_BATCH_SECONDS) == 500
    assert next_batch_size(500, LEASE_BATCH_SECONDS / 1.5) == 750
    # growth at most twofold at a time, and never beyond the most
    assert next_batch_size(200, LEASE_BATCH_SECONDS / 100) == 400
    assert next_batch_size(800, LEASE_BATCH_SECONDS / 100) == LEASE_BATCH_SIZE
    # a database that has stalled cuts batches down to the fewest, no further
    assert next_batch_size(500, 60.0) == LEASE_BATCH_MIN
    assert next_batch_size(500, 0.0) == LEASE_BATCH_SIZE


@settings(deadline=None, max_examples=300)
@given(st.integers(1, 5000), st.floats(0, 1000, allow_nan=False))
def test_the_next_batch_stays_within_its_bounds(size: int, seconds: float) -> None:
    nxt = next_batch_size(size, seconds)
    assert LEASE_BATCH_MIN <= nxt <= LEASE_BATCH_SIZE
    assert nxt <= max(LEASE_BATCH_MIN, 2 * size)


@settings(deadline=None, max_examples=300)
@given(
    st.integers(0, 20_000),
    st.lists(st.integers(LEASE_BATCH_MIN, LEASE_BATCH_SIZE), min_size=1, max_size=400),
)
def test_batches_cover_a_lane_once_each_within_the_most(total: int, sizes: list[int]) -> None:
    start, batches = 0, []
    while start < total:
        stop = _batch_end(start, sizes[len(batches) % len(sizes)], total)
        assert start < stop <= total
        assert stop - start <= LEASE_BATCH_SIZE
        batches.append((start, stop))
        start = stop
    assert start == total


def test_a_small_tail_joins_the_batch_before_it() -> None:
    assert _batch_end(0, 500, 620) == 620
    assert _batch_end(0, 500, 900) == 500
    assert _batch_end(0, 1000, 1400) == 1000  # joined, it would exceed the most


_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)


@settings(deadline=None, max_examples=100)
@given(
    st.lists(
        st.tuples(_TEXT, st.one_of(st.none(), _TEXT), st.integers(0, 9), st.integers(1, 9)),
        min_size=1,
        max_size=12,
    ),
    st.data(),
)
def test_a_batch_sends_each_event_as_its_verdict_would_record_it(
    leases: list[tuple[str, str | None, int, int]], data: st.DataObject
) -> None:
    """The batch's payloads travel as one text between U+001E separators and its digests as
    one string of bytes end to end: whatever a host put in a job's kind or owner (that separator
    included), each move's part is exactly its verdict's canonical payload and digest."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    page = LeaseColumns.of_leases(
        HeldLease(uuid4(), uuid4(), kind, owner, now - timedelta(seconds=3600 + n), attempts, limit)
        for n, (kind, owner, attempts, limit) in enumerate(leases)
    )
    rulings = judge_lease_page(page, Thresholds(), now)
    moves = _LeaseMoves()
    moves.add_rulings(page, rulings, list(range(len(rulings))))
    start = data.draw(st.integers(0, len(moves) - 1))
    stop = data.draw(st.integers(start + 1, len(moves)))
    args = moves.args(start, stop, now)
    payloads, digests = args[10], args[11]
    assert isinstance(payloads, str) and isinstance(digests, bytes)
    expected = [canonical_payload(v) for v in rulings.verdicts(page)][start:stop]
    assert payloads.split("\x1e") == expected
    assert [digests[n : n + 32].hex() for n in range(0, len(digests), 32)] == [
        digest_of(p) for p in expected
    ]
    assert [moves.event(i).canonical for i in range(start, stop)] == expected
