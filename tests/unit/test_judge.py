"""The judge, branch by branch (SPEC §1, §4): each condition, each bound in force, each way a
measurement cannot be made."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from reaper.core.bounds import (
    Bound,
    consumer_timeout_bound,
    dead_letter_exchange_in_force,
    delivery_limit_bound,
    is_consumerless_queue,
    is_dead_letter_queue,
    is_owned_queue,
    message_ttl_ms,
)
from reaper.core.domain import (
    Action,
    BrokerFacts,
    ClaimableHead,
    Condition,
    HeldLease,
    Measurements,
    QueueStats,
    Source,
    Thresholds,
    Unit,
    UnsentDispatch,
    Verdict,
)
from reaper.core.judge import judge
from reaper.core.judge_leases import judge_lease_page
from tests.support.brokers import LAVINMQ, RABBITMQ_40, RABBITMQ_310
from tests.support.queues import queue_stats

NOW = datetime(2026, 9, 24, 12, 0, tzinfo=UTC)
NOW_S = int(NOW.timestamp())
T = Thresholds()
PROJECT = UUID("11111111-1111-1111-1111-111111111111")
OTHER_PROJECT = UUID("22222222-2222-2222-2222-222222222222")
JOB = UUID("aaaaaaaa-0000-0000-0000-000000000001")
JOB_2 = UUID("aaaaaaaa-0000-0000-0000-000000000002")

WIDE_TIMEOUT = replace(
    RABBITMQ_310,
    consumer_timeout_ms=21_600_000,
    consumer_timeout_evidence="conf.d/20-vibey-reap.conf loaded",
)


def lease(
    *,
    expired_ago: timedelta,
    attempts: int = 1,
    max_attempts: int = 7,
    owner: str | None = "worker-7",
    job_id: UUID = JOB,
) -> HeldLease:
    return HeldLease(
        job_id=job_id,
        project_id=PROJECT,
        kind="build",
        lease_owner=owner,
        lease_expires_at=NOW - expired_ago,
        attempts=attempts,
        max_attempts=max_attempts,
    )


def head(*, waiting: timedelta, project_id: UUID = PROJECT, job_id: UUID = JOB) -> ClaimableHead:
    return ClaimableHead(
        project_id=project_id, job_id=job_id, kind="review", claimable_since=NOW - waiting
    )


def queue(
    name: str,
    *,
    type: str | None = "classic",
    ready: int = 0,
    unacked: int = 0,
    consumers: int = 1,
    head_ts: int | None = None,
    policy: Any = None,
    arguments: Any = None,
) -> QueueStats:
    """A classic queue with one consumer unless told otherwise (``queue_stats``' defaults are
    a quiet quorum queue)."""
    return queue_stats(
        name,
        type,
        ready=ready,
        unacked=unacked,
        consumers=consumers,
        effective_policy=policy,
        arguments=arguments,
        head_message_timestamp=head_ts,
    )


def on_job_queue(
    *, heads: tuple[ClaimableHead, ...] = (), thresholds: Thresholds = T
) -> list[Verdict]:
    judgement = judge(Measurements(claimable=heads, queues=()), thresholds, NOW)
    assert judgement.notes == ()
    return list(judgement.verdicts)


def on_leases(*leases: HeldLease, thresholds: Thresholds = T) -> list[Verdict]:
    """The lease judge's verdicts on one page of ``leases``."""
    return judge_lease_page(leases, thresholds, NOW)


def on_broker(
    *queues: QueueStats, broker: BrokerFacts | None = RABBITMQ_40, thresholds: Thresholds = T
) -> tuple[list[Verdict], list[str]]:
    judgement = judge(Measurements(claimable=(), queues=queues, broker=broker), thresholds, NOW)
    for verdict in judgement.verdicts:
        assert verdict.source is Source.BROKER
        assert verdict.project_id is None
        assert verdict.trusted is False
        assert verdict.object == verdict.queue
    return list(judgement.verdicts), list(judgement.notes)


def only(verdicts: list[Verdict], condition: Condition) -> Verdict:
    found = [v for v in verdicts if v.condition is condition]
    assert len(found) == 1, verdicts
    return found[0]


def conditions(verdicts: list[Verdict]) -> set[Condition]:
    return {v.condition for v in verdicts}


# --------------------------------------------------------------------------- leases


def test_an_expired_lease_past_grace_is_requeued() -> None:
    held = lease(expired_ago=timedelta(seconds=42, microseconds=123_400))
    (verdict,) = on_leases(held)
    assert verdict.source is Source.JOB_QUEUE
    assert verdict.condition is Condition.LEASE_EXPIRED
    assert verdict.action is Action.REQUEUE
    assert verdict.object == str(JOB)
    assert verdict.project_id == PROJECT
    assert verdict.queue is None
    assert verdict.measured == 42.124  # rounded up to the millisecond
    assert verdict.threshold == 0
    assert verdict.unit is Unit.SECONDS
    assert verdict.lease == held
    assert verdict.trusted is True
    assert '"worker-7"' in verdict.detail and "build" in verdict.detail


def test_a_lease_is_judged_against_its_grace() -> None:
    grace = Thresholds(lease_grace_seconds=30)
    assert on_leases(lease(expired_ago=timedelta(seconds=30)), thresholds=grace) == []
    assert on_leases(lease(expired_ago=timedelta(seconds=12)), thresholds=grace) == []
    (verdict,) = on_leases(
        lease(expired_ago=timedelta(seconds=30, microseconds=1)), thresholds=grace
    )
    assert verdict.measured == 30.001
    assert verdict.threshold == 30


def test_a_lease_not_yet_expired_gets_no_verdict_whatever_the_store_returned() -> None:
    assert on_leases(lease(expired_ago=timedelta(seconds=-60))) == []
    assert on_leases(lease(expired_ago=timedelta(0))) == []
    assert on_leases(lease(expired_ago=timedelta(seconds=-60), attempts=9)) == []


@pytest.mark.parametrize("attempts", [7, 8])
def test_an_expired_lease_out_of_attempts_is_poison_and_parked(attempts: int) -> None:
    held = lease(expired_ago=timedelta(minutes=5), attempts=attempts, max_attempts=7)
    (verdict,) = on_leases(held)
    assert verdict.condition is Condition.POISON
    assert verdict.action is Action.PARK
    assert verdict.measured == attempts
    assert verdict.threshold == 7
    assert verdict.unit is Unit.ATTEMPTS
    assert verdict.lease == held
    assert '"worker-7"' in verdict.detail and "build" in verdict.detail


def test_a_lease_with_attempts_left_is_not_poison() -> None:
    (verdict,) = on_leases(lease(expired_ago=timedelta(minutes=5), attempts=6, max_attempts=7))
    assert verdict.condition is Condition.LEASE_EXPIRED


def test_lease_verdicts_come_in_the_order_the_page_was_read() -> None:
    later = lease(expired_ago=timedelta(minutes=1), job_id=JOB_2)
    earlier = lease(expired_ago=timedelta(minutes=2), attempts=7)
    assert [v.object for v in on_leases(later, earlier)] == [str(JOB_2), str(JOB)]


def test_a_lease_without_an_owner_says_so() -> None:
    (verdict,) = on_leases(lease(expired_ago=timedelta(minutes=1), owner=None))
    assert "no recorded owner" in verdict.detail


# --------------------------------------------------------------------------- claimable heads


def test_the_oldest_claimable_job_past_the_threshold_is_surfaced() -> None:
    (verdict,) = on_job_queue(heads=(head(waiting=timedelta(seconds=901)),))
    assert verdict.source is Source.JOB_QUEUE
    assert verdict.condition is Condition.STALE_READY
    assert verdict.action is Action.SURFACE
    assert verdict.object == str(JOB)
    assert verdict.project_id == PROJECT
    assert verdict.measured == 901.0
    assert verdict.threshold == 900
    assert verdict.unit is Unit.SECONDS
    assert verdict.lease is None


def test_a_claimable_job_at_or_below_the_threshold_or_in_the_future_is_not_stale() -> None:
    assert on_job_queue(heads=(head(waiting=timedelta(seconds=900)),)) == []
    assert on_job_queue(heads=(head(waiting=timedelta(seconds=5)),)) == []
    assert on_job_queue(heads=(head(waiting=timedelta(days=-3)),)) == []
    assert (
        on_job_queue(
            heads=(head(waiting=timedelta(days=-3)),), thresholds=Thresholds(stale_ready_seconds=0)
        )
        == []
    )


def test_one_stale_verdict_per_project_the_oldest_head() -> None:
    verdicts = on_job_queue(
        heads=(
            head(waiting=timedelta(hours=1), job_id=JOB_2),
            head(waiting=timedelta(hours=2), job_id=JOB),
            head(waiting=timedelta(hours=3), project_id=OTHER_PROJECT),
        )
    )
    assert [(v.project_id, v.object) for v in verdicts] == [
        (PROJECT, str(JOB)),
        (OTHER_PROJECT, str(JOB)),
    ]


def unsent(
    *, written_ago: timedelta, project_id: UUID = PROJECT, job_id: UUID = JOB
) -> UnsentDispatch:
    return UnsentDispatch(
        project_id=project_id,
        job_id=job_id,
        kind="build",
        dispatch_seq=2,
        written_at=NOW - written_ago,
    )


def test_one_lost_dispatch_per_project_the_oldest_unsent_row_past_the_threshold() -> None:
    rows = (
        unsent(written_ago=timedelta(hours=1), job_id=JOB_2),
        unsent(written_ago=timedelta(hours=2), job_id=JOB),
        unsent(written_ago=timedelta(seconds=900), project_id=OTHER_PROJECT),
    )
    measurements = Measurements(claimable=(), unsent=rows, queues=())
    (verdict,) = judge(measurements, T, NOW).verdicts
    assert verdict.condition is Condition.LOST_DISPATCH
    assert verdict.action is Action.SURFACE
    assert (verdict.project_id, verdict.object) == (PROJECT, str(JOB))
    assert (verdict.measured, verdict.threshold, verdict.unit) == (7200.0, 900, Unit.SECONDS)
    assert verdict.detail.startswith("dispatch 2 of a ready build job was written to the outbox")


@pytest.mark.parametrize("claimable_read", [False, True])
def test_a_part_of_the_job_queue_not_read_yields_nothing(claimable_read: bool) -> None:
    old = head(waiting=timedelta(days=1))
    measurements = Measurements(
        claimable=(old,) if claimable_read else None,
        unsent=None,
        queues=None,
    )
    conditions = {v.condition for v in judge(measurements, T, NOW).verdicts}
    assert conditions == ({Condition.STALE_READY} if claimable_read else set())
    assert judge(measurements, T, NOW).notes == ()
    # the lease judge rules on a page of leases read; a page not read is judged nowhere
    stuck = lease(expired_ago=timedelta(hours=1), attempts=99)
    assert {v.condition for v in on_leases(stuck)} == {Condition.POISON}
    assert on_leases() == []


def test_an_unreadable_broker_yields_nothing() -> None:
    measurements = Measurements(claimable=(), queues=None, broker=RABBITMQ_40)
    judgement = judge(measurements, T, NOW)
    assert judgement.verdicts == () and judgement.notes == ()


# --------------------------------------------------------------------------- (a) consumer timeout


def test_an_owned_queue_holding_messages_with_no_consumer_timeout_is_unbounded() -> None:
    verdicts, _ = on_broker(queue("vibey.jobs.p1", unacked=3), broker=RABBITMQ_310)
    verdict = only(verdicts, Condition.UNBOUNDED)
    assert verdict.action is Action.SURFACE
    assert verdict.object == verdict.queue == "vibey.jobs.p1"
    assert verdict.measured == 3
    assert verdict.threshold is None
    assert verdict.unit is Unit.MESSAGES
    assert "no consumer timeout is in force" in verdict.detail


@pytest.mark.parametrize(
    ("policy", "arguments", "broker"),
    [
        ({"consumer-timeout": 21_600_000}, {}, RABBITMQ_40),
        ({"consumer-timeout": 21_600_000.0}, {}, RABBITMQ_40),  # integers come back as floats
        ({}, {"x-consumer-timeout": 3_600_000}, RABBITMQ_40),
        ({}, {}, WIDE_TIMEOUT),
    ],
)
def test_a_consumer_timeout_in_force_bounds_the_queue(
    policy: dict[str, Any], arguments: dict[str, Any], broker: BrokerFacts
) -> None:
    verdicts, _ = on_broker(
        queue("vibey.jobs.p1", unacked=3, policy=policy, arguments=arguments), broker=broker
    )
    assert verdicts == []


@pytest.mark.parametrize("value", ["21600000", True, None, 0, -1, 1.5, float("nan"), [1]])
def test_a_consumer_timeout_that_is_not_a_positive_number_is_no_bound(value: Any) -> None:
    verdicts, _ = on_broker(
        queue("vibey.jobs.p1", unacked=1, policy={"consumer-timeout": value}), broker=RABBITMQ_40
    )
    assert conditions(verdicts) == {Condition.UNBOUNDED}


def test_without_broker_facts_the_consumer_timeout_is_unknown_and_noted() -> None:
    # without the version, what it enforces is not known either: not judged, and said so
    for policy in ({}, {"consumer-timeout": 1000}):
        verdicts, notes = on_broker(queue("vibey.jobs.p1", unacked=2, policy=policy), broker=None)
        assert verdicts == []
        assert notes == [
            "consumer timeout of queue 'vibey.jobs.p1' not known (broker facts not read, so "
            "which consumer timeout the broker enforces is not known); not judged"
        ]


def test_no_unacknowledged_messages_no_unbounded_timeout_finding() -> None:
    assert on_broker(queue("vibey.jobs.p1", ready=5), broker=RABBITMQ_310) == ([], [])


def test_a_foreign_queue_is_never_judged_for_its_bounds() -> None:
    verdicts, _ = on_broker(
        queue("celery", type="quorum", unacked=4, consumers=2), broker=RABBITMQ_310
    )
    assert verdicts == []


def test_consumer_timeout_resolves_as_rabbitmq_does() -> None:
    both = queue(
        "vibey.x",
        policy={"consumer-timeout": 60_000.0},
        arguments={"x-consumer-timeout": 30_000},
    )
    assert consumer_timeout_bound(both, RABBITMQ_40).value == 30_000
    bound = consumer_timeout_bound(queue("vibey.x"), WIDE_TIMEOUT)
    assert bound.value == 21_600_000
    assert "broker-wide" in bound.source and "20-vibey-reap.conf" in bound.source
    assert consumer_timeout_bound(queue("vibey.x"), RABBITMQ_40).value is None
    unknown = consumer_timeout_bound(queue("vibey.x"), None)
    assert (unknown.value, unknown.known) == (None, False)


# --------------------------------------------------------------------------- (b) holder gone


@pytest.mark.parametrize("name", ["vibey.jobs.p1", "celery", "amq.gen-abc", "vibey.jobs.dead"])
def test_unacknowledged_messages_with_no_consumer_is_holder_gone(name: str) -> None:
    verdicts, _ = on_broker(
        queue(name, unacked=2, consumers=0, policy={"consumer-timeout": 1000}), broker=RABBITMQ_310
    )
    verdict = only(verdicts, Condition.HOLDER_GONE)
    assert verdict.action is Action.SURFACE
    assert verdict.measured == 2
    assert verdict.threshold == 0
    assert verdict.unit is Unit.MESSAGES


def test_unacknowledged_messages_held_by_a_consumer_are_not_holder_gone() -> None:
    verdicts, _ = on_broker(queue("celery", unacked=2, consumers=1), broker=RABBITMQ_310)
    assert verdicts == []


# --------------------------------------------------------------------------- (c) delivery limit

TIMEOUT = {"consumer-timeout": 21_600_000}


def test_an_owned_quorum_queue_with_no_delivery_limit_has_unbounded_poison() -> None:
    verdicts, _ = on_broker(
        queue("vibey.jobs.p1", type="quorum", policy=TIMEOUT), broker=RABBITMQ_310
    )
    verdict = only(verdicts, Condition.UNBOUNDED)
    assert verdict.measured is None
    assert verdict.unit is Unit.ATTEMPTS
    assert "poison is unbounded" in verdict.detail
    assert "RabbitMQ 3.10.8 sets no default" in verdict.detail


def test_an_unlimited_delivery_limit_is_unbounded_poison() -> None:
    verdicts, _ = on_broker(
        queue("vibey.jobs.p1", type="quorum", policy={**TIMEOUT, "delivery-limit": -1}),
        broker=RABBITMQ_40,
    )
    assert "poison is unbounded" in only(verdicts, Condition.UNBOUNDED).detail


def test_the_4x_default_limit_without_a_dead_letter_exchange_would_drop() -> None:
    verdicts, _ = on_broker(queue("vibey.jobs.p1", type="quorum", policy=TIMEOUT))
    verdict = only(verdicts, Condition.UNBOUNDED)
    assert verdict.measured == 20
    assert verdict.threshold is None
    assert verdict.unit is Unit.ATTEMPTS
    assert "a delivery limit of 20" in verdict.detail
    assert "would drop, not dead-letter" in verdict.detail
    assert "RabbitMQ 4.0.5 default" in verdict.detail


def test_a_float_delivery_limit_is_normalised() -> None:
    verdicts, _ = on_broker(
        queue("vibey.jobs.p1", type="quorum", policy={**TIMEOUT, "delivery-limit": 20.0}),
        broker=RABBITMQ_310,
    )
    detail = only(verdicts, Condition.UNBOUNDED).detail
    assert "a delivery limit of 20 (policy delivery-limit) would drop, not dead-letter" in detail


@pytest.mark.parametrize(
    ("policy", "arguments"),
    [
        ({"delivery-limit": 20, "dead-letter-exchange": "vibey.jobs.dlx"}, {}),
        ({"delivery-limit": 20.0}, {"x-dead-letter-exchange": "vibey.jobs.dlx"}),
        ({}, {"x-delivery-limit": 5, "x-dead-letter-exchange": ""}),  # the default exchange
    ],
)
def test_a_limit_that_dead_letters_is_bounded(
    policy: dict[str, Any], arguments: dict[str, Any]
) -> None:
    verdicts, _ = on_broker(
        queue("vibey.jobs.p1", type="quorum", policy={**TIMEOUT, **policy}, arguments=arguments),
        broker=RABBITMQ_310,
    )
    assert verdicts == []


def test_a_dead_letter_queue_whose_reads_would_drop_is_unbounded() -> None:
    verdicts, _ = on_broker(queue("vibey.jobs.dead", type="quorum", policy=TIMEOUT))
    verdict = only(verdicts, Condition.UNBOUNDED)
    assert verdict.measured == 20
    assert verdict.unit is Unit.ATTEMPTS
    assert "reads would drop" in verdict.detail


def test_a_queue_argument_limit_survives_an_unlimited_dead_letter_policy() -> None:
    # RabbitMQ resolves -1 against 5 to 5: the policy does not lift the queue's own limit.
    dead = queue(
        "vibey.jobs.dead",
        type="quorum",
        policy={**TIMEOUT, "delivery-limit": -1},
        arguments={"x-delivery-limit": 5},
    )
    assert delivery_limit_bound(dead, RABBITMQ_40).value == 5
    verdicts, _ = on_broker(dead)
    assert only(verdicts, Condition.UNBOUNDED).measured == 5


@pytest.mark.parametrize(
    ("policy", "broker"),
    [
        ({"delivery-limit": -1}, RABBITMQ_40),  # the dead-letter policy on 4.x
        ({}, RABBITMQ_310),  # 3.x sets no default limit
        ({"delivery-limit": 20, "dead-letter-exchange": "vibey.dlx"}, RABBITMQ_40),
    ],
)
def test_a_dead_letter_queue_whose_reads_cannot_drop_is_bounded(
    policy: dict[str, Any], broker: BrokerFacts
) -> None:
    verdicts, _ = on_broker(
        queue("vibey.jobs.dead", type="quorum", policy={**TIMEOUT, **policy}), broker=broker
    )
    assert verdicts == []


def test_a_classic_or_untyped_queue_has_no_delivery_limit_finding() -> None:
    verdicts, _ = on_broker(
        queue("vibey.bus.q", type="classic", policy=TIMEOUT),
        queue("vibey.bus.r", type=None, policy=TIMEOUT),
    )
    assert verdicts == []


def test_a_foreign_quorum_queue_has_no_delivery_limit_finding() -> None:
    assert on_broker(queue("plane.tasks", type="quorum"), broker=RABBITMQ_310) == ([], [])


def test_without_broker_facts_the_default_limit_is_unknown_and_noted() -> None:
    verdicts, notes = on_broker(queue("vibey.jobs.p1", type="quorum", policy=TIMEOUT), broker=None)
    assert verdicts == []
    assert notes == [
        "delivery limit of quorum queue 'vibey.jobs.p1' not known (no delivery-limit policy or "
        "argument, and broker facts not read); poison bound not judged"
    ]
    bound = delivery_limit_bound(queue("vibey.jobs.p1", type="quorum"), None)
    assert bound.known is False and bound.value is None


def test_two_missing_bounds_on_one_queue_are_one_verdict_naming_both() -> None:
    verdicts, _ = on_broker(queue("vibey.jobs.p1", type="quorum", unacked=4), broker=RABBITMQ_310)
    verdict = only(verdicts, Condition.UNBOUNDED)
    assert verdict.measured == 4
    assert verdict.unit is Unit.MESSAGES
    assert "no consumer timeout is in force" in verdict.detail
    assert "poison is unbounded" in verdict.detail


def test_delivery_limit_resolves_as_rabbitmq_does() -> None:
    def limit(policy: Any, arguments: Any, broker: BrokerFacts | None = RABBITMQ_40) -> Any:
        return delivery_limit_bound(
            queue("q", type="quorum", policy=policy, arguments=arguments), broker
        ).value

    assert limit({"delivery-limit": 10}, {"x-delivery-limit": 5}) == 5
    assert limit({"delivery-limit": 3.0}, {"x-delivery-limit": 5}) == 3
    assert limit({"delivery-limit": -1}, {"x-delivery-limit": -1}) is None
    assert limit({}, {"x-delivery-limit": 7}) == 7
    assert limit({}, {}) == 20
    assert limit({}, {}, RABBITMQ_310) is None
    assert limit({"delivery-limit": "5"}, {}) == 20  # not a number the broker would send


# --------------------------------------------------------------------------- (d) stale ready


def test_a_head_message_older_than_the_threshold_with_no_consumer_is_stale() -> None:
    verdicts, notes = on_broker(
        queue("celery", ready=3, consumers=0, head_ts=NOW_S - 901), broker=RABBITMQ_310
    )
    verdict = only(verdicts, Condition.STALE_READY)
    assert verdict.action is Action.SURFACE
    assert verdict.measured == 901.0
    assert verdict.threshold == 900
    assert verdict.unit is Unit.SECONDS
    assert notes == []


def test_a_head_message_at_the_threshold_or_with_a_consumer_is_not_stale() -> None:
    at = queue("celery", ready=3, consumers=0, head_ts=NOW_S - 900)
    consumed = queue("celery.2", ready=3, consumers=1, head_ts=NOW_S - 9000)
    assert on_broker(at, consumed, broker=RABBITMQ_310) == ([], [])


def test_a_float_head_timestamp_is_read() -> None:
    verdicts, _ = on_broker(
        queue("celery", ready=1, consumers=0, head_ts=float(NOW_S - 1000)),  # type: ignore[arg-type]
        broker=RABBITMQ_310,
    )
    assert only(verdicts, Condition.STALE_READY).measured == 1000.0


def test_a_future_head_timestamp_is_not_stale_and_is_noted() -> None:
    verdicts, notes = on_broker(
        queue("celery", ready=1, consumers=0, head_ts=NOW_S * 1000), broker=RABBITMQ_310
    )
    assert verdicts == []
    assert notes == [
        "head-message timestamp of queue 'celery' is in the future (a publisher's clock, or a "
        "timestamp not in seconds); stale-ready not measured"
    ]


def test_a_quorum_queue_reports_no_head_age_and_the_pass_says_so() -> None:
    verdicts, notes = on_broker(
        queue("plane.q", type="quorum", ready=5, consumers=0), broker=RABBITMQ_310
    )
    assert verdicts == []
    assert notes == [
        "head-message age of quorum queue 'plane.q' is not reported by the broker, and "
        "nothing was observed across passes this time; stale-ready not measured"
    ]


def test_a_lavinmq_queue_has_no_type_and_no_head_age_and_the_pass_says_so() -> None:
    verdicts, notes = on_broker(
        queue("vibey.bus.q", type=None, ready=5, consumers=0), broker=LAVINMQ
    )
    # no stale-ready verdict; only the consumer timeout LavinMQ was never pinned enforcing
    [unbounded] = verdicts
    assert unbounded.condition is Condition.UNBOUNDED
    assert unbounded.detail.startswith("no consumer timeout can be in force on queue 'vibey.bus.q'")
    assert notes == [
        "head-message age of queue 'vibey.bus.q' is not reported by the broker (LavinMQ 2.1.0 "
        "reports no head_message_timestamp), and nothing was observed across passes this time; "
        "stale-ready not measured"
    ]


def test_a_classic_queue_without_a_head_timestamp_is_not_measured_and_not_noted() -> None:
    assert on_broker(queue("celery", ready=5, consumers=0), broker=RABBITMQ_310) == ([], [])


def test_notes_are_sorted_and_unique() -> None:
    _, notes = on_broker(
        queue("b.q", type="quorum", ready=1, consumers=0),
        queue("a.q", type="quorum", ready=1, consumers=0),
        queue("a.q", type="quorum", ready=1, consumers=0),
        broker=RABBITMQ_310,
    )
    # one reason, so one note; each queue named once
    [note] = notes
    assert note.count("'a.q'") == 1 and note.count("'b.q'") == 1


def test_a_dead_letter_queue_is_never_stale_ready() -> None:
    verdicts, notes = on_broker(
        queue("celery.dlq", type="quorum", ready=2, consumers=0, head_ts=NOW_S - 10**6),
        broker=RABBITMQ_310,
    )
    assert conditions(verdicts) == {Condition.DEAD_LETTER}
    assert notes == []


@pytest.mark.parametrize(
    ("policy", "arguments", "threshold"),
    [
        ({}, {"x-message-ttl": 60_000}, 120),
        ({"message-ttl": 30_000.0}, {}, 90),
        ({"message-ttl": 90_000}, {"x-message-ttl": 60_000}, 120),  # the lower is in force
        ({}, {"x-message-ttl": 1_500}, 61.5),
    ],
)
def test_a_consumerless_queue_is_judged_against_its_own_ttl_plus_slack(
    policy: dict[str, Any], arguments: dict[str, Any], threshold: float
) -> None:
    def tier(age: float) -> QueueStats:
        return QueueStats(
            vhost="/",
            name="vibey.jobs.wait.30s",
            type="classic",
            messages_ready=4,
            messages_unacknowledged=0,
            consumers=0,
            head_message_timestamp=NOW_S - age,  # type: ignore[arg-type]
            effective_policy=policy,
            arguments=arguments,
        )

    assert on_broker(tier(threshold))[0] == []
    verdict = only(on_broker(tier(threshold + 1))[0], Condition.STALE_READY)
    assert verdict.threshold == threshold
    assert "message TTL" in verdict.detail and "slack" in verdict.detail


def test_a_consumerless_queue_without_a_ttl_is_judged_against_stale_ready_and_says_so() -> None:
    young = queue("vibey.jobs.wait.x", ready=1, consumers=0, head_ts=NOW_S - 900)
    assert on_broker(young)[0] == []
    old = queue("vibey.jobs.wait.x", ready=1, consumers=0, head_ts=NOW_S - 901)
    verdict = only(on_broker(old)[0], Condition.STALE_READY)
    assert verdict.threshold == 900
    assert "no message TTL is in force" in verdict.detail
    assert "stale_ready_seconds 900" in verdict.detail


# --------------------------------------------------------------------------- (e) dead letters


def test_an_owned_dead_letter_queue_at_depth_is_parked() -> None:
    verdicts, _ = on_broker(
        queue("vibey.jobs.dead", type="quorum", ready=2, unacked=1, consumers=1, policy=TIMEOUT),
        broker=RABBITMQ_310,
    )
    verdict = only(verdicts, Condition.DEAD_LETTER)
    assert verdict.action is Action.PARK
    assert verdict.measured == 3
    assert verdict.threshold == 1
    assert verdict.unit is Unit.MESSAGES


def test_a_foreign_dead_letter_queue_is_only_surfaced() -> None:
    verdicts, _ = on_broker(queue("celery.dlq", ready=9), broker=RABBITMQ_310)
    verdict = only(verdicts, Condition.DEAD_LETTER)
    assert verdict.action is Action.SURFACE
    assert "never read" in verdict.detail


def test_a_dead_letter_queue_below_the_minimum_depth_is_quiet() -> None:
    deep = Thresholds(dead_letter_min_depth=5)
    assert on_broker(queue("celery.dlq", ready=4), thresholds=deep) == ([], [])
    (verdict,) = on_broker(queue("celery.dlq", ready=5), thresholds=deep)[0]
    assert verdict.measured == 5 and verdict.threshold == 5


# --------------------------------------------------------------------------- the whole judgement


def test_verdicts_come_in_a_stable_order() -> None:
    measurements = Measurements(
        claimable=(
            head(waiting=timedelta(days=2), project_id=OTHER_PROJECT, job_id=JOB_2),
            head(waiting=timedelta(days=1)),
        ),
        queues=(
            queue("z.dlq", ready=1),
            queue("celery", unacked=1, consumers=0),
            queue("a.dlq", ready=1),
        ),
        broker=RABBITMQ_310,
    )
    keys = [(v.source, v.object, v.condition) for v in judge(measurements, T, NOW).verdicts]
    assert keys == [
        (Source.JOB_QUEUE, str(JOB), Condition.STALE_READY),
        (Source.JOB_QUEUE, str(JOB_2), Condition.STALE_READY),
        (Source.BROKER, "a.dlq", Condition.DEAD_LETTER),
        (Source.BROKER, "celery", Condition.HOLDER_GONE),
        (Source.BROKER, "z.dlq", Condition.DEAD_LETTER),
    ]


def test_an_empty_definition_listed_as_a_list_is_read_as_empty() -> None:
    # The management API renders an empty effective_policy_definition as [].
    verdicts, _ = on_broker(
        queue("vibey.jobs.p1", unacked=1, policy=[], arguments=[]), broker=RABBITMQ_310
    )
    assert conditions(verdicts) == {Condition.UNBOUNDED}


def test_broker_names_in_notes_are_quoted_and_cut() -> None:
    name = "q" * 500 + "\n"
    _, notes = on_broker(queue(name, type="quorum", ready=1, consumers=0))
    (note,) = notes
    assert "\n" not in note
    assert "'" + "q" * 200 + "'…" in note


def test_now_must_be_timezone_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        judge(Measurements(), T, NOW.replace(tzinfo=None))


def test_queue_roles_follow_the_declared_patterns() -> None:
    assert is_owned_queue("vibey.jobs.p1", T)
    assert not is_owned_queue("celery", T)
    assert is_dead_letter_queue("vibey.jobs.dead", T) and is_dead_letter_queue("x.dlq", T)
    assert not is_dead_letter_queue("vibey.dead.letters", T)
    assert is_consumerless_queue("vibey.jobs.wait.30s", T)


def test_dead_letter_exchange_and_ttl_helpers() -> None:
    assert dead_letter_exchange_in_force(queue("q", arguments={"x-dead-letter-exchange": ""})) == ""
    assert dead_letter_exchange_in_force(queue("q", policy={"dead-letter-exchange": "d"})) == "d"
    assert dead_letter_exchange_in_force(queue("q", policy={"dead-letter-exchange": 1})) is None
    assert message_ttl_ms(queue("q", arguments={"x-message-ttl": 5000.0})) == 5000
    assert message_ttl_ms(queue("q", arguments={"x-message-ttl": -5})) is None
    assert message_ttl_ms(queue("q")) is None


# --------------------------------------------------------------------------- not listed yet


def test_a_queue_listed_without_statistics_is_not_measured_and_noted() -> None:
    fresh = replace(
        queue("vibey.jobs.dead", type="quorum", ready=0, unacked=0, consumers=0),
        counts_known=False,
    )
    verdicts, notes = on_broker(fresh, broker=RABBITMQ_310)
    assert verdicts == []  # no holder_gone, stale_ready, dead_letter or timeout finding
    assert notes == [
        "queue 'vibey.jobs.dead' is listed without statistics yet (a new queue, or one whose "
        "leader just moved); its counts are not measured"
    ]


def test_queues_listed_without_statistics_are_one_note_naming_the_first_five() -> None:
    fresh = [
        replace(queue(f"tenant.work.{i:02d}", ready=0, unacked=0, consumers=0), counts_known=False)
        for i in (7, 3, 1, 6, 2, 5, 4)
    ]
    measured = queue("tenant.work.00", ready=3, unacked=0, consumers=1)
    verdicts, notes = on_broker(*fresh, measured, broker=RABBITMQ_40)
    assert verdicts == []
    assert notes == [
        "7 queues are listed without statistics yet (new queues, or ones whose leader just "
        "moved): 'tenant.work.01', 'tenant.work.02', 'tenant.work.03', 'tenant.work.04', "
        "'tenant.work.05' and 2 more; their counts are not measured"
    ]
    _, two = on_broker(*fresh[:2], broker=RABBITMQ_40)
    assert two == [
        "2 queues are listed without statistics yet (new queues, or ones whose leader just "
        "moved): 'tenant.work.03', 'tenant.work.07'; their counts are not measured"
    ]


def test_a_hostile_name_listed_without_statistics_is_quoted_in_the_note() -> None:
    names = ["evil\x1b[2Jname", "other\x00name"]
    fresh = [replace(queue(n, ready=0, unacked=0, consumers=0), counts_known=False) for n in names]
    _, notes = on_broker(*fresh, broker=RABBITMQ_40)
    (note,) = notes
    assert "\x1b" not in note and "\x00" not in note
    assert "'evil\\x1b[2Jname', 'other\\x00name'" in note


def test_a_missing_bound_is_still_found_on_a_queue_without_statistics() -> None:
    fresh = replace(queue("vibey.jobs.p1", type="quorum", policy=TIMEOUT), counts_known=False)
    verdicts, _ = on_broker(fresh, broker=RABBITMQ_310)
    assert "poison is unbounded" in only(verdicts, Condition.UNBOUNDED).detail


def test_a_policy_not_yet_listed_is_not_read_as_no_policy() -> None:
    fresh = replace(
        queue("vibey.jobs.p1", type="quorum", unacked=2, consumers=1), policy_known=False
    )
    assert consumer_timeout_bound(fresh, RABBITMQ_40).known is False
    assert delivery_limit_bound(fresh, RABBITMQ_40).known is False
    verdicts, notes = on_broker(fresh)
    assert verdicts == []
    assert notes == [
        "consumer timeout of queue 'vibey.jobs.p1' not known (the broker has not yet listed "
        "the queue's policy); not judged",
        "delivery limit of quorum queue 'vibey.jobs.p1' not known (the broker has not yet "
        "listed the queue's policy); poison bound not judged",
    ]


def test_a_consumerless_queue_whose_policy_is_not_listed_is_not_judged() -> None:
    tier = replace(
        queue("vibey.jobs.wait.1m", ready=1, consumers=0, head_ts=NOW_S - 10**5),
        policy_known=False,
    )
    verdicts, notes = on_broker(tier, broker=RABBITMQ_310)
    assert verdicts == []
    assert notes == [
        "message TTL of consumerless queue 'vibey.jobs.wait.1m' not known (the broker has not "
        "yet listed the queue's policy); stale-ready not judged"
    ]


def test_the_delivery_limit_the_broker_reports_is_the_one_in_force() -> None:
    # 4.x resolves policy, argument and default itself and lists the result.
    reported = replace(
        queue("vibey.jobs.dead", type="quorum", policy={**TIMEOUT, "delivery-limit": -1}),
        reported_delivery_limit=20,
    )
    bound = delivery_limit_bound(reported, RABBITMQ_40)
    assert bound == Bound(20, "as the broker reports it on the queue")
    assert only(on_broker(reported)[0], Condition.UNBOUNDED).measured == 20

    unlimited = replace(queue("vibey.jobs.dead", type="quorum"), reported_delivery_limit=-1)
    assert delivery_limit_bound(unlimited, RABBITMQ_40).value is None
    assert on_broker(replace(unlimited, effective_policy=TIMEOUT)) == ([], [])


def test_a_reported_limit_with_a_policy_not_listed_still_needs_its_dead_letter_exchange() -> None:
    fresh = replace(
        queue("vibey.jobs.p1", type="quorum", arguments={"x-consumer-timeout": 60_000}),
        policy_known=False,
        reported_delivery_limit=20,
    )
    verdicts, notes = on_broker(fresh)
    assert verdicts == []
    assert notes == [
        "dead-letter exchange of quorum queue 'vibey.jobs.p1' not known (the broker has not "
        "yet listed the queue's policy); poison bound not judged"
    ]


def test_one_reason_for_several_queues_is_one_note_naming_them_all() -> None:
    queues = [queue(name, type="quorum", ready=5, consumers=0) for name in ("b.q", "a.q")]
    _, notes = on_broker(*queues, broker=RABBITMQ_310)
    assert notes == [
        "head-message age of quorum queues 'a.q', 'b.q' is not reported by the broker, and "
        "nothing was observed across passes this time; stale-ready not measured"
    ]
    # a reason given for one queue alone keeps its own note
    _, [single] = on_broker(queues[0], broker=RABBITMQ_310)
    assert single.startswith("head-message age of quorum queue 'b.q' is not reported")
