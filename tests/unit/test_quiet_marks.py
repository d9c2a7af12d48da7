"""Quiet passes touch nothing (SPEC §8), the pure half and the pass over the fakes: a queue whose
listing still matches a proven mark is not fetched; anything missing, lower, higher or different
is read, as before; a mark is proven only by a read that saw every letter listed parked, from a
listing that had counted the reaper's earlier gets."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reaper.broker.records import LAVINMQ, QUEUE_COLUMNS, queue_of
from reaper.config import Settings
from reaper.core.dead_letters import (
    QUIET_PROOF_SECONDS,
    UNCOUNTED_REMOVALS,
    QuietMark,
    quiet_decision,
    quiet_mark,
)
from reaper.core.domain import QueueCounters, QueueStats
from reaper.reap.context import Mode
from reaper.reap.result import PassResult
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources
from reaper.testing.memory import MemoryJobQueue
from tests.support.fake_broker import FakeBroker
from tests.support.lavinmq_recorded import load, project
from tests.support.queues import queue_stats
from tests.unit.test_quiet_dead_letters import message

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DLQ = "vibey.jobs.dead"


def listed(
    ready: int = 5,
    *,
    bytes_: int | None = 120,
    published: int | None = None,
    fetched: int | None = 40,
    acknowledged: int | None = None,
    **fields: object,
) -> QueueStats:
    """The DLQ as a listing shows it: ``ready`` letters, every counter as given."""
    counters = QueueCounters(published, fetched, acknowledged, bytes_)
    queue = queue_stats(DLQ, "classic", ready=ready, counters=counters)
    return replace(queue, **fields)  # type: ignore[arg-type]


def proven(before: QueueStats, read: int = 5) -> QuietMark:
    """The mark a read of ``read`` letters (all parked, headers only) leaves."""
    mark = quiet_mark(before, None, read=read, known_parked=read, fetched_by_pass=read, now=NOW)
    assert mark.proven
    return mark


def after(before: QueueStats, read: int = 5) -> QueueStats:
    """``before`` once the statistics count the read's own gets."""
    c = before.counters
    assert c.fetched is not None
    return replace(before, counters=replace(c, fetched=c.fetched + read))


LATER = NOW + timedelta(minutes=1)


# --------------------------------------------------------------------------- the decision


def test_nothing_changed_since_a_proven_mark_is_not_read() -> None:
    before = listed()
    mark = proven(before)
    assert mark.fetched == 45
    decision = quiet_decision(after(before), mark, LATER)
    assert not decision.read
    assert "nothing arrived" in decision.why and "5 letter(s) parked" in decision.why


def test_no_mark_or_an_unproven_one_is_read() -> None:
    assert quiet_decision(listed(), None, NOW).read
    unproven = quiet_mark(listed(), None, read=4, known_parked=4, fetched_by_pass=4, now=NOW)
    assert not unproven.proven and unproven.letters == 0
    assert quiet_decision(after(listed(), 4), unproven, LATER).read
    other = replace(proven(listed()), queue="vibey.other.dead")
    assert quiet_decision(after(listed()), other, LATER).read


@pytest.mark.parametrize(
    ("now", "read"),
    [
        (NOW + timedelta(seconds=QUIET_PROOF_SECONDS - 1), False),
        (NOW + timedelta(seconds=QUIET_PROOF_SECONDS), True),  # read again every hour
        (NOW - timedelta(seconds=1), True),  # a clock gone back proves nothing
    ],
)
def test_a_proof_stands_for_an_hour(now: datetime, read: bool) -> None:
    assert quiet_decision(after(listed()), proven(listed()), now).read is read


CHANGES = {
    # a letter dead-lettered in (publish does not move for those: measured)
    "one more letter": lambda q: replace(q, messages_ready=6),
    "one letter fewer": lambda q: replace(q, messages_ready=4),
    # one removed by a consumer and one dead-lettered in: the count stays, the fetch moves
    "one taken and one arrived": lambda q: replace(
        q, counters=replace(q.counters, fetched=46, acknowledged=1)
    ),
    "one acknowledged from an earlier delivery": lambda q: replace(
        q, counters=replace(q.counters, acknowledged=1)
    ),
    "one published, one taken off uncounted": lambda q: replace(
        q, counters=replace(q.counters, published=1)
    ),
    "the bytes changed (a letter replaced)": lambda q: replace(
        q, counters=replace(q.counters, message_bytes=121)
    ),
    "the bytes not listed": lambda q: replace(q, counters=replace(q.counters, message_bytes=None)),
    "a restart: nothing listed": lambda q: replace(q, counters=QueueCounters(message_bytes=120)),
    "a restart: counting from zero": lambda q: replace(q, counters=replace(q.counters, fetched=0)),
    "statistics older than the last read": lambda q: replace(
        q, counters=replace(q.counters, fetched=40)
    ),
    "a letter checked out": lambda q: replace(q, messages_ready=4, messages_unacknowledged=1),
    "a consumer attached": lambda q: replace(q, consumers=1),
    "no statistics": lambda q: replace(q, counts_known=False),
    "a message TTL in force": lambda q: replace(q, effective_policy={"message-ttl": 60000}),
    "a length limit declared": lambda q: replace(q, arguments={"x-max-length": 10}),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_change_since_the_mark_is_read(change: str) -> None:
    now = CHANGES[change](after(listed()))
    decision = quiet_decision(now, proven(listed()), LATER)
    assert decision.read, change
    assert decision.why


def test_a_counter_not_listed_is_unknown_never_zero() -> None:
    # the mark saw publish 3; now publish is not listed: a reset, not "unchanged"
    before = listed(published=3, acknowledged=2)
    mark = proven(before)
    for gone in ("published", "acknowledged"):
        now = after(before)
        now = replace(now, counters=replace(now.counters, **{gone: None}))
        assert "below" in quiet_decision(now, mark, LATER).why
    # absent both times (nothing published directly to a dead-letter queue) is as marked
    assert not quiet_decision(after(listed()), proven(listed()), LATER).read
    # absent at the mark, 0 now: RabbitMQ lists every counter once the read's gets are counted
    fresh = listed(fetched=None)
    counted = replace(fresh, counters=replace(fresh.counters, fetched=5, acknowledged=0))
    assert not quiet_decision(counted, proven(fresh), LATER).read


def test_lower_counters_are_read_as_a_reset_higher_as_movement() -> None:
    mark = proven(listed(published=3))
    lower = after(listed(published=2))
    higher = after(listed(published=4))
    assert "below" in quiet_decision(lower, mark, LATER).why
    assert "moved" in quiet_decision(higher, mark, LATER).why


counter = st.one_of(st.none(), st.integers(0, 60))


@st.composite
def listings(draw: st.DrawFn) -> QueueStats:
    return listed(
        draw(st.integers(0, 8)),
        bytes_=draw(st.one_of(st.none(), st.integers(100, 130))),
        published=draw(counter),
        fetched=draw(counter),
        acknowledged=draw(counter),
        messages_unacknowledged=draw(st.integers(0, 1)),
        consumers=draw(st.integers(0, 1)),
        counts_known=draw(st.booleans()),
        effective_policy=draw(st.sampled_from([{}, {"message-ttl": 1}, {"max-length": 5}])),
    )


@given(before=listings(), now=listings(), read=st.integers(0, 9), parked=st.integers(0, 9))
def test_a_queue_is_left_unread_only_when_its_listing_is_exactly_as_marked(
    before: QueueStats, now: QueueStats, read: int, parked: int
) -> None:
    """The rule restated from the outside: unread only when a read proved every letter listed
    parked, and the listing since matches that read's listing plus its own gets, with
    everything a read without the broker's counters could miss ruled out."""
    mark = quiet_mark(before, None, read=read, known_parked=parked, fetched_by_pass=read, now=NOW)
    spared = not quiet_decision(now, mark, LATER).read
    b, n = before.counters, now.counters
    clean = [
        q.counts_known
        and q.messages_unacknowledged == 0
        and q.consumers == 0
        and not any(k in q.effective_policy for k in UNCOUNTED_REMOVALS)
        for q in (before, now)
    ]
    expected = (
        all(clean)
        and read == parked == before.messages_ready == now.messages_ready >= 1
        and n.fetched == (b.fetched or 0) + read
        and b.message_bytes is not None
        and n.message_bytes == b.message_bytes
        # a counter not listed then and 0 now: nothing of its kind counted since
        and n.published in (b.published, 0 if b.published is None else b.published)
        and n.acknowledged in (b.acknowledged, 0 if b.acknowledged is None else b.acknowledged)
    )
    assert spared is expected


@given(
    first=st.one_of(st.none(), st.integers(0, 30)),
    second=st.integers(0, 60),
    reads=st.integers(1, 9),
)
def test_a_listing_that_has_not_counted_the_last_read_proves_nothing(
    first: int | None, second: int, reads: int
) -> None:
    """Each read leaves the least the fetch counter must show next; a listing below it is older
    than that read, so the read it precedes proves nothing, whatever it saw."""
    earlier = quiet_mark(
        listed(fetched=first), None, read=0, known_parked=0, fetched_by_pass=reads, now=NOW
    )
    assert earlier.fetched == (first or 0) + reads and not earlier.proven
    mark = quiet_mark(
        listed(fetched=second), earlier, read=5, known_parked=5, fetched_by_pass=5, now=LATER
    )
    assert mark.proven is (second >= earlier.fetched)
    assert mark.fetched == second + 5


def test_a_mark_needs_every_letter_listed_read_and_parked() -> None:
    def mark(q: QueueStats, read: int = 5, parked: int = 5, fetched: int = 5) -> bool:
        return quiet_mark(
            q, None, read=read, known_parked=parked, fetched_by_pass=fetched, now=NOW
        ).proven

    assert mark(listed())
    assert not mark(listed(), read=4, parked=4)  # a read capped short of the queue
    assert not mark(listed(), parked=4)  # a letter not parked
    # no fetch counter listed yet (nothing ever fetched): the read's own gets are the base
    first = quiet_mark(
        listed(fetched=None), None, read=5, known_parked=5, fetched_by_pass=5, now=NOW
    )
    assert first.proven and first.fetched == 5
    assert not mark(listed(bytes_=None))
    assert not mark(listed(0), read=0, parked=0)
    assert not mark(listed(), fetched=4)
    assert not mark(listed(consumers=1))


# --------------------------------------------------------------------------- the listing


def test_the_listing_reads_counters_not_listed_as_unknown() -> None:
    assert {"message_stats.publish", "message_stats.ack", "message_bytes"} <= set(QUEUE_COLUMNS)
    bare = queue_of(
        {
            "name": DLQ,
            "messages_ready": 5,
            "messages_unacknowledged": 0,
            "consumers": 0,
            "message_stats": [],
        },
        "/",
    )
    assert bare is not None and bare.counters == QueueCounters()
    full = queue_of(
        {
            "name": DLQ,
            "messages_ready": 5,
            "messages_unacknowledged": 0,
            "consumers": 0,
            "message_bytes": 120.0,
            "message_stats": {"deliver_get": 7, "get": 7, "redeliver": 3, "ack": 0},
        },
        "/",
    )
    assert full is not None
    assert full.counters == QueueCounters(None, 7, 0, 120)


def test_lavinmq_lists_the_counters_and_the_bytes_in_two_parts() -> None:
    """``vibey.jobs.dead`` as LavinMQ 2.9.1 answered (recorded 2026-12-01, holding 4 dead
    letters), cut to the top-level keys the pass asks for, as its ``columns=`` does: the
    counters are there, and ``message_bytes`` is not but its two parts are. Their sum is the
    same after two requeueing reads of every letter (the second recording), so a pass that read
    all four proves the mark, and the next pass need not fetch them."""
    columns = LAVINMQ.columns(QUEUE_COLUMNS)

    def listed(name: str) -> QueueStats:
        queue = queue_of(project(load(name), columns), "vibey", LAVINMQ)
        assert queue is not None
        return queue

    before = listed("queue_single_vibey.jobs.dead.json")
    after = listed("queue_single_vibey.jobs.dead_after_gets.json")
    assert before.counters == QueueCounters(
        published=4, fetched=0, acknowledged=0, message_bytes=1433
    )
    assert after.counters == replace(before.counters, fetched=10)
    mark = quiet_mark(before, None, read=4, known_parked=4, fetched_by_pass=4, now=NOW)
    assert mark.proven and mark.message_bytes == 1433


# --------------------------------------------------------------------------- the pass


def settings() -> Settings:
    return Settings.model_validate(
        {"queue": {"reap": {"policy_verify_wait_seconds": 0, "dead_letter_peek_limit": 100}}}
    )


async def passes(
    store: MemoryJobQueue, broker: FakeBroker, n: int, *, dry_run: bool = False
) -> list[PassResult]:
    return [
        await run_pass(
            settings(),
            Sources(store=store, broker=broker),
            mode=Mode.AUDIT if dry_run else Mode.FULL,
            clock=lambda: NOW,
        )
        for _ in range(n)
    ]


async def test_quiet_passes_fetch_nothing_and_a_new_letter_is_read() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker(counting=True)
    broker.declare(DLQ, "classic")
    letters = [message(message_id=f"m-{i}") for i in range(3)] + [
        message('{"plain": 1}'),
        message('{"plain": 22}'),
    ]
    broker.put_letters(DLQ, letters)

    # parks with bodies in one read, which proves every letter parked from the start
    (first,) = await passes(store, broker, 1)
    assert [(d.parked_new, d.bodies_read, d.not_fetched) for d in first.dead_letters.queues] == [
        (5, 5, None)
    ]
    gets = len(broker.reads)
    assert gets == 1 and broker.fetched[DLQ] == 5  # one get of 5: each letter read once
    quiet = await passes(store, broker, 5)
    assert len(broker.reads) == gets  # nothing fetched
    assert [
        (d.already_parked, d.unread, d.not_fetched is not None)
        for r in quiet
        for d in r.dead_letters.queues
    ] == [(5, 0, True)] * 5
    assert any("not read: nothing arrived" in n for n in quiet[0].notes)

    broker.put_letters(DLQ, [*letters, message('{"plain": 333}')])
    (found,) = await passes(store, broker, 1)
    assert [(d.parked_new, d.already_parked, d.not_fetched) for d in found.dead_letters.queues] == [
        (1, 5, None)
    ]
    assert len(await store.list_gates()) == 6


async def test_a_counter_reset_is_read() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker(counting=True)
    broker.declare(DLQ, "classic")
    broker.put_letters(DLQ, [message(message_id=f"m-{i}") for i in range(3)])
    await passes(store, broker, 3)
    gets = len(broker.reads)
    broker.fetched.clear()  # the broker restarted: its counters began again
    (reset,) = await passes(store, broker, 1)
    assert len(broker.reads) == gets + 1  # read without bodies: every letter parked already
    assert [
        (d.already_parked, d.bodies_read, d.not_fetched) for d in reset.dead_letters.queues
    ] == [(3, 0, None)]


async def test_without_counters_every_pass_reads_as_before() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker()  # lists no counters at all
    broker.declare(DLQ, "classic")
    broker.put_letters(DLQ, [message(message_id="m-1")])
    await passes(store, broker, 4)
    assert len(broker.reads) == 1 + 3  # bodies once, then headers every pass


async def test_a_dry_run_neither_reads_nor_keeps_a_mark() -> None:
    store = MemoryJobQueue(clock=lambda: NOW)
    broker = FakeBroker(counting=True)
    broker.declare(DLQ, "classic")
    broker.put_letters(DLQ, [message(message_id="m-1")])
    await passes(store, broker, 2, dry_run=True)
    assert broker.reads == [] and store.quiet_marks == {}
