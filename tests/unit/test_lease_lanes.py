"""How a lease reap's lanes share the work (``reaper.jobqueue.lease_reap``): a lane is the
projects whose id hashes to one remainder, so no two lanes share a stream; a lane that runs out
while another works takes half of that lane's projects from the key it has reached, between its
batches; a dry run's lanes keep theirs."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from reaper.core.domain import Dispatch
from reaper.jobqueue.lease_reap import FIRST_KEY, NARROWEST, _Lane, _Lanes
from reaper.jobqueue.port import LeaseReapRun

RUN = LeaseReapRun(datetime(2026, 12, 7, tzinfo=UTC), 0, None, Dispatch.POLLING, True)
KEY = (datetime(2026, 12, 6, tzinfo=UTC), FIRST_KEY[1])


@given(st.sampled_from([1, 2, 4]), st.data(), st.integers(0, 2**31 - 1))
def test_a_lanes_halves_hold_its_projects_each_in_one(
    lanes: int, data: st.DataObject, h: int
) -> None:
    lane = _Lane(RUN, data.draw(st.integers(0, lanes - 1)), lanes)
    kept, given_ = lane.halves()
    owners = [x for x in (kept, given_) if h % x.lanes == x.lane]
    assert len(owners) == (1 if h % lane.lanes == lane.lane else 0)


async def test_a_lane_that_runs_out_takes_half_of_a_busy_lanes_projects() -> None:
    lanes = _Lanes(2, share=True)
    busy = _Lane(RUN, 0, 2)
    assert lanes.give(busy, KEY) is busy  # nobody waits: it keeps them all
    asking = asyncio.ensure_future(lanes.more())  # lane 1 ran out
    await asyncio.sleep(0)
    assert not asking.done()  # it waits for a busy lane's next batch boundary
    kept = lanes.give(busy, KEY)
    assert (kept.lane, kept.lanes) == (0, 4)
    given_, after = await asking
    assert (given_.lane, given_.lanes, after) == (2, 4, KEY)  # from the key the busy lane reached
    assert lanes.working == 2


async def test_the_last_lane_to_run_out_releases_every_lane_that_waits() -> None:
    lanes = _Lanes(3, share=True)
    waiting = [asyncio.ensure_future(lanes.more()) for _ in range(2)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiting)
    assert await lanes.more() is None
    assert await asyncio.gather(*waiting) == [None, None]


async def test_a_lane_that_fails_or_stops_leaves_none_waiting() -> None:
    lanes = _Lanes(2, share=True)
    waiting = asyncio.ensure_future(lanes.more())
    await asyncio.sleep(0)
    lanes.stop()  # what a lane does on its way out, whatever took it out
    assert await waiting is None
    busy = _Lane(RUN, 0, 2)
    assert lanes.give(busy, KEY) is busy


async def test_a_dry_runs_lanes_and_the_narrowest_lanes_keep_their_projects() -> None:
    dry = _Lanes(2, share=False)
    assert await dry.more() is None  # a dry run's lane that ran out is done at once
    lanes = _Lanes(2, share=True)
    waiting = asyncio.ensure_future(lanes.more())
    await asyncio.sleep(0)
    narrow = _Lane(RUN, 3, NARROWEST)
    assert lanes.give(narrow, KEY) is narrow and not waiting.done()
    lanes.stop()
    assert await waiting is None
