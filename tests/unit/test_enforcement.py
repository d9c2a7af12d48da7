"""Verified means enforced (SPEC §4): what each version enforces, per queue type, as the
capability profiles state it, and what follows for the judge, the policy verifier, the plan and
the pass's report. The profiles are the ones ``test_consumer_timeout_enforcement.py`` pinned
live with real consumers."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from reaper.broker.capabilities import capabilities_for
from reaper.config import Settings
from reaper.core.bounds import consumer_timeout_bound, get_holder_unseen
from reaper.core.domain import BrokerFacts, Condition, Measurements, QueueStats, Thresholds
from reaper.core.judge import judge
from reaper.edges.report import render_text, to_json
from reaper.policies.declarations import PolicyParameters, load_declarations
from reaper.policies.reconcile import plan, reconcile
from reaper.policies.render import DesiredPolicy, render
from reaper.policies.report import plan_json, plan_text
from reaper.policies.verify import PolicyReason, check_queues
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources
from tests.support.brokers import (
    ARGUMENT,
    BROKER_WIDE,
    LAVINMQ,
    POLICY,
    RABBITMQ_40,
    RABBITMQ_43,
    RABBITMQ_310,
)
from tests.support.fake_broker import FakeBroker
from tests.support.queues import queue_stats

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WIDE = 21_600_000
EVIDENCE = "node loaded 20-vibey-reap.conf"
PARAMS = PolicyParameters()  # consumer timeout 21600 s


def with_wide(facts: BrokerFacts) -> BrokerFacts:
    return replace(facts, consumer_timeout_ms=WIDE, consumer_timeout_evidence=EVIDENCE)


def queue(
    name: str = "vibey.jobs.c1",
    kind: str = "classic",
    *,
    unacked: int = 0,
    consumers: int = 1,
    policy: dict[str, Any] | None = None,
    arguments: dict[str, Any] | None = None,
    carries: str | None = None,
) -> QueueStats:
    return queue_stats(
        name,
        kind,
        unacked=unacked,
        consumers=consumers,
        policy=carries,
        effective_policy=policy,
        arguments=arguments,
    )


# --------------------------------------------------------------------------- the profiles


@pytest.mark.parametrize(
    ("facts", "classic", "quorum"),
    [
        (RABBITMQ_310, {BROKER_WIDE}, {BROKER_WIDE}),
        (RABBITMQ_40, {POLICY, ARGUMENT, BROKER_WIDE}, {POLICY, ARGUMENT, BROKER_WIDE}),
        (RABBITMQ_43, set(), {POLICY, ARGUMENT, BROKER_WIDE}),
    ],
    ids=["3.10", "4.0", "4.3"],
)
def test_each_pinned_version_enforces_per_queue_type(
    facts: BrokerFacts, classic: set[str], quorum: set[str]
) -> None:
    assert capabilities_for(facts.product, facts.version) == facts
    assert set(facts.timeout_enforcement("classic").enforced) == classic  # type: ignore[union-attr]
    assert set(facts.timeout_enforcement("quorum").enforced) == quorum  # type: ignore[union-attr]
    assert facts.timeout_enforcement("stream") is None
    assert facts.get_holder_counted_as_consumer == {"quorum"}


@pytest.mark.parametrize(
    ("product", "version"),
    [
        ("RabbitMQ", "3.9.29"),
        ("RabbitMQ", "3.13.7"),
        ("RabbitMQ", "4.1.0"),
        ("RabbitMQ", "4.2.3"),
        ("RabbitMQ", "4.4.0"),
        ("LavinMQ", "2.1.0"),
        ("unknown", "unknown"),
    ],
)
def test_a_version_never_pinned_claims_no_enforcement(product: str, version: str) -> None:
    facts = capabilities_for(product, version)
    assert facts.consumer_timeout_enforcement == ()
    assert facts.get_holder_counted_as_consumer is None
    assert facts.capabilities()["consumer_timeout_enforced"] == {}


def test_43_refuses_the_classic_queue_argument_from_432_on() -> None:
    def refused(version: str) -> frozenset[str]:
        enforcement = capabilities_for("RabbitMQ", version).timeout_enforcement("classic")
        assert enforcement is not None and not enforcement.enforced
        return enforcement.refused

    assert refused("4.3.0") == refused("4.3.1") == frozenset()
    assert refused("4.3.2") == refused("4.3.6") == {ARGUMENT}


def test_the_report_carries_what_is_enforced() -> None:
    shown = RABBITMQ_43.capabilities()
    assert shown["consumer_timeout_enforced"] == {
        "classic": [],
        "quorum": ["argument", "broker-wide", "policy"],
    }
    assert shown["get_holder_counted_as_consumer"] == ["quorum"]
    assert LAVINMQ.capabilities()["get_holder_counted_as_consumer"] is None


# --------------------------------------------------------------------------- the bound


@pytest.mark.parametrize(
    ("facts", "kind", "policy", "argument", "value"),
    [
        # 3.10: the broker-wide value only; the argument is ignored (and no policy can carry it)
        (RABBITMQ_310, "classic", None, None, WIDE),
        (RABBITMQ_310, "quorum", None, 3000, WIDE),
        (RABBITMQ_310, "classic", None, 3000, WIDE),
        # 4.0: policy, argument or broker-wide, on both types
        (RABBITMQ_40, "classic", 3000, None, 3000),
        (RABBITMQ_40, "classic", None, 4000, 4000),
        (RABBITMQ_40, "quorum", 3000, 2000, 2000),
        (RABBITMQ_40, "quorum", None, None, WIDE),
        # 4.3: quorum queues as 4.0; classic queues nothing at all
        (RABBITMQ_43, "quorum", 3000, None, 3000),
        (RABBITMQ_43, "quorum", None, None, WIDE),
        (RABBITMQ_43, "classic", 3000, None, None),
        (RABBITMQ_43, "classic", None, None, None),
    ],
)
def test_only_what_the_version_enforces_is_in_force(
    facts: BrokerFacts, kind: str, policy: int | None, argument: int | None, value: int | None
) -> None:
    q = queue(
        kind=kind,
        policy={"consumer-timeout": policy} if policy else None,
        arguments={"x-consumer-timeout": argument} if argument else None,
    )
    bound = consumer_timeout_bound(q, with_wide(facts))
    assert (bound.value, bound.known) == (value, True)
    assert bound.enforced is not (facts is RABBITMQ_43 and kind == "classic")


def test_an_ignored_argument_is_named_beside_the_bound_in_force() -> None:
    q = queue(kind="quorum", arguments={"x-consumer-timeout": 3000})
    bound = consumer_timeout_bound(q, with_wide(RABBITMQ_310))
    assert bound.source == (
        f"broker-wide consumer_timeout ({EVIDENCE}); RabbitMQ 3.10.8 ignores argument "
        "x-consumer-timeout 3000"
    )
    alone = consumer_timeout_bound(q, RABBITMQ_310)
    assert alone.value is None and alone.enforced
    assert alone.source == (
        "no broker-wide consumer_timeout in force; RabbitMQ 3.10.8 ignores argument "
        "x-consumer-timeout 3000"
    )


def test_a_classic_queue_on_43_has_no_consumer_timeout_whatever_it_shows() -> None:
    q = queue(policy={"consumer-timeout": WIDE}, carries="vibey-reap-classic")
    bound = consumer_timeout_bound(q, with_wide(RABBITMQ_43))
    assert (bound.value, bound.known, bound.enforced) == (None, True, False)
    assert bound.source.startswith("RabbitMQ 4.3.6 enforces no consumer timeout on classic queues")
    assert "rabbitmq-server#16983" in bound.source
    assert "only a quorum queue is bounded" in bound.source
    assert bound.source.endswith(
        f"shown but not in force: policy consumer-timeout {WIDE} and broker-wide "
        f"consumer_timeout {WIDE}"
    )


def test_a_version_never_pinned_has_no_consumer_timeout_in_force() -> None:
    facts = with_wide(capabilities_for("RabbitMQ", "4.1.0"))
    bound = consumer_timeout_bound(queue(kind="quorum", policy={"consumer-timeout": 1}), facts)
    assert (bound.value, bound.enforced) == (None, False)
    assert bound.source.startswith(
        "RabbitMQ 4.1.0 was never pinned enforcing a consumer timeout on quorum queues, so none "
        "counts as in force"
    )


# --------------------------------------------------------------------------- the judge


def judged(*queues: QueueStats, facts: BrokerFacts) -> tuple[list[Any], list[str]]:
    judgement = judge(Measurements(claimable=(), queues=queues, broker=facts), Thresholds(), NOW)
    return list(judgement.verdicts), list(judgement.notes)


def test_an_owned_classic_queue_on_43_is_unbounded_naming_queue_version_and_why() -> None:
    held = queue(unacked=2, policy={"consumer-timeout": WIDE}, carries="vibey-reap-classic")
    verdicts, _ = judged(held, facts=with_wide(RABBITMQ_43))
    [verdict] = verdicts
    assert (verdict.condition, verdict.queue, verdict.measured) == (
        Condition.UNBOUNDED,
        "vibey.jobs.c1",
        2,
    )
    assert verdict.detail.startswith(
        "2 unacknowledged message(s) on queue 'vibey.jobs.c1' and no consumer timeout is in "
        "force (RabbitMQ 4.3.6 enforces no consumer timeout on classic queues: "
    )
    assert "rabbitmq-server#16983" in verdict.detail
    assert verdict.detail.endswith("a hung handler holds them forever")


@pytest.mark.parametrize("facts", [RABBITMQ_310, RABBITMQ_40], ids=["3.10", "4.0"])
def test_the_same_classic_queue_on_310_and_40_is_bounded(facts: BrokerFacts) -> None:
    held = queue(unacked=2, policy={"consumer-timeout": WIDE}, carries="vibey-reap-classic")
    assert judged(held, facts=with_wide(facts)) == ([], [])


def test_a_quorum_queue_on_43_is_bounded() -> None:
    held = queue("vibey.jobs.p1", "quorum", unacked=2, policy={"consumer-timeout": WIDE})
    verdicts, _ = judged(held, facts=with_wide(RABBITMQ_43))
    assert Condition.UNBOUNDED not in {v.condition for v in verdicts if "consumer" in v.detail}
    assert all("consumer timeout" not in v.detail for v in verdicts)


@pytest.mark.parametrize(
    ("facts", "kind", "said"),
    [
        (RABBITMQ_43, "classic", "RabbitMQ 4.3.6 does not count a basic.get holder as a consumer"),
        (RABBITMQ_310, "classic", "RabbitMQ 3.10.8 does not count a basic.get holder"),
        (RABBITMQ_40, "quorum", None),
        (LAVINMQ, "classic", "LavinMQ 2.1.0 was never pinned on whether it counts a basic.get"),
    ],
)
def test_holder_gone_says_when_a_basic_get_holder_could_hide_behind_it(
    facts: BrokerFacts, kind: str, said: str | None
) -> None:
    q = queue("celery", kind, unacked=1, consumers=0)
    why = get_holder_unseen(q, facts)
    [verdict] = [v for v in judged(q, facts=facts)[0] if v.condition is Condition.HOLDER_GONE]
    if said is None:
        assert why is None
        assert "basic.get" not in verdict.detail
    else:
        assert why is not None and why.startswith(said)
        assert verdict.detail.endswith(f", or a basic.get holder still holds them ({why})")


# --------------------------------------------------------------------------- policies


def rendered(facts: BrokerFacts) -> dict[str, DesiredPolicy]:
    return {
        d.queue_type + ("-dead" if "dead" in d.name else ""): d
        for d in render(load_declarations(), PARAMS, facts)
    }


def test_43_writes_the_classic_policy_and_records_that_it_is_not_enforced() -> None:
    desired = rendered(with_wide(RABBITMQ_43))
    classic, quorum = desired["classic"], desired["quorum"]
    assert classic.writable and classic.definition == {"consumer-timeout": WIDE}
    assert classic.unsupported == ()
    [unenforced] = classic.unenforced
    assert unenforced.key == "consumer-timeout" and unenforced.declared == WIDE
    assert unenforced.detail.startswith(
        f"consumer-timeout {WIDE} is accepted, but RabbitMQ 4.3.6 does not enforce it on "
        "classic queues: 4.3 moved consumer timeouts"
    )
    assert quorum.unenforced == ()


@pytest.mark.parametrize("facts", [RABBITMQ_310, RABBITMQ_40], ids=["3.10", "4.0"])
def test_310_and_40_record_nothing_unenforced(facts: BrokerFacts) -> None:
    assert all(d.unenforced == () for d in rendered(with_wide(facts)).values())


def test_a_refused_key_falls_back_only_where_the_broker_wide_value_is_enforced() -> None:
    held = rendered(with_wide(RABBITMQ_310))["classic"]
    assert [u.fallback_in_force for u in held.unsupported] == [True]
    unpinned = rendered(with_wide(capabilities_for("RabbitMQ", "3.13.7")))["classic"]
    [u] = [u for u in unpinned.unsupported if u.key == "consumer-timeout"]
    assert not u.fallback_in_force
    assert u.detail == (
        "consumer-timeout is not a policy key on RabbitMQ 3.13.7, and RabbitMQ 3.13.7 was never "
        "pinned enforcing the broker-wide consumer_timeout on classic queues: nothing proves a "
        f"bound of {WIDE} ms"
    )


def test_verification_on_43_says_not_enforced_for_a_classic_queue_only() -> None:
    desired = list(rendered(with_wide(RABBITMQ_43)).values())
    classic_q = queue(policy={"consumer-timeout": WIDE}, carries="vibey-reap-classic")
    quorum_q = queue(
        "vibey.jobs.p1",
        "quorum",
        policy={"consumer-timeout": WIDE, "delivery-limit": 20},
        carries="vibey-reap-quorum",
    )
    checks = {c.queue: c for c in check_queues(desired, [classic_q, quorum_q])}
    assert checks["vibey.jobs.p1"].ok
    failing = checks["vibey.jobs.c1"]
    assert failing.reason is PolicyReason.NOT_ENFORCED
    assert failing.pending is False
    assert failing.in_force == {"consumer-timeout": None}
    assert failing.problem is not None
    assert failing.problem.startswith(
        f"vibey.jobs.c1 (classic) has no consumer-timeout in force, declared {WIDE}: RabbitMQ "
        "4.3.6 enforces no consumer timeout on classic queues"
    )


def fake_43() -> FakeBroker:
    broker = FakeBroker(version="4.3.6", consumer_timeout_ms=WIDE)
    broker.declare("vibey.jobs.c1", "classic", unacked=1, consumers=1)
    broker.declare("vibey.jobs.p1", "quorum")
    return broker


def desired_for(broker: FakeBroker) -> list[DesiredPolicy]:
    facts = replace(
        capabilities_for("RabbitMQ", broker.version),
        consumer_timeout_ms=broker.consumer_timeout_ms,
        consumer_timeout_evidence="the fake broker says so",
    )
    return render(load_declarations(), PARAMS, facts)


async def test_reconciling_on_43_never_says_verified_for_the_classic_policy() -> None:
    broker = fake_43()
    outcomes = {o.name: o for o in (await reconcile(broker, desired_for(broker))).outcomes}
    classic = outcomes["vibey-reap-classic"]
    assert (classic.action, classic.verified, classic.reason) == ("created", False, "NotEnforced")
    assert classic.queues_failing == ("vibey.jobs.c1",)
    # not verified only for what the version cannot enforce: the queue is an unbounded
    # finding, and the policy does not make the pass not ok
    assert classic.unenforceable and classic.ok
    assert "RabbitMQ 4.3.6 enforces no consumer timeout on classic queues" in classic.detail
    assert "only a quorum queue is bounded" in classic.detail
    assert "0 of 1 owned classic queue(s) show the declared bounds in force" in classic.detail
    quorum = outcomes["vibey-reap-quorum"]
    assert (quorum.action, quorum.verified, quorum.reason) == ("created", True, "Created")

    again = {o.name: o for o in (await reconcile(broker, desired_for(broker))).outcomes}
    assert (again["vibey-reap-classic"].action, again["vibey-reap-classic"].reason) == (
        "unchanged",
        "NotEnforced",
    )


async def test_with_no_owned_classic_queue_on_43_the_outcome_still_says_it() -> None:
    broker = FakeBroker(version="4.3.6", consumer_timeout_ms=WIDE)
    outcomes = {o.name: o for o in (await reconcile(broker, desired_for(broker))).outcomes}
    classic = outcomes["vibey-reap-classic"]
    assert (classic.verified, classic.reason) == (None, "NoOwnedQueues")
    assert "is accepted, but RabbitMQ 4.3.6 does not enforce it on classic queues" in (
        classic.detail
    )


async def test_the_plan_on_43_says_the_same_in_text_and_json() -> None:
    broker = fake_43()
    await reconcile(broker, desired_for(broker))
    the_plan = await plan(broker, desired_for(broker))

    as_json = plan_json(the_plan)
    [classic] = [p for p in as_json["policies"] if p["name"] == "vibey-reap-classic"]
    assert [u["key"] for u in classic["not_enforced"]] == ["consumer-timeout"]
    [checked] = [q for q in as_json["queues"] if q["queue"] == "vibey.jobs.c1"]
    assert (checked["ok"], checked["reason"]) == (False, "NotEnforced")
    assert checked["in_force"] == {"consumer-timeout": None}
    assert checked["effective_policy_definition"] == {"consumer-timeout": WIDE}
    [outcome] = [o for o in as_json["outcomes"] if o["name"] == "vibey-reap-classic"]
    assert (outcome["verified"], outcome["reason"]) == (False, "NotEnforced")

    text = plan_text(the_plan)
    assert "  not enforced: consumer-timeout 21600000 is accepted, but RabbitMQ 4.3.6" in text
    [row] = [line for line in text.splitlines() if line.startswith("  vibey.jobs.c1 ")]
    assert row.split() == [
        "vibey.jobs.c1", "classic", "vibey-reap-classic", "vibey-reap-classic",
        "consumer-timeout", "none", "NotEnforced",
    ]  # fmt: skip
    problem = text.splitlines()[text.splitlines().index(row) + 1]
    assert problem.startswith("    vibey.jobs.c1 (classic) has no consumer-timeout in force")
    assert "vibey-reap-classic: planned, NOT verified (NotEnforced):" in text


async def test_a_pass_on_43_reports_the_classic_queue_in_text_and_json() -> None:
    broker = fake_43()
    settings = Settings.model_validate({"queue": {"reap": {"policy_verify_wait_seconds": 0}}})
    result = await run_pass(settings, Sources(store=None, broker=broker), clock=lambda: NOW)

    assert not result.ok
    [unbounded] = [r.verdict for r in result.verdicts if r.verdict.queue == "vibey.jobs.c1"]
    assert unbounded.condition is Condition.UNBOUNDED
    assert "RabbitMQ 4.3.6 enforces no consumer timeout on classic queues" in unbounded.detail

    report = to_json(result)
    policies = {p["name"]: p for p in report["policies"]}  # type: ignore[attr-defined]
    assert policies["vibey-reap-classic"]["reason"] == "NotEnforced"
    assert policies["vibey-reap-classic"]["verified"] is False
    assert policies["vibey-reap-classic"]["unenforceable"] is True
    # what the broker cannot enforce is a finding, not a problem: the pass is not ok here
    # because it had no database, and because the quorum queue has no dead-letter exchange:
    # the declared delivery limit is withheld from it, and 4.3's default limit of 20 would drop
    problems = [(p["kind"], p["subject"]) for p in report["problems"]]  # type: ignore[index]
    assert problems == [
        ("unreadable", "job_queue"),
        ("policy", "vibey-reap-quorum"),
        ("would_drop", "queue vibey.jobs.p1"),
    ]
    assert policies["vibey-reap-quorum"]["reason"] == "DeliveryLimitWithheld"
    findings = [f for f in report["findings"] if f["subject"] == "vibey.jobs.c1"]  # type: ignore[attr-defined]
    assert [f["condition"] for f in findings] == ["unbounded"]

    text = render_text(result)
    assert (
        "vibey-reap-classic: created, bounds 0 of 1 queue; not enforced on 1 (unbounded "
        "findings) [NotEnforced]"
    ) in text
    assert "failing: vibey.jobs.c1" in render_text(result, wide=True)
    assert "unbounded    queue vibey.jobs.c1: 1 message; the broker cannot bound it here" in text
