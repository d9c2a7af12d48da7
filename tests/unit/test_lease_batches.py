"""How a lane's lease batches are sized (``reaper.jobqueue.lease_reap``): each batch is one
transaction holding its rows' locks until it commits, so the next batch is sized from how long
the last took, to end within ``BATCH_SECONDS``, within the bounds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reaper.jobqueue.lease_reap import BATCH_MAX, BATCH_MIN, BATCH_SECONDS, next_batch_size


def test_a_slow_batch_makes_the_next_smaller_and_a_quick_one_larger() -> None:
    assert next_batch_size(500, BATCH_SECONDS * 2) == 250
    assert next_batch_size(500, BATCH_SECONDS) == 500
    assert next_batch_size(500, BATCH_SECONDS / 1.5) == 750
    # growth at most twofold at a time, and never beyond the most
    assert next_batch_size(200, BATCH_SECONDS / 100) == 400
    assert next_batch_size(800, BATCH_SECONDS / 100) == BATCH_MAX
    # a database that has stalled cuts batches down to the fewest, no further
    assert next_batch_size(500, 60.0) == BATCH_MIN
    assert next_batch_size(500, 0.0) == BATCH_MAX


@settings(deadline=None, max_examples=300)
@given(st.integers(1, 5000), st.floats(0, 1000, allow_nan=False))
def test_the_next_batch_stays_within_its_bounds(size: int, seconds: float) -> None:
    nxt = next_batch_size(size, seconds)
    assert BATCH_MIN <= nxt <= BATCH_MAX
    assert nxt <= max(BATCH_MIN, 2 * size)
