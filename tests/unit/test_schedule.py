"""The suite's order under pytest-xdist (tests/support/schedule.py): the long tests head the
workers' shares, and nothing is lost or repeated."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.support.schedule import long_first, share_sizes


@given(st.integers(0, 2000), st.integers(1, 16))
def test_shares_are_cut_as_worksteal_cuts_them(total: int, workers: int) -> None:
    sizes = share_sizes(total, workers)
    assert sum(sizes) == total and max(sizes) - min(sizes) <= 1


@given(st.lists(st.booleans(), max_size=300), st.integers(1, 16))
def test_each_long_test_heads_a_share_and_every_test_stays(
    is_long: list[bool], workers: int
) -> None:
    items = list(range(len(is_long)))
    ordered = long_first(items, is_long, workers)
    assert sorted(ordered) == items
    starts, start = [], 0
    for size in share_sizes(len(items), workers):
        starts.append((start, size))
        start += size
    long = [i for i in items if is_long[i]]
    if len(long) <= workers and all(size > 0 for _, size in starts[: len(long)]):
        assert [ordered[s] for s, _ in starts[: len(long)]] == long
    short = [i for i in ordered if not is_long[i]]
    assert short == sorted(short)  # the others keep their collection order


def test_three_long_tests_side_by_side_go_to_three_workers() -> None:
    is_long = [False] * 40 + [True] * 3 + [False] * 57
    ordered = long_first(list(range(100)), is_long, 10)
    assert ordered[0] == 40 and ordered[10] == 41 and ordered[20] == 42
