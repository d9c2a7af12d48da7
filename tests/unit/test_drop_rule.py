"""The reaper never makes the broker drop a message (SPEC §1 (c), §4): a finite delivery limit is
written or kept on an owned queue only where a dead-letter target is in force on it; elsewhere
it is withheld, the plan says why, and the pass is not ok with the fix. Pure rendering and the
reconciler over the in-memory broker; the brokers themselves are pinned in
``tests/integration/test_drop_rule_live.py``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reaper.broker.capabilities import capabilities_for
from reaper.broker.port import BrokerPolicy
from reaper.core.domain import QueueStats
from reaper.policies.declarations import PolicyParameters, load_declarations
from reaper.policies.reconcile import reconcile
from reaper.policies.render import render
from tests.support.fake_broker import FakeBroker
from tests.support.queues import queue_stats

PARAMS = PolicyParameters()


def quorum(name: str, **arguments: object) -> QueueStats:
    return queue_stats(name, consumers=1, arguments=arguments)


def quorum_policy(version: str, queues: list[QueueStats]) -> dict[str, object]:
    facts = replace(capabilities_for("RabbitMQ", version), consumer_timeout_ms=21_600_000)
    [policy] = [d for d in render(load_declarations(), PARAMS, facts, queues) if "quorum" in d.name]
    return {"definition": dict(policy.definition), "withheld": policy.withheld}


@pytest.mark.parametrize("version", ["3.10.8", "4.0.5", "4.3.6"])
def test_a_limit_is_written_only_where_every_queue_it_reaches_dead_letters(version: str) -> None:
    dead_lettering = quorum("vibey.jobs.a", **{"x-dead-letter-exchange": ""})
    assert quorum_policy(version, [dead_lettering])["definition"].get("delivery-limit") == 20

    bare = quorum("vibey.jobs.b")
    got = quorum_policy(version, [dead_lettering, bare])
    assert "delivery-limit" not in got["definition"]
    [withheld] = got["withheld"]
    assert withheld.queues == ("vibey.jobs.b",)
    assert "delivery-limit 20 withheld: vibey.jobs.b has no dead-letter target" in withheld.detail
    assert "x-dead-letter-exchange" in withheld.fix


def test_a_dead_letter_exchange_policy_key_counts_and_a_foreign_or_classic_queue_does_not() -> None:
    by_policy = replace(
        quorum("vibey.jobs.c"), policy="ops-dlx", effective_policy={"dead-letter-exchange": "dlx"}
    )
    foreign = quorum("celery")
    classic = queue_stats("vibey.webhooks", "classic", consumers=1)
    got = quorum_policy("4.0.5", [by_policy, foreign, classic])
    assert got["definition"].get("delivery-limit") == 20 and got["withheld"] == ()


async def test_a_limit_already_written_is_taken_back_on_4x() -> None:
    broker = FakeBroker(version="4.0.5")
    broker.declare("vibey.jobs.main", "quorum")
    facts = await broker.facts()
    queues = await broker.list_queues()
    broker.policies["vibey-reap-quorum"] = BrokerPolicy(
        "vibey-reap-quorum", "^vibey", "quorum_queues", 0, {"delivery-limit": 20}
    )
    desired = render(load_declarations(), PARAMS, facts, queues)
    outcomes = {
        o.name: o for o in (await reconcile(broker, desired, verify_wait_seconds=0)).outcomes
    }

    held = broker.policies["vibey-reap-quorum"].definition
    assert "delivery-limit" not in held and "consumer-timeout" in held
    quorum_outcome = outcomes["vibey-reap-quorum"]
    assert (quorum_outcome.action, quorum_outcome.reason) == ("updated", "DeliveryLimitWithheld")
    assert not quorum_outcome.ok
    assert "declare each with x-dead-letter-exchange" in quorum_outcome.detail


async def test_a_limit_already_written_is_taken_back_on_310_by_deleting_the_policy() -> None:
    # 3.10 takes no consumer-timeout key: without its limit, the quorum policy holds nothing
    broker = FakeBroker(version="3.10.8")
    broker.declare("vibey.jobs.main", "quorum")
    facts = await broker.facts()
    queues = await broker.list_queues()
    broker.policies["vibey-reap-quorum"] = BrokerPolicy(
        "vibey-reap-quorum", "^vibey", "queues", 0, {"delivery-limit": 20}
    )
    desired = render(load_declarations(), PARAMS, facts, queues)

    planned = {o.name: o for o in (await reconcile(broker, desired, dry_run=True)).outcomes}
    assert "vibey-reap-quorum" in broker.policies  # a dry run writes nothing
    assert planned["vibey-reap-quorum"].action == "planned"
    assert "would delete vibey-reap-quorum" in planned["vibey-reap-quorum"].detail
    assert not planned["vibey-reap-quorum"].ok

    outcomes = {
        o.name: o for o in (await reconcile(broker, desired, verify_wait_seconds=0)).outcomes
    }
    assert "vibey-reap-quorum" not in broker.policies
    assert outcomes["vibey-reap-quorum"].action == "deleted"
    assert not outcomes["vibey-reap-quorum"].ok
