"""Observation across passes (``reaper.core.observation``): a counter that has not moved since a
pass first saw a state measures, at least, how long the state has lasted; anything that moves
starts the measurement again; nothing is measured from before it was first seen."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from reaper.core.domain import Condition, Measurements, Thresholds
from reaper.core.judge import judge
from reaper.core.observation import (
    ChannelStats,
    ConsumerSeen,
    Observation,
    QueueFlow,
    Watch,
    observe,
)
from tests.support.queues import queue_stats

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OWNED = frozenset({"vibey.jobs"})
CONSUMER = ConsumerSeen(queue="vibey.jobs", channel="ch-1", tag="worker-1", ack_required=True)


def held(previous: list[Observation], *, acks: int | None, unacked: int, at: datetime):
    return observe(
        previous,
        queues=[],
        channels=[ChannelStats("ch-1", unacked, acks)],
        consumers=[CONSUMER],
        owned=OWNED,
        now=at,
    )


def test_a_hold_is_measured_from_the_first_pass_that_saw_it_and_continued_by_the_next() -> None:
    first = held([], acks=5, unacked=1, at=T0)
    assert [(h.channel, h.seconds) for h in first.held] == [("ch-1", 0.0)]

    later = held(list(first.observations), acks=5, unacked=1, at=T0 + timedelta(seconds=90))

    (hold,) = later.held
    assert (hold.since, hold.seconds, hold.queues, hold.consumers) == (
        T0,
        90.0,
        ("vibey.jobs",),
        ("worker-1",),
    )


def test_an_acknowledgement_starts_the_measurement_again() -> None:
    first = held([], acks=5, unacked=1, at=T0)
    acked = held(list(first.observations), acks=6, unacked=1, at=T0 + timedelta(seconds=90))
    assert [h.seconds for h in acked.held] == [0.0]


def test_nothing_held_is_nothing_watched() -> None:
    first = held([], acks=5, unacked=1, at=T0)
    done = held(list(first.observations), acks=5, unacked=0, at=T0 + timedelta(seconds=90))
    assert done.held == () and done.observations == ()


def test_only_owned_queues_with_acknowledgements_required_are_watched() -> None:
    channels = [ChannelStats("ch-1", 3, None), ChannelStats("ch-2", 3, None)]
    consumers = [
        ConsumerSeen(queue="celery", channel="ch-1", tag="theirs", ack_required=True),
        ConsumerSeen(queue="vibey.jobs", channel="ch-2", tag="auto", ack_required=False),
    ]
    seen = observe([], queues=[], channels=channels, consumers=consumers, owned=OWNED, now=T0)
    assert seen.held == () and seen.observations == ()


def test_a_queue_stalls_while_nothing_is_delivered_and_nothing_ready_goes() -> None:
    first = observe(
        [], queues=[QueueFlow("q", 4, 10)], channels=[], consumers=[], owned=OWNED, now=T0
    )
    more = observe(
        list(first.observations),
        queues=[QueueFlow("q", 6, 10)],  # more arrived: the head is still as old
        channels=[],
        consumers=[],
        owned=OWNED,
        now=T0 + timedelta(seconds=30),
    )
    assert more.stalled["q"].seconds == 30.0
    fewer = observe(
        list(more.observations),
        queues=[QueueFlow("q", 5, 10)],  # one went without a delivery (expired, purged)
        channels=[],
        consumers=[],
        owned=OWNED,
        now=T0 + timedelta(seconds=60),
    )
    assert fewer.stalled["q"].seconds == 0.0
    delivered = observe(
        list(fewer.observations),
        queues=[QueueFlow("q", 5, 11)],
        channels=[],
        consumers=[],
        owned=OWNED,
        now=T0 + timedelta(seconds=90),
    )
    assert delivered.stalled["q"].seconds == 0.0


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(1, 120)),
        min_size=1,
        max_size=12,
    )
)
def test_a_measurement_never_reaches_back_before_the_state_was_first_seen(
    steps: list[tuple[int, int, int]],
) -> None:
    previous: list[Observation] = []
    now = T0
    unchanged_since: datetime | None = None
    last_acks: int | None = None
    for acks, unacked, gap in steps:
        now += timedelta(seconds=gap)
        seen = held(previous, acks=acks, unacked=unacked, at=now)
        if unacked == 0:
            unchanged_since = None
        elif unchanged_since is None or acks != last_acks:
            unchanged_since = now
        last_acks = acks if unacked else None
        expected = [] if unchanged_since is None else [(now - unchanged_since).total_seconds()]
        assert [h.seconds for h in seen.held] == expected
        previous = list(seen.observations)


def test_the_judge_surfaces_a_hold_past_the_longest_lease_on_each_owned_queue() -> None:
    seen = held(
        [Observation(Watch.HELD, "ch-1", T0, 5, 1)],
        acks=5,
        unacked=1,
        at=T0 + timedelta(seconds=7201),
    )
    queue = queue_stats("vibey.jobs", "classic", unacked=1, consumers=1)
    verdicts = judge(
        Measurements(queues=(queue,), observed=seen),
        Thresholds(),
        seen.held[0].since + timedelta(seconds=7201),
    ).verdicts
    hung = [v for v in verdicts if v.condition is Condition.HUNG_HANDLER]
    assert [(v.queue, v.measured, v.threshold) for v in hung] == [("vibey.jobs", 7201, 7200)]
    quiet = held(
        [Observation(Watch.HELD, "ch-1", T0, 5, 1)],
        acks=5,
        unacked=1,
        at=T0 + timedelta(seconds=7200),
    )
    assert not [
        v
        for v in judge(Measurements(queues=(queue,), observed=quiet), Thresholds(), T0).verdicts
        if v.condition is Condition.HUNG_HANDLER
    ]


def test_the_judge_calls_a_queue_with_consumers_and_nothing_delivered_wedged() -> None:
    queue = queue_stats("vibey.jobs", ready=3, unacked=1, consumers=1, deliveries=1)
    previous = [Observation(Watch.STALLED, "vibey.jobs", T0, 1, 3)]
    now = T0 + timedelta(seconds=901)
    seen = observe(
        previous,
        queues=[QueueFlow("vibey.jobs", 3, 1)],
        channels=[],
        consumers=[],
        owned=OWNED,
        now=now,
    )
    (stale,) = [
        v
        for v in judge(Measurements(queues=(queue,), observed=seen), Thresholds(), now).verdicts
        if v.condition is Condition.STALE_READY
    ]
    assert stale.measured == 901 and stale.detail.startswith("wedged: 3 ready message(s)")
