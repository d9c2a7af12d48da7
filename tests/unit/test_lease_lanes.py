"""How one page's lease moves are split into lanes (``reaper.jobqueue.leases``): by whole
projects, so that no two lanes share a ledger stream, and as evenly as whole projects allow,
since the lanes run at once and a page takes as long as its longest lane."""

from __future__ import annotations

from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from reaper.jobqueue.leases import lanes_by_project

projects = st.dictionaries(
    st.integers(0, 2**64).map(lambda n: UUID(int=n)), st.integers(1, 5000), max_size=200
)


@settings(deadline=None, max_examples=200)
@given(projects, st.integers(1, 4))
def test_every_project_goes_whole_to_one_lane_and_the_lanes_are_even(
    moves: dict[UUID, int], lanes: int
) -> None:
    lane_of = lanes_by_project(moves, lanes)

    assert lane_of.keys() == moves.keys()
    assert set(lane_of.values()) <= set(range(lanes))
    loads = [sum(n for p, n in moves.items() if lane_of[p] == lane) for lane in range(lanes)]
    assert max(loads) - min(loads) <= max(moves.values(), default=0)


def test_uneven_projects_are_spread_evenly() -> None:
    sizes = {UUID(int=1): 50, UUID(int=2): 30, UUID(int=3): 20, UUID(int=4): 10, UUID(int=5): 10}
    lane_of = lanes_by_project(sizes, 2)
    loads = [sum(n for p, n in sizes.items() if lane_of[p] == lane) for lane in (0, 1)]
    assert sorted(loads) == [60, 60]  # split by id parity, these would be 80 and 40
    assert lanes_by_project(sizes, 1) == dict.fromkeys(sizes, 0)
