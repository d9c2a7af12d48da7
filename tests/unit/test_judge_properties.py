"""Properties the judge keeps for any measurements: thresholds are strict, an unmeasurable age is
never old, the output depends only on its arguments, time only adds findings, the words are the
vocabulary's, foreign queues are only ever surfaced, and judging never raises."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from reaper.core.domain import (
    Action,
    BrokerFacts,
    ClaimableHead,
    Condition,
    HeldLease,
    Judgement,
    Measurements,
    QueueStats,
    Source,
    Thresholds,
)
from reaper.core.judge import judge
from reaper.core.judge_leases import judge_lease_page
from tests.support.brokers import RABBITMQ_40, RABBITMQ_43, RABBITMQ_310

#: Local to this module: a loaded profile would change every other module's settings too.
judged = settings(deadline=None, max_examples=100)

#: The exact words of SPEC §1, written out rather than read from the enums.
SOURCES = {"job_queue", "broker"}
CONDITIONS = {
    "hung_handler",
    "lease_expired",
    "holder_gone",
    "poison",
    "stale_ready",
    "dead_letter",
    "unbounded",
}
ACTIONS = {"requeue", "park", "surface", "cleared", "none"}
UNITS = {"seconds", "attempts", "messages"}

POLICY_KEYS = [
    "consumer-timeout",
    "delivery-limit",
    "dead-letter-exchange",
    "message-ttl",
    "x-consumer-timeout",
    "x-delivery-limit",
    "x-dead-letter-exchange",
    "x-message-ttl",
]

# --------------------------------------------------------------------------- strategies

projects = st.sampled_from([UUID(int=1), UUID(int=2), UUID(int=3)])
job_ids = st.uuids()
any_nows = st.datetimes(
    min_value=datetime(2001, 1, 1), max_value=datetime(2099, 1, 1), timezones=st.just(UTC)
)
#: Whole seconds too, so that ages land exactly on thresholds.
nows = st.one_of(any_nows, any_nows.map(lambda now: now.replace(microsecond=0)))
offsets = st.one_of(
    st.integers(min_value=-3 * 86_400_000_000, max_value=3 * 86_400_000_000).map(
        lambda us: timedelta(microseconds=us)
    ),
    st.integers(-10, 7300).map(lambda s: timedelta(seconds=s)),  # at and around thresholds
)

thresholds = st.builds(
    Thresholds,
    lease_grace_seconds=st.integers(0, 3600),
    stale_ready_seconds=st.integers(1, 7200),
    dead_letter_min_depth=st.integers(1, 20),
    consumerless_slack_seconds=st.integers(0, 600),
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from([-1, 0, 20, 20.0, 1_800_000, 21_600_000.0, "", "vibey.dlx"]),
)
json_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=4), scalars, max_size=3),
)
definitions = st.one_of(
    st.dictionaries(st.sampled_from(POLICY_KEYS) | st.text(max_size=6), json_values, max_size=6),
    st.just([]),  # the management API's rendering of an empty definition
)

names = st.builds(
    lambda prefix, middle, suffix: prefix + middle + suffix,
    st.sampled_from(
        ["vibey.", "vibey.jobs.", "vibey.jobs.wait.", "celery", "amq.gen-", "agent.x.inbox", ""]
    ),
    st.text(alphabet="ab.-", max_size=4),
    st.sampled_from(["", ".dlq", ".dead", ".wait.x", "p1"]),
)

brokers = st.one_of(
    st.none(),
    st.sampled_from(
        [
            BrokerFacts("RabbitMQ", "3.10.8", False, False, False, None),
            BrokerFacts("RabbitMQ", "4.0.5", True, True, True, 20),
            BrokerFacts("RabbitMQ", "3.10.8", False, False, False, None, 1_800_000, "conf"),
            BrokerFacts("LavinMQ", "2.0.0", False, False, False, None),
            RABBITMQ_310,
            RABBITMQ_40,
            RABBITMQ_43,
            replace(RABBITMQ_43, consumer_timeout_ms=21_600_000, consumer_timeout_evidence="x"),
        ]
    ),
    st.builds(
        BrokerFacts,
        product=st.sampled_from(["RabbitMQ", "LavinMQ"]),
        version=st.sampled_from(["3.10.8", "4.0.5", "2.0.0"]),
        policy_consumer_timeout=st.booleans(),
        policy_apply_to_queue_type=st.booleans(),
        unlimited_delivery_limit=st.booleans(),
        default_quorum_delivery_limit=st.one_of(st.none(), st.integers(-1, 50)),
        consumer_timeout_ms=st.one_of(st.none(), st.integers(-10, 10**10)),
        consumer_timeout_evidence=st.one_of(st.none(), st.text(max_size=10)),
        consumer_timeout_enforcement=st.sampled_from(
            [
                (),
                *(p.consumer_timeout_enforcement for p in (RABBITMQ_310, RABBITMQ_40, RABBITMQ_43)),
            ]
        ),
        get_holder_counted_as_consumer=st.sampled_from([None, frozenset(), frozenset({"quorum"})]),
    ),
)


head_offsets = st.one_of(
    st.none(),
    st.integers(-100, 10_000),  # seconds before now: near every threshold
    st.integers(),
    st.floats(),
    st.just(""),  # what the management API lists when it has no timestamp
)
rarely_false = st.sampled_from([True, True, True, False])
queue_types = st.sampled_from(["quorum", "classic", "quorum", "stream", None])


@st.composite
def queue_stats(draw: st.DrawFn, now: datetime, name: str) -> QueueStats:
    head = draw(head_offsets)
    if isinstance(head, int) and -100 <= head <= 10_000:
        head = int(now.timestamp()) - head
    return QueueStats(
        vhost="/",
        name=name,
        type=draw(queue_types),
        messages_ready=draw(st.integers(-2, 50)),
        messages_unacknowledged=draw(st.integers(-2, 50)),
        consumers=draw(st.integers(-1, 3)),
        head_message_timestamp=head,
        effective_policy=draw(definitions),
        arguments=draw(definitions),
        counts_known=draw(rarely_false),
        policy_known=draw(rarely_false),
        reported_delivery_limit=draw(st.one_of(st.none(), st.integers(-1, 50))),
    )


@dataclass(frozen=True)
class Read:
    """What a pass reads: the measurements the judge rules on, and the expired leases the lease
    judge rules on, as one page (None: the job queue was not read)."""

    measurements: Measurements
    leases: tuple[HeldLease, ...] | None

    @property
    def claimable(self) -> tuple[ClaimableHead, ...] | None:
        return self.measurements.claimable

    @property
    def queues(self) -> tuple[QueueStats, ...] | None:
        return self.measurements.queues


def judged_all(read: Read, t: Thresholds, now: datetime) -> Judgement:
    """The lease judge's verdicts on the leases read, then the judge's on the rest."""
    judgement = judge(read.measurements, t, now)
    leases = tuple(judge_lease_page(read.leases, t, now)) if read.leases is not None else ()
    return Judgement(leases + judgement.verdicts, judgement.notes)


@st.composite
def measurements(draw: st.DrawFn, now: datetime) -> Read:
    leases = tuple(
        HeldLease(
            job_id=draw(job_ids),
            project_id=draw(projects),
            kind="build",
            lease_owner=draw(st.one_of(st.none(), st.text(max_size=8))),
            lease_expires_at=now - draw(offsets),
            attempts=draw(st.integers(0, 9)),
            max_attempts=draw(st.integers(1, 9)),
        )
        for _ in range(draw(st.integers(0, 5)))
    )
    heads = tuple(
        ClaimableHead(
            project_id=draw(projects),
            job_id=draw(job_ids),
            kind="review",
            claimable_since=now - draw(offsets),
        )
        for _ in range(draw(st.integers(0, 4)))
    )
    queue_names = draw(st.lists(names, min_size=1, max_size=8, unique=True))
    queues = tuple(draw(queue_stats(now, name)) for name in queue_names)
    readable = draw(st.sampled_from(["both", "no job queue", "no broker", "neither"]))
    measured = Measurements(
        claimable=None if readable in ("no job queue", "neither") else heads,
        queues=None if readable in ("no broker", "neither") else queues,
        broker=draw(brokers),
    )
    return Read(measured, None if readable in ("no job queue", "neither") else leases)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Read, Thresholds, datetime]:
    now = draw(nows)
    return draw(measurements(now)), draw(thresholds), now


def _queue(m: Read, name: str) -> QueueStats:
    (queue,) = [q for q in m.queues or () if q.name == name]
    return queue


# --------------------------------------------------------------------------- properties


@judged
@given(cases())
def test_a_verdict_never_fires_at_or_below_its_threshold(
    case: tuple[Read, Thresholds, datetime],
) -> None:
    m, t, now = case
    for v in judged_all(m, t, now).verdicts:
        if v.condition in (Condition.LEASE_EXPIRED, Condition.STALE_READY, Condition.HOLDER_GONE):
            assert v.measured is not None and v.threshold is not None
            assert v.measured > v.threshold, v
        elif v.condition in (Condition.POISON, Condition.DEAD_LETTER):
            assert v.measured is not None and v.threshold is not None
            assert v.measured >= v.threshold, v
        if v.condition is Condition.LEASE_EXPIRED:
            assert v.lease is not None
            assert v.lease.lease_expires_at + timedelta(seconds=t.lease_grace_seconds) < now


@judged
@given(cases())
def test_an_unmeasurable_age_or_count_never_fires(
    case: tuple[Read, Thresholds, datetime],
) -> None:
    m, t, now = case
    for v in judged_all(m, t, now).verdicts:
        if v.source is Source.BROKER and v.condition is not Condition.UNBOUNDED:
            assert _queue(m, v.object).counts_known  # zeros listed before statistics are not 0
        if v.condition is not Condition.STALE_READY:
            continue
        if v.source is Source.BROKER:
            head = _queue(m, v.object).head_message_timestamp
            assert isinstance(head, int | float) and not isinstance(head, bool)
            assert head < now.timestamp()
        else:
            (since,) = {h.claimable_since for h in m.claimable or () if str(h.job_id) == v.object}
            assert since < now


@judged
@given(cases(), st.randoms(use_true_random=False))
def test_the_judgement_depends_only_on_its_arguments(
    case: tuple[Read, Thresholds, datetime], rnd: Any
) -> None:
    m, t, now = case
    first = judged_all(m, t, now)
    assert judged_all(m, t, now) == first

    def shuffled(items: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        if items is None:
            return None
        out = list(items)
        rnd.shuffle(out)
        return tuple(out)

    permuted = Read(
        replace(m.measurements, claimable=shuffled(m.claimable), queues=shuffled(m.queues)),
        shuffled(m.leases),
    )
    again = judged_all(permuted, t, now)
    # the judge's verdicts come in one order; the lease judge's, in the order the page was read
    assert judge(permuted.measurements, t, now) == judge(m.measurements, t, now)
    assert sorted(map(repr, again.verdicts)) == sorted(map(repr, first.verdicts))


def _timed(judgement: Judgement) -> set[tuple[Source, str, Condition]]:
    timed = {Condition.LEASE_EXPIRED, Condition.POISON, Condition.STALE_READY}
    return {(v.source, v.object, v.condition) for v in judgement.verdicts if v.condition in timed}


@judged
@given(cases(), st.integers(0, 10 * 86_400_000_000))
def test_moving_now_forward_never_removes_a_lease_or_stale_verdict(
    case: tuple[Read, Thresholds, datetime], later_us: int
) -> None:
    m, t, now = case
    later = now + timedelta(microseconds=later_us)
    assert _timed(judged_all(m, t, now)) <= _timed(judged_all(m, t, later))


@judged
@given(cases())
def test_every_verdict_speaks_the_vocabulary(
    case: tuple[Read, Thresholds, datetime],
) -> None:
    m, t, now = case
    for v in judged_all(m, t, now).verdicts:
        payload = v.payload()
        assert payload["source"] in SOURCES
        assert payload["condition"] in CONDITIONS
        assert payload["action"] in ACTIONS
        assert payload["unit"] in UNITS
        assert isinstance(payload["detail"], str) and payload["detail"]
        if v.source is Source.BROKER:
            assert v.project_id is None and v.trusted is False
            assert v.object == v.queue
        else:
            assert v.project_id is not None and v.trusted is True and v.queue is None


@judged
@given(cases())
def test_a_foreign_queue_is_only_ever_surfaced(
    case: tuple[Read, Thresholds, datetime],
) -> None:
    m, t, now = case
    for v in judged_all(m, t, now).verdicts:
        if v.source is Source.BROKER:
            assert v.action is not Action.REQUEUE
            if not re.search(t.owned_queue_pattern, v.object):
                assert v.action is Action.SURFACE
            if v.action is Action.PARK:
                assert v.condition is Condition.DEAD_LETTER


@judged
@given(cases())
def test_one_surfaced_verdict_per_sighting(case: tuple[Read, Thresholds, datetime]) -> None:
    m, t, now = case
    keys = [v.sighting_key for v in judged_all(m, t, now).verdicts if v.action is Action.SURFACE]
    assert len(keys) == len(set(keys))


@judged
@given(cases())
def test_an_unreadable_source_concludes_nothing(
    case: tuple[Read, Thresholds, datetime],
) -> None:
    m, t, now = case
    judgement = judged_all(m, t, now)
    sources = {v.source for v in judgement.verdicts}
    if m.leases is None or m.claimable is None:
        assert Source.JOB_QUEUE not in sources
    if m.queues is None:
        assert Source.BROKER not in sources
        assert judgement.notes == ()


@judged
@given(
    nows,
    thresholds,
    brokers,
    st.lists(
        st.builds(
            QueueStats,
            vhost=st.text(max_size=3),
            name=st.text(max_size=12),
            type=st.one_of(st.none(), st.text(max_size=8), st.sampled_from(["quorum", "classic"])),
            messages_ready=st.integers(),
            messages_unacknowledged=st.integers(),
            consumers=st.integers(),
            head_message_timestamp=st.one_of(st.none(), st.integers(), st.floats(), st.text()),
            policy=st.one_of(st.none(), st.text(max_size=5)),
            effective_policy=definitions,
            arguments=definitions,
            counts_known=st.booleans(),
            policy_known=st.booleans(),
            reported_delivery_limit=st.one_of(st.none(), st.integers()),
        ),
        max_size=8,
    ),
)
def test_judging_is_total_for_any_queue_listing(
    now: datetime, t: Thresholds, broker: BrokerFacts | None, queues: list[QueueStats]
) -> None:
    judgement = judge(Measurements(queues=tuple(queues), broker=broker), t, now)
    assert list(judgement.notes) == sorted(set(judgement.notes))
    for v in judgement.verdicts:
        assert v.source is Source.BROKER


@judged
@given(
    thresholds,
    any_nows,
    st.integers(0, 10**6),
    st.sampled_from([None, 0, 1_500, 60_000]),
    st.booleans(),
)
def test_the_threshold_itself_never_fires_and_just_past_it_does(
    t: Thresholds, now: datetime, below_us: int, ttl_ms: int | None, past: bool
) -> None:
    """Ages exactly at (or below) each threshold, and one step past it."""
    now = now.replace(microsecond=0)  # head timestamps are whole seconds
    step = timedelta(microseconds=1) if past else -timedelta(microseconds=below_us)
    stale = timedelta(seconds=t.stale_ready_seconds)
    wait_limit = (
        stale
        if ttl_ms is None
        else timedelta(milliseconds=ttl_ms, seconds=t.consumerless_slack_seconds)
    )
    head_step = 1 if past else -(below_us // 1_000_000)

    def head_at(name: str, limit: timedelta, arguments: dict[str, Any]) -> QueueStats:
        age_s = limit // timedelta(seconds=1) + head_step  # limits here are whole seconds
        return QueueStats(
            vhost="/",
            name=name,
            type="classic",
            messages_ready=1,
            messages_unacknowledged=0,
            consumers=0,
            head_message_timestamp=int(now.timestamp()) - age_s,
            arguments=arguments,
        )

    queues = [head_at("celery", stale, {})]
    if ttl_ms is None or ttl_ms % 1000 == 0:
        arguments = {} if ttl_ms is None else {"x-message-ttl": ttl_ms}
        queues.append(head_at("vibey.jobs.wait.t", wait_limit, arguments))
    m = Read(
        Measurements(
            claimable=(
                ClaimableHead(
                    project_id=UUID(int=1),
                    job_id=UUID(int=11),
                    kind="review",
                    claimable_since=now - stale - step,
                ),
            ),
            queues=tuple(queues),
        ),
        (
            HeldLease(
                job_id=UUID(int=10),
                project_id=UUID(int=1),
                kind="build",
                lease_owner="w",
                lease_expires_at=now - timedelta(seconds=t.lease_grace_seconds) - step,
                attempts=9,
                max_attempts=3,
            ),
        ),
    )
    fired = {(v.object, v.condition) for v in judged_all(m, t, now).verdicts}
    expected = {
        (str(UUID(int=10)), Condition.POISON),
        (str(UUID(int=11)), Condition.STALE_READY),
        *((q.name, Condition.STALE_READY) for q in queues),
    }
    assert fired == (expected if past else set())
