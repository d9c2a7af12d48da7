"""The declared policies reconciled and verified on real brokers (RabbitMQ 3.10, 4.0 and 4.3),
each test in a vhost of its own: converge, stay quiet, restore drift, report refusals and
shadows, and plan without writing.

Verified means enforced: 4.3 takes the classic policy's ``consumer-timeout`` and shows it on the
queues, but enforces no consumer timeout on classic queues (pinned in
``test_consumer_timeout_enforcement.py``), so there the classic policy is written and never
verified (``NotEnforced``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import pytest

from reaper.broker.client import ManagementClient
from reaper.core.domain import BrokerFacts, QueueStats
from reaper.policies.declarations import PolicyParameters, load_declarations
from reaper.policies.reconcile import PolicyOutcome, plan, reconcile
from reaper.policies.render import DesiredPolicy, render
from reaper.policies.report import plan_json, plan_text
from tests.support.accounts import broker_user
from tests.support.services import BrokerUnderTest, at_least, poll_until

pytestmark = pytest.mark.broker

PARAMS = PolicyParameters()  # vibey, 21600 s, delivery limit 20, ^vibey\., (\.dlq|\.dead)$
CONSUMER_TIMEOUT_MS = PARAMS.consumer_timeout_ms

#: Generous: a queue declared a moment before the policy shows it after up to ~9 s on 3.10.
#: test_policy_behaviour.py pins the lag for an existing queue against the default of 10 s.
VERIFY_WAIT = 30.0

QUEUES = {
    "vibey.jobs.p1": "quorum",
    "vibey.jobs.c1": "classic",
    "vibey.jobs.wait.w1s": "classic",
    "vibey.jobs.dead": "quorum",
    "vibey.runs.e1.dead": "quorum",
    "vibey.bus.x.dlq": "classic",
    "celery": "classic",
    "agent.x.inbox": "quorum",
}
OWNED = [n for n in QUEUES if n.startswith("vibey.")]
FOREIGN = [n for n in QUEUES if not n.startswith("vibey.")]
QUORUM_WORK = ["vibey.jobs.p1"]
CLASSIC_WORK = ["vibey.jobs.c1", "vibey.jobs.wait.w1s"]
QUORUM_DEAD = ["vibey.jobs.dead", "vibey.runs.e1.dead"]
CLASSIC_DEAD = ["vibey.bus.x.dlq"]


def declared_in_force(version: str) -> dict[str, tuple[str | None, dict[str, object]]]:
    """Per owned queue: the policy it must carry and its effective definition, as declared
    and rendered for this version."""
    quorum: tuple[str | None, dict[str, object]]
    classic: tuple[str | None, dict[str, object]]
    dead: tuple[str | None, dict[str, object]]
    if at_least(version, (4, 0)):
        quorum = (
            "vibey-reap-quorum",
            {"consumer-timeout": CONSUMER_TIMEOUT_MS, "delivery-limit": 20},
        )
        classic = ("vibey-reap-classic", {"consumer-timeout": CONSUMER_TIMEOUT_MS})
        dead = ("vibey-reap-dead-letter", {"delivery-limit": -1})
    else:
        # 3.10: no consumer-timeout key (the broker-wide consumer_timeout is the bound), no
        # -1: the quorum policy carries the delivery limit only, nothing else is written
        quorum = ("vibey-reap-quorum", {"delivery-limit": 20})
        classic = (None, {})
        dead = (None, {})
    expected: dict[str, tuple[str | None, dict[str, object]]] = {n: quorum for n in QUORUM_WORK}
    expected |= {n: classic for n in CLASSIC_WORK}
    expected |= {n: dead for n in QUORUM_DEAD}
    expected |= {n: (None, {}) for n in CLASSIC_DEAD}  # no policy of ours is for a classic DLQ
    return expected


def classic_enforced(broker: BrokerUnderTest) -> bool:
    """Whether the version enforces a consumer timeout on classic queues: not on 4.3."""
    return not broker.at_least(4, 3)


def assert_not_enforced(o: PolicyOutcome, action: str) -> None:
    """4.3's classic policy: written (or in sync), never verified, saying why."""
    assert (o.action, o.verified, o.reason) == (action, False, "NotEnforced"), o
    assert o.queues_failing == tuple(CLASSIC_WORK), o
    assert "RabbitMQ 4.3" in o.detail and "enforces no consumer timeout on classic" in o.detail
    assert "rabbitmq-server#16983" in o.detail and "only a quorum queue is bounded" in o.detail
    # what no write can fix does not fail the policy: the queues are unbounded findings
    assert o.ok and o.unenforceable


def client_for(
    broker: BrokerUnderTest, user: str = "guest", password: str = "guest"
) -> ManagementClient:
    return ManagementClient(broker.management_url, user, password, vhost=broker.vhost)


@pytest.fixture
async def client(broker: BrokerUnderTest) -> AsyncIterator[ManagementClient]:
    async with client_for(broker) as c:
        yield c


@pytest.fixture
async def queues(broker: BrokerUnderTest) -> dict[str, str]:
    """The queues, declared and listed with their first statistics as the reaper reads them (a
    queue listed before them shows no policy fields, which verification rightly waits for; on
    3.10 ``policy`` may be listed before ``effective_policy_definition``)."""
    for name, queue_type in QUEUES.items():
        broker.declare_queue(name, queue_type=queue_type)
    deadline = time.monotonic() + 30
    async with client_for(broker) as reader:
        while time.monotonic() < deadline:
            listed = await reader.list_queues()
            if len([q for q in listed if q.policy_known and q.counts_known]) == len(QUEUES):
                return QUEUES
            await asyncio.sleep(0.25)
    pytest.fail("the queues' first statistics did not arrive within 30 s")


@pytest.fixture
async def facts(client: ManagementClient) -> BrokerFacts:
    return await client.facts(declared_consumer_timeout_ms=CONSUMER_TIMEOUT_MS)


@pytest.fixture
def desired(facts: BrokerFacts) -> list[DesiredPolicy]:
    return render(load_declarations(), PARAMS, facts)


def held_policies(broker: BrokerUnderTest) -> list[dict[str, object]]:
    with broker.admin() as admin:
        r = admin.get(f"/api/policies/{broker.vhost_path}")
        r.raise_for_status()
        return sorted(r.json(), key=lambda p: p["name"])


# --------------------------------------------------------------------------- converge


async def reconciled(
    client: ManagementClient, desired: list[DesiredPolicy]
) -> tuple[PolicyOutcome, ...]:
    """Each policy's outcome of a real reconciliation given up to ``VERIFY_WAIT`` to verify."""
    done = await reconcile(client, desired, dry_run=False, verify_wait_seconds=VERIFY_WAIT)
    return done.outcomes


@pytest.mark.usefixtures("queues")
async def test_one_pass_brings_every_owned_queue_to_its_declared_bounds(
    broker: BrokerUnderTest,
    client: ManagementClient,
    desired: list[DesiredPolicy],
    facts: BrokerFacts,
) -> None:
    outcomes = {o.name: o for o in await reconciled(client, desired)}
    assert set(outcomes) == {"vibey-reap-quorum", "vibey-reap-classic", "vibey-reap-dead-letter"}
    for o in outcomes.values():
        if o.name == "vibey-reap-classic" and not classic_enforced(broker):
            assert_not_enforced(o, "created")
            continue
        assert o.verified is True, o
        assert o.queues_failing == (), o

    quorum, classic, dead = (
        outcomes["vibey-reap-quorum"],
        outcomes["vibey-reap-classic"],
        outcomes["vibey-reap-dead-letter"],
    )
    assert quorum.queues_checked == len(QUORUM_WORK)
    assert classic.queues_checked == len(CLASSIC_WORK)
    assert dead.queues_checked == len(QUORUM_DEAD)
    if broker.at_least(4, 0):
        assert [(o.action, o.reason) for o in (quorum, dead)] == [("created", "Created")] * 2
        assert (classic.action, classic.reason) == (
            ("created", "Created") if classic_enforced(broker) else ("created", "NotEnforced")
        )
    else:
        assert (quorum.action, quorum.reason) == ("created", "Created")
        assert "consumer-timeout is not a policy key on RabbitMQ 3.10" in quorum.detail
        assert "broker-wide consumer_timeout = 21600000 ms" in quorum.detail
        assert (classic.action, classic.reason) == ("unsupported", "KeyUnsupported")
        assert "broker-wide consumer_timeout = 21600000 ms" in classic.detail
        assert "20-vibey-reap.conf" in classic.detail
        assert (dead.action, dead.reason) == ("unsupported", "KeyUnsupported")
        assert "no delivery limit" in dead.detail

    # every owned queue, read on its own: the declared policy and exactly the declared bounds
    for name, (policy, definition) in declared_in_force(broker.version).items():
        q = await client.queue(name)
        assert q.policy == policy, name
        assert dict(q.effective_policy) == definition, name
    for name in FOREIGN:
        assert (await client.queue(name)).policy is None, name

    names = [p["name"] for p in held_policies(broker)]
    if broker.at_least(4, 0):
        assert names == ["vibey-reap-classic", "vibey-reap-dead-letter", "vibey-reap-quorum"]
    else:
        assert names == ["vibey-reap-quorum"]
        assert facts.consumer_timeout_ms == CONSUMER_TIMEOUT_MS


@pytest.mark.usefixtures("queues")
async def test_dead_letter_queues_never_carry_a_finite_limit_of_ours(
    broker: BrokerUnderTest,
    client: ManagementClient,
    desired: list[DesiredPolicy],
) -> None:
    await reconciled(client, desired)
    for name in QUORUM_DEAD:
        raw = cast(dict[str, Any], broker.queue(name))
        effective = raw.get("effective_policy_definition") or {}
        if broker.at_least(4, 0):
            # unlimited in force, where the 4.x default would otherwise be 20
            assert raw["policy"] == "vibey-reap-dead-letter"
            assert effective == {"delivery-limit": -1}
            assert raw["delivery_limit"] == "unlimited"
        else:
            assert raw.get("policy") is None
            assert "delivery-limit" not in effective
            assert "x-delivery-limit" not in (raw.get("arguments") or {})
            assert "delivery_limit" not in raw


# --------------------------------------------------------------------------- quiet, drift


@pytest.mark.usefixtures("queues")
async def test_a_second_pass_writes_nothing_and_says_unchanged(
    broker: BrokerUnderTest,
    client: ManagementClient,
    desired: list[DesiredPolicy],
) -> None:
    await reconciled(client, desired)
    before = held_policies(broker)
    writes, requests = client.writes_made, client.requests_made

    outcomes = await reconciled(client, desired)

    assert client.writes_made == writes
    # one policy listing and one queue listing: no write, no read-back, no waiting
    assert client.requests_made - requests == 2
    assert held_policies(broker) == before
    for o in outcomes:
        if o.name == "vibey-reap-classic" and not classic_enforced(broker):
            assert_not_enforced(o, "unchanged")
            continue
        assert o.verified is True, o
        if o.action != "unsupported":
            assert (o.action, o.reason) == ("unchanged", "InSync"), o


@pytest.mark.usefixtures("queues")
async def test_a_policy_changed_by_hand_is_restored(
    broker: BrokerUnderTest,
    client: ManagementClient,
    desired: list[DesiredPolicy],
) -> None:
    await reconciled(client, desired)
    quorum = next(d for d in desired if d.name == "vibey-reap-quorum")
    broker.put_policy(
        "vibey-reap-quorum",
        {**quorum.body(), "definition": {"delivery-limit": 5}, "priority": 3},
    ).raise_for_status()

    planned = {o.name: o for o in (await reconcile(client, desired, dry_run=True)).outcomes}
    assert planned["vibey-reap-quorum"].action == "planned"
    assert planned["vibey-reap-quorum"].reason == "WouldUpdate"
    assert "delivery-limit 5 → 20" in planned["vibey-reap-quorum"].detail

    writes = client.writes_made
    outcomes = {o.name: o for o in await reconciled(client, desired)}
    restored = outcomes["vibey-reap-quorum"]
    assert (restored.action, restored.reason, restored.verified) == ("updated", "Updated", True)
    assert client.writes_made == writes + 1, "only the drifted policy is written"
    q = await client.queue("vibey.jobs.p1")
    assert q.effective_policy["delivery-limit"] == 20
    [held] = [p for p in held_policies(broker) if p["name"] == "vibey-reap-quorum"]
    assert held["priority"] == 0


# --------------------------------------------------------------------------- refusals


@pytest.fixture
def management_only_user(broker: BrokerUnderTest) -> Iterator[tuple[str, str]]:
    """A user with the 'management' tag and full permissions on the vhost, no policymaker."""
    with broker_user(broker, "qr-nopolicy", "management") as name_and_password:
        yield name_and_password


@pytest.mark.usefixtures("queues")
async def test_a_user_without_policymaker_is_refused_and_nothing_raises(
    broker: BrokerUnderTest,
    desired: list[DesiredPolicy],
    management_only_user: tuple[str, str],
) -> None:
    listings: list[list[QueueStats]] = []
    async with client_for(broker, *management_only_user) as restricted:
        read = restricted.list_queues

        async def recorded(vhost: str | None = None) -> list[QueueStats]:
            listings.append(await read(vhost))
            return listings[-1]

        restricted.list_queues = recorded  # type: ignore[method-assign]
        outcomes = {o.name: o for o in await reconciled(restricted, desired)}
        # each writable policy once, and once more any PUT whose kept-alive connection the
        # node closed as it went out (measured on 4.0, after a 401: ManagementApi._send)
        resent = restricted.api.resent.count("PUT")
        assert restricted.writes_made == sum(1 for d in desired if d.writable) + resent

    for d in desired:
        o = outcomes[d.name]
        if d.writable:
            assert (o.action, o.reason, o.verified) == ("refused", "Refused", False), o
            assert not o.ok
            assert "policymaker" in o.detail
            assert "401" in o.detail
            assert management_only_user[1] not in o.detail
        else:
            # 3.10: nothing to write for these; their fallbacks hold whoever asks
            assert (o.action, o.verified) == ("unsupported", True), o
    assert held_policies(broker) == []
    # A refused write leaves nothing to wait for: the queues are listed again only while one of
    # ours is listed without its statistics (measured: 4.0 now and then lists a quorum queue so
    # after it had listed all of them whole; 3.10 a new queue before its effective policy).
    # (and once more any read whose kept-alive connection the node closed as it went out)
    reads_resent = restricted.api.resent.count("GET")
    assert restricted.requests_made == (
        1 + restricted.writes_made + len(listings) + reads_resent
    ), restricted.api.resent
    for listing in listings[:-1]:
        assert any(not q.policy_known for q in listing if q.name in OWNED), listing


# --------------------------------------------------------------------------- shadows


@pytest.mark.usefixtures("queues")
async def test_a_queue_under_someone_elses_higher_priority_policy_is_named(
    broker: BrokerUnderTest,
    client: ManagementClient,
    desired: list[DesiredPolicy],
) -> None:
    broker.put_policy(
        "hog",
        {
            "pattern": r"^vibey\.jobs\.p1$",
            "apply-to": "queues",
            "priority": 10,
            "definition": {"max-length": 1000},
        },
    ).raise_for_status()

    outcomes = {o.name: o for o in await reconciled(client, desired)}

    shadowed = outcomes["vibey-reap-quorum"]
    assert shadowed.verified is False
    assert shadowed.reason == "ShadowedBy"
    assert shadowed.queues_failing == ("vibey.jobs.p1",)
    assert "carries policy 'hog' instead of vibey-reap-quorum" in shadowed.detail
    assert "priority 10" in shadowed.detail
    dead = outcomes["vibey-reap-dead-letter"]
    assert dead.verified is True, (dead.reason, dead.queues_failing, dead.detail)
    assert outcomes["vibey-reap-classic"].verified is classic_enforced(broker)


# --------------------------------------------------------------------------- dry run


@pytest.mark.usefixtures("queues")
async def test_a_dry_run_and_a_plan_write_nothing(
    broker: BrokerUnderTest,
    client: ManagementClient,
    desired: list[DesiredPolicy],
) -> None:
    outcomes = (
        await reconcile(client, desired, dry_run=True, verify_wait_seconds=VERIFY_WAIT)
    ).outcomes
    the_plan = await plan(client, desired)

    assert client.writes_made == 0
    assert held_policies(broker) == []
    for o in outcomes:
        d = next(d for d in desired if d.name == o.name)
        if d.writable:
            assert (o.action, o.reason, o.verified) == ("planned", "WouldCreate", False), o
            assert f"would create {d.name}" in o.detail
        else:
            assert o.action == "unsupported"

    as_json = plan_json(the_plan)
    changes = {p["name"]: p["change"] for p in as_json["policies"]}
    for d in desired:
        assert changes[d.name] == ("create" if d.writable else "unsupported")
    per_queue = {(q["queue"], q["policy"]) for q in as_json["queues"]}
    assert ("vibey.jobs.p1", "vibey-reap-quorum") in per_queue
    assert not {q for q, _ in per_queue} & set(FOREIGN)
    text = plan_text(the_plan).splitlines()
    header = next(n for n, line in enumerate(text) if line.split()[:1] == ["QUEUE"])
    assert text[header].split() == ["QUEUE", "TYPE", "POLICY", "CARRIES", "IN", "FORCE", "STATE"]
    rows = [line.split()[:3] for line in text[header:]]
    assert ["vibey.jobs.p1", "quorum", "vibey-reap-quorum"] in rows
    assert text[0].startswith(f"RabbitMQ {broker.version}")
    wide = plan_text(the_plan, wide=True)
    assert all(f"policy {d.name} " in wide for d in desired) and "  desired: " in wide


async def test_a_vhost_with_no_owned_queue_has_nothing_to_verify(
    client: ManagementClient, desired: list[DesiredPolicy]
) -> None:
    outcomes = await reconciled(client, desired)
    for o in outcomes:
        assert (o.verified, o.queues_checked, o.reason) == (None, 0, "NoOwnedQueues"), o
        assert o.ok


# --------------------------------------------------------------------------- odd brokers


async def test_a_policy_of_our_name_this_version_cannot_hold_is_named_stale(
    broker: BrokerUnderTest,
    client: ManagementClient,
    queues: dict[str, str],
    desired: list[DesiredPolicy],
) -> None:
    broker.put_policy(
        "vibey-reap-classic",
        {"pattern": r"^vibey\.", "apply-to": "queues", "definition": {"max-length": 7}},
    ).raise_for_status()
    # In force on every queue it reaches before the pass reads them: each queue reports on its
    # own clock, so a listing taken meanwhile shows it on some of them only.
    reached = [name for name in queues if name.startswith("vibey.")]
    await poll_until(
        lambda: all(broker.queue(name).get("policy") == "vibey-reap-classic" for name in reached),
        "the found policy in force on every queue it reaches",
        VERIFY_WAIT,
    )

    outcomes = {o.name: o for o in await reconciled(client, desired)}

    classic = outcomes["vibey-reap-classic"]
    if not classic_enforced(broker):
        assert_not_enforced(classic, "updated")
    elif broker.at_least(4, 0):
        assert (classic.action, classic.reason, classic.verified) == ("updated", "Updated", True)
    else:
        # 3.10 cannot hold the classic policy, and the one found would reach every owned
        # queue: named, never deleted by us
        assert (classic.action, classic.reason, classic.verified) == (
            "unsupported",
            "StalePolicy",
            False,
        )
        assert "delete it by hand" in classic.detail
        assert "vibey.jobs.c1" in classic.queues_failing


@pytest.mark.usefixtures("queues")
async def test_a_definition_the_broker_rejects_is_reported_not_raised(
    broker: BrokerUnderTest,
    client: ManagementClient,
    facts: BrokerFacts,
) -> None:
    """Capabilities taken wrongly (4.x's claimed of every broker): 3.10 answers 400."""
    claimed = BrokerFacts(
        **{
            **facts.__dict__,
            "policy_consumer_timeout": True,
            "policy_apply_to_queue_type": True,
            "unlimited_delivery_limit": True,
        }
    )
    desired = render(load_declarations(), PARAMS, claimed)

    outcomes = await reconciled(client, desired)

    for o in outcomes:
        if o.name == "vibey-reap-classic" and not classic_enforced(broker):
            assert_not_enforced(o, "created")
        elif broker.at_least(4, 0):
            assert (o.action, o.verified) == ("created", True), o
        else:
            assert (o.action, o.reason, o.verified) == ("refused", "DefinitionRejected", False)
            assert "400" in o.detail
            assert "capabilities_for" in o.detail
    if not broker.at_least(4, 0):
        assert held_policies(broker) == []
