"""The status page's owned queues. Its "bound in force" column says what the broker enforces
on each queue: a delivery limit only where the queue type has one (quorum), never the 4.x
default on a classic queue, which no classic queue enforces. The queues a pass did not keep are
counts: the quiet apart from those listed without statistics."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reaper.core.domain import Thresholds
from reaper.edges.status_queues import _bound, queue_section
from reaper.reap.listing import QuietQueues
from reaper.reap.result import PassResult
from tests.support.brokers import LAVINMQ, RABBITMQ_43
from tests.support.queues import queue_stats

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def result(**fields: Any) -> PassResult:
    return PassResult(
        dry_run=False,
        started_at=NOW,
        finished_at=NOW,
        broker=None,
        verdicts=(),
        thresholds=Thresholds(),
        **fields,
    )


def test_a_classic_queue_shows_no_delivery_limit_and_a_quorum_queue_shows_its_own() -> None:
    classic = queue_stats("vibey.jobs", "classic", policy=None, policy_known=True)
    quorum = queue_stats("vibey.jobs.render", "quorum", policy=None, policy_known=True)

    assert "delivery limit" not in _bound(classic, RABBITMQ_43)
    assert "none enforced" in _bound(classic, RABBITMQ_43)
    assert "delivery limit 20" in _bound(quorum, RABBITMQ_43)  # the 4.x default, enforced


def test_a_lavinmq_queue_that_sets_a_delivery_limit_shows_it() -> None:
    """LavinMQ lists no queue type; its queues enforce a delivery limit where one is set."""
    limited = queue_stats(
        "vibey.jobs", None, policy=None, policy_known=True, arguments={"x-delivery-limit": 5}
    )
    unset = queue_stats("vibey.jobs.other", None, policy=None, policy_known=True)

    assert "delivery limit 5" in _bound(limited, LAVINMQ)
    assert "delivery limit" not in _bound(unset, LAVINMQ)


def test_owned_queues_listed_without_statistics_are_counted_apart_from_the_quiet() -> None:
    unmeasured = QuietQueues(
        owned=2, without_statistics=("vibey.jobs.p1", "vibey.jobs.p2", "other.q")
    )
    page = "".join(queue_section(result(quiet=unmeasured)))
    assert "2 owned queue(s), each quiet: nothing held, no consumer to watch" in page
    assert "2 listed without statistics yet" in page  # the foreign one is not ours to show

    kept = queue_stats("vibey.jobs.p3", "quorum", ready=4)
    page = "".join(queue_section(result(queues=(kept,), quiet=unmeasured)))
    assert "And 2 quiet (nothing held, bounds in force); 2 listed without statistics yet." in page
