"""The status page's "bound in force" column says what the broker enforces on each queue: a
delivery limit only where the queue type has one (quorum), never the 4.x default on a classic
queue, which no classic queue enforces."""

from __future__ import annotations

from reaper.edges.status_queues import _bound
from tests.support.brokers import LAVINMQ, RABBITMQ_43
from tests.support.queues import queue_stats


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
