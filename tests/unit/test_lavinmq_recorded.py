"""LavinMQ 2.9.1 as it really answered: the reaper's client, judge, policy plan and dead-letter
read plan over the responses recorded from a real broker (``lavinmq_recorded``), never over
shapes written from RabbitMQ's. State A of the recordings' README: ``vibey.jobs.busy`` has a
healthy consumer acknowledging about 1/s, ``vibey.jobs.held`` a consumer holding 2 deliveries
and never acknowledging, ``vibey.jobs.got`` a ``basic.get`` holder (no consumer),
``vibey.jobs.timeout`` is declared with ``x-consumer-timeout: 30000``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaper.broker.capabilities import capabilities_for
from reaper.broker.client import ManagementClient
from reaper.broker.records import LAVINMQ, channel_of, consumer_of, queue_of
from reaper.config import Settings
from reaper.core.bounds import consumer_timeout_bound
from reaper.core.dead_letters.reading import read_plan
from reaper.core.domain import (
    Action,
    BrokerFacts,
    Condition,
    Measurements,
    QueueStats,
    Thresholds,
    Verdict,
)
from reaper.core.judge import judge
from reaper.core.observation import ChannelStats, ConsumerSeen, Observed, QueueFlow, observe
from reaper.edges.doctor import reachable, snippet_check
from reaper.edges.report import render_text
from reaper.edges.wording import next_step
from reaper.policies.declarations import Declaration, PolicyParameters, load_declarations
from reaper.policies.reconcile import plan
from reaper.policies.render import render
from reaper.policies.verify import PolicyReason
from reaper.reap.dead_letters import DeadLetterOutcome, _remainder
from reaper.reap.pass_config import PassConfig
from reaper.reap.policies import PoliciesOutcome
from reaper.reap.progress import RecordedVerdict
from reaper.reap.result import PassResult
from tests.support.lavinmq_recorded import VHOST, RecordedLavinMQ, load, project
from tests.support.verdicts import broker_finding

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 1, 20, 33, tzinfo=UTC)
THRESHOLDS = Thresholds()
FACTS = capabilities_for("LavinMQ", "2.9.1")
#: The recorded queues no consumer timeout bounds: every owned work queue but the one declared
#: with x-consumer-timeout; not the dead-letter queue, not the foreign celery queue.
UNBOUNDED = {
    "vibey.jobs.old",
    "vibey.jobs.nots",
    "vibey.jobs.held",
    "vibey.jobs.got",
    "vibey.jobs.busy",
    "vibey.jobs.retry",
    "vibey.lim",
}


async def _client(transport: RecordedLavinMQ) -> ManagementClient:
    client = ManagementClient(
        "http://lavinmq.test:15690", "guest", "guest", vhost=VHOST, transport=transport
    )
    await client.facts()
    return client


@pytest.fixture
async def read() -> AsyncIterator[tuple[ManagementClient, RecordedLavinMQ]]:
    transport = RecordedLavinMQ()
    client = await _client(transport)
    yield client, transport
    await client.aclose()


async def _reading(
    client: ManagementClient,
) -> tuple[list[QueueStats], list[ChannelStats], list[ConsumerSeen]]:
    return (
        await client.list_queues(),
        await client.list_channels(),
        await client.list_consumers(),
    )


def _observe(
    queues: list[QueueStats],
    channels: list[ChannelStats],
    consumers: list[ConsumerSeen],
    previous: Observed | None,
    now: datetime,
) -> Observed:
    return observe(
        previous.observations if previous else (),
        queues=[QueueFlow(q.name, q.messages_ready, q.deliveries) for q in queues],
        channels=channels,
        consumers=consumers,
        owned=frozenset(q.name for q in queues if q.name.startswith("vibey.")),
        now=now,
    )


def _by_queue(verdicts: tuple[Verdict, ...], condition: Condition) -> dict[str, Verdict]:
    return {v.queue or v.object: v for v in verdicts if v.condition is condition}


# --------------------------------------------------------------------------- the column rule


@pytest.mark.parametrize(
    ("full", "projected", "columns"),
    [
        (
            "queues_full_paged.json",
            "queues_columns_toplevel.json",
            "name,type,state,node,messages,messages_ready,messages_unacknowledged,consumers,"
            "head_message_timestamp,policy,effective_policy_definition,arguments,message_stats",
        ),
        (
            "queues_full_paged.json",
            "queues_columns_dotted.json",
            "name,type,state,node,messages,messages_ready,messages_unacknowledged,consumers,"
            "head_message_timestamp,policy,effective_policy_definition,arguments,"
            "message_stats.deliver_get,message_stats.ack",
        ),
        (
            "consumers_full.json",
            "consumers_columns_toplevel.json",
            "consumer_tag,ack_required,prefetch_count,queue,channel_details",
        ),
        (
            "consumers_full.json",
            "consumers_columns_dotted.json",
            "consumer_tag,ack_required,prefetch_count,queue.name,channel_details.name",
        ),
        (
            "channels_full.json",
            "channels_columns_toplevel.json",
            "name,messages_unacknowledged,message_stats",
        ),
        (
            "channels_full.json",
            "channels_columns_dotted.json",
            "name,messages_unacknowledged,message_stats.ack",
        ),
    ],
)
def test_the_column_rule_reproduces_every_recorded_projection(
    full: str, projected: str, columns: str
) -> None:
    """What the transport serves is what LavinMQ answered: columns keep top-level keys only."""
    whole, cut = load(full), load(projected)
    items = whole["items"] if isinstance(whole, dict) else whole
    expected = cut["items"] if isinstance(cut, dict) else cut
    assert [project(i, columns) for i in items] == expected


# --------------------------------------------------------------------------- the listing


async def test_lavinmq_is_asked_for_top_level_columns_and_every_counter_is_read(
    read: tuple[ManagementClient, RecordedLavinMQ],
) -> None:
    client, transport = read
    assert client.dialect is LAVINMQ
    queues, channels, consumers = await _reading(client)

    asked = [r.url.params["columns"] for r in transport.requests if "columns" in r.url.params]
    assert asked and not any("." in c for c in asked), asked

    full = {q["name"]: q for q in load("queues_full_paged.json")["items"]}
    assert {q.name for q in queues} == set(full)
    for q in queues:
        assert q.deliveries == full[q.name]["message_stats"]["deliver_get"], q.name
        assert (q.type, q.policy_known, q.counts_known) == ("classic", True, True), q.name
    stats = {q.name: q for q in queues}
    assert stats["vibey.jobs.busy"].deliveries == 50
    assert stats["vibey.jobs.held"].deliveries == 2

    acks = {c.name: (c.acks, c.messages_unacknowledged) for c in channels}
    assert acks == {
        "127.0.0.1:52416[1]": (0, 2),  # the held consumer: never acknowledges
        "127.0.0.1:52422[1]": (0, 1),  # the basic.get holder
        "127.0.0.1:52424[1]": (51, 0),  # the busy consumer
        "127.0.0.1:52434[1]": (0, 0),  # the busy publisher
    }
    assert sorted((c.queue, c.channel, c.ack_required) for c in consumers) == [
        ("vibey.jobs.busy", "127.0.0.1:52424[1]", True),
        ("vibey.jobs.held", "127.0.0.1:52416[1]", True),
    ]
    # every queue that lists consumers has them seen: none is "hidden" from the user
    assert {q.name for q in queues if q.consumers > 0} == {c.queue for c in consumers}


def test_the_dotted_columns_leave_counters_unmeasured_never_zero() -> None:
    """What LavinMQ answers to RabbitMQ's dotted columns carries no counter: read as not
    measured, so neither a stall nor a hold can be measured from it."""
    queues = [queue_of(i, VHOST, LAVINMQ) for i in load("queues_columns_dotted.json")["items"]]
    assert queues and all(q is not None and q.deliveries is None for q in queues)
    channels = [channel_of(i, LAVINMQ) for i in load("channels_columns_dotted.json")]
    assert channels and all(c is not None and c.acks is None for c in channels)
    assert [consumer_of(i) for i in load("consumers_columns_dotted.json")] == [None, None]

    seen = observe(
        (),
        queues=[QueueFlow(q.name, q.messages_ready, q.deliveries) for q in queues if q],
        channels=[c for c in channels if c],
        consumers=[ConsumerSeen("vibey.jobs.held", "127.0.0.1:52416[1]", "ctag1", True)],
        owned=frozenset({"vibey.jobs.held"}),
        now=T0,
    )
    assert seen.stalled == {} and seen.held == () and seen.observations == ()
    assert seen.unmeasured == ("127.0.0.1:52416[1]",)


# --------------------------------------------------------------------------- the judgments


async def test_busy_is_judged_healthy_and_held_is_judged_wedged_and_hung(
    read: tuple[ManagementClient, RecordedLavinMQ],
) -> None:
    """Two passes over the same state, more than both thresholds apart: the busy queue (its
    consumer acknowledging, deliver = ack) is never stale_ready; the held queue, whose only
    consumer holds its prefetch and acknowledges nothing, is wedged and a hung handler."""
    client, _ = read
    queues, channels, consumers = await _reading(client)
    first = _observe(queues, channels, consumers, None, T0)
    later = T0 + timedelta(seconds=THRESHOLDS.longest_lease_seconds + 1)
    second = _observe(queues, channels, consumers, first, later)
    verdicts = judge(
        Measurements(queues=tuple(queues), broker=FACTS, observed=second), THRESHOLDS, later
    ).verdicts

    stale = _by_queue(verdicts, Condition.STALE_READY)
    assert "vibey.jobs.busy" not in stale
    assert "vibey.jobs.held" in stale and "wedged: 1 ready message(s) and 1 consumer(s)" in (
        stale["vibey.jobs.held"].detail
    )
    # its consumer is there: the next step is to look at it, not to start one
    assert next_step(stale["vibey.jobs.held"]).startswith("its consumers take nothing")
    hung = _by_queue(verdicts, Condition.HUNG_HANDLER)
    assert set(hung) == {"vibey.jobs.held"}
    assert "channel '127.0.0.1:52416[1]'" in hung["vibey.jobs.held"].detail
    assert "held 2 unacknowledged" in hung["vibey.jobs.held"].detail


async def test_the_basic_get_holder_is_holder_gone_and_said_to_be_no_consumer(
    read: tuple[ManagementClient, RecordedLavinMQ],
) -> None:
    client, _ = read
    queues = await client.list_queues()
    verdicts = judge(Measurements(queues=tuple(queues), broker=FACTS), THRESHOLDS, T0).verdicts
    gone = _by_queue(verdicts, Condition.HOLDER_GONE)
    assert set(gone) == {"vibey.jobs.got"}
    assert gone["vibey.jobs.got"].measured == 1
    assert (
        "LavinMQ 2.9.1 does not count a basic.get holder as a consumer on classic queues"
        in gone["vibey.jobs.got"].detail
    )


async def test_owned_queues_without_the_argument_are_unbounded_with_the_fix(
    read: tuple[ManagementClient, RecordedLavinMQ],
) -> None:
    client, _ = read
    queues = {q.name: q for q in await client.list_queues()}
    verdicts = judge(
        Measurements(queues=tuple(queues.values()), broker=FACTS), THRESHOLDS, T0
    ).verdicts
    unbounded = _by_queue(verdicts, Condition.UNBOUNDED)
    assert set(unbounded) == UNBOUNDED
    fix = "fix: declare the queue with the argument x-consumer-timeout: 21600000"
    assert all(fix in v.detail for v in unbounded.values())
    # the next step is that fix, never a broker-wide setting LavinMQ does not enforce
    assert {next_step(v) for v in unbounded.values()} == {
        "declare the queue with the argument x-consumer-timeout: 21600000"
    }
    assert "LavinMQ 2.9.1 enforces a consumer timeout only from the queue argument" in (
        unbounded["vibey.jobs.held"].detail
    )
    assert unbounded["vibey.jobs.held"].measured == 2  # its unacknowledged deliveries

    bound = consumer_timeout_bound(queues["vibey.jobs.timeout"], FACTS)
    assert (bound.value, bound.source, bound.enforced) == (
        30000,
        "argument x-consumer-timeout",
        True,
    )


async def test_the_head_age_note_is_said_even_when_a_zero_second_observation_exists(
    read: tuple[ManagementClient, RecordedLavinMQ],
) -> None:
    """vibey.jobs.old's head message is an hour old, and LavinMQ reports no head timestamp:
    the first pass says so (its observation is 0 s old), and the pass past stale_ready_seconds
    surfaces it from the lower bound observed."""
    client, _ = read
    queues, channels, consumers = await _reading(client)
    first = _observe(queues, channels, consumers, None, T0)
    result = judge(Measurements(queues=tuple(queues), broker=FACTS, observed=first), THRESHOLDS, T0)
    assert "vibey.jobs.old" not in _by_queue(result.verdicts, Condition.STALE_READY)
    [note] = [n for n in result.notes if "'vibey.jobs.old'" in n]
    # one note for every queue given the same reason, this one among them
    assert note.startswith("head-message age of queues 'celery', 'vibey.jobs.got', "), note
    assert note.endswith(
        " is not reported by the broker (LavinMQ 2.9.1 reports no head_message_timestamp); "
        "observed across passes (from this pass on)"
    ), note

    soon = T0 + timedelta(seconds=103.4)  # the lower bound, in whole seconds, until stale
    early = _observe(queues, channels, consumers, first, soon)
    result = judge(
        Measurements(queues=tuple(queues), broker=FACTS, observed=early), THRESHOLDS, soon
    )
    [note] = [n for n in result.notes if "'vibey.jobs.old'" in n]
    assert note.endswith("observed across passes (at least 103 s so far)"), note

    later = T0 + timedelta(seconds=THRESHOLDS.stale_ready_seconds + 1)
    second = _observe(queues, channels, consumers, first, later)
    result = judge(
        Measurements(queues=tuple(queues), broker=FACTS, observed=second), THRESHOLDS, later
    )
    stale = _by_queue(result.verdicts, Condition.STALE_READY)["vibey.jobs.old"]
    assert stale.measured == THRESHOLDS.stale_ready_seconds + 1
    assert "the broker reports no head timestamp" in stale.detail


# --------------------------------------------------------------------------- capabilities


def test_the_capability_table_says_what_lavinmq_291_answered() -> None:
    """Each claim against the recorded answer that backs it (the emptying by -1 and the
    enforcement with a real consumer were measured by hand on the same broker)."""
    number = load("policy_put_consumer_timeout_number.json")
    assert number["status"] == 400 and "should be of type String" in number["body"]["reason"]
    assert not FACTS.policy_consumer_timeout

    for target in ("classic_queues", "quorum_queues"):
        assert load(f"policy_put_apply_to_{target}.json")["status"] == 201
    assert FACTS.policy_apply_to_queue_type
    # the quorum_queues policy (priority 2) is the one the classic scratch.q carries
    carried = load("queue_single_scratch.q_classic_and_quorum_policies.json")
    assert carried["policy"] == "rp-quorum"
    assert not FACTS.quorum_queues

    assert load("policy_put_delivery_limit_minus1.json")["status"] == 201
    minus1 = load("queue_single_scratch.q_after_policies.json")
    assert minus1["effective_policy_definition"] == {"delivery-limit": -1}
    assert FACTS.unlimited_delivery_limit_empties and not FACTS.unlimited_delivery_limit

    classic = FACTS.timeout_enforcement("classic")
    assert classic is not None and {s.value for s in classic.enforced} == {"argument"}
    assert FACTS.get_holder_counted_as_consumer == frozenset()
    assert FACTS.default_quorum_delivery_limit is None
    # other LavinMQ lines were never measured: nothing claimed
    assert capabilities_for("LavinMQ", "2.8.0").consumer_timeout_enforcement == ()


def test_delivery_limit_minus_one_is_never_rendered_for_lavinmq() -> None:
    params = PolicyParameters()
    declared = load_declarations(ROOT / "policies")
    anywhere = Declaration(
        source="classic-dlq.json",
        name="{prefix}-classic-dlq",
        queue_type="classic",
        pattern="^vibey\\.",
        apply_to="classic_queues",
        priority=0,
        definition={"delivery-limit": -1, "max-length": 1000},
    )
    for desired in render([*declared, anywhere], params, FACTS):
        assert desired.definition.get("delivery-limit") != -1, desired.name
        if desired.writable:
            assert "delivery-limit" not in desired.definition, desired.name
    [custom] = render([anywhere], params, FACTS)
    assert custom.definition == {"max-length": 1000}
    [why] = [u for u in custom.unsupported if u.key == "delivery-limit"]
    assert why.fallback_in_force
    assert "accepted by LavinMQ 2.9.1 but empties the queue at once" in why.detail


def test_nothing_is_written_to_lavinmq_and_every_limit_is_said() -> None:
    desired = {
        d.source: d for d in render(load_declarations(ROOT / "policies"), PolicyParameters(), FACTS)
    }
    assert not any(d.writable for d in desired.values())
    [timeout] = desired["classic.json"].unsupported
    assert timeout.key == "consumer-timeout" and timeout.fallback_in_force
    assert "refused as a number, accepted as a string and never applied" in timeout.detail
    for source in ("quorum.json", "dead-letter.json"):
        [why] = desired[source].unsupported
        assert why.key == "queue-type" and why.fallback_in_force
        assert "LavinMQ 2.9.1 has no quorum queues" in why.detail


# --------------------------------------------------------------------------- the plan


async def test_a_clean_vhosts_plan_has_nothing_failing() -> None:
    """A vhost of the recorded queues that are in order (the work queue declared with
    x-consumer-timeout, the dead-letter queue, a foreign queue): every policy outcome ok."""
    transport = RecordedLavinMQ(frozenset({"vibey.jobs.timeout", "vibey.jobs.dead", "celery"}))
    client = await _client(transport)
    facts = await client.facts()
    desired = render(load_declarations(ROOT / "policies"), PolicyParameters(), facts)
    result = await plan(client, desired, vhost=VHOST)
    await client.aclose()

    shown = [(o.name, o.reason, o.detail) for o in result.outcomes]
    assert all(o.ok for o in result.outcomes), shown
    outcomes = {o.name: o for o in result.outcomes}
    classic = outcomes["vibey-reap-classic"]
    assert (classic.action, classic.verified, classic.queues_checked) == ("unsupported", True, 1)
    assert classic.queues_failing == ()
    for name in ("vibey-reap-quorum", "vibey-reap-dead-letter"):
        assert (outcomes[name].action, outcomes[name].verified) == ("unsupported", None)
    assert not [r for r in transport.requests if r.method != "GET"]  # a plan writes nothing

    verdicts = judge(
        Measurements(queues=tuple(await _listed(transport)), broker=facts), THRESHOLDS, T0
    ).verdicts
    assert {v.condition for v in verdicts} == {Condition.DEAD_LETTER}


async def _listed(transport: RecordedLavinMQ) -> list[QueueStats]:
    client = await _client(transport)
    try:
        return await client.list_queues()
    finally:
        await client.aclose()


async def test_the_whole_vhosts_policy_failures_are_only_what_lavinmq_cannot_enforce(
    read: tuple[ManagementClient, RecordedLavinMQ],
) -> None:
    """On the recorded vhost, the only policy problem is the queues declared without
    x-consumer-timeout (NotEnforced, which the judge reports as unbounded findings): nothing
    unverified for a fallback, nothing refused."""
    client, _ = read
    desired = render(load_declarations(ROOT / "policies"), PolicyParameters(), FACTS)
    result = await plan(client, desired, vhost=VHOST)
    failing = [c for c in result.queues if not c.ok]
    assert {c.reason for c in failing} == {PolicyReason.NOT_ENFORCED}
    assert {c.queue for c in failing} == UNBOUNDED
    assert all(
        "fix: declare the queue with the argument x-consumer-timeout" in (c.problem or "")
        for c in failing
    )
    assert {o.reason for o in result.outcomes} == {
        PolicyReason.NOT_ENFORCED.value,
        PolicyReason.NO_OWNED_QUEUES.value,
    }


# --------------------------------------------------------------------------- dead letters


async def test_the_dead_letter_queue_is_read_safely_and_the_limited_one_is_refused_by_name(
    read: tuple[ManagementClient, RecordedLavinMQ],
) -> None:
    client, _ = read
    dead = await client.queue("vibey.jobs.dead")  # LavinMQ omits "policy" here: none is set
    assert dead.policy_known and dead.messages == 4
    safe = read_plan(dead, FACTS, 100)
    assert safe.blocked is None and safe.count == 4
    letters = await client.get_messages("vibey.jobs.dead", safe.count)
    assert len(letters) == 4
    assert load("queue_single_vibey.jobs.dead_after_gets.json")["messages"] == 4  # all still there

    listed = {q.name: q for q in await client.list_queues()}
    limited = read_plan(listed["vibey.lim"], FACTS, 100)
    assert limited.budget == 3
    assert limited.blocked is not None
    assert "has x-delivery-limit: 3 in force" in limited.blocked
    assert "unknown" not in limited.blocked and "refuses" not in limited.blocked


def test_a_lavinmq_version_never_measured_keeps_nothing_claimed() -> None:
    other: BrokerFacts = capabilities_for("LavinMQ", "2.1.0")
    assert other.timeout_enforcement("classic") is None
    assert other.get_holder_counted_as_consumer is None


async def test_the_limited_queues_unread_letters_are_never_promised_to_the_next_pass(
    read: tuple[ManagementClient, RecordedLavinMQ],
) -> None:
    """Measured by hand on LavinMQ 2.9.1: a dead-letter queue declared with x-delivery-limit
    was reported "not parked yet: the next pass parks more" while every pass refused to read
    it. Its remainder's next step says what does park them: a queue made safe to read."""
    client, _ = read
    listed = {q.name: q for q in await client.list_queues()}
    limited = read_plan(listed["vibey.lim"], FACTS, 100)
    assert limited.blocked is not None
    found = broker_finding(
        "vibey.lim", Condition.DEAD_LETTER, 0, threshold=1, action=Action.PARK, trusted=True
    )
    outcome = DeadLetterOutcome("vibey.lim", 1, 0, 0, 1, limited.blocked)
    (remainder,) = _remainder(found, outcome, PassConfig.of(Settings()))
    assert "next pass" not in next_step(remainder)
    assert next_step(remainder).startswith("not read, so never parked")

    past_limit = DeadLetterOutcome("vibey.jobs.dead", 150, 100, 0, 50, None)
    (rest,) = _remainder(
        replace(found, object="vibey.jobs.dead"), past_limit, PassConfig.of(Settings())
    )
    assert next_step(rest) == "not parked yet: the next pass parks more"


# --------------------------------------------------------------------------- the doctor


def test_the_doctor_names_lavinmqs_version_and_asks_for_no_broker_wide_snippet() -> None:
    """Measured by hand on LavinMQ 2.9.1: ``reaper doctor`` said ``reachable, LavinMQ None``
    and failed every time on ``20-vibey-reap.conf``, whose broker-wide consumer_timeout
    LavinMQ does not enforce (its fix, a RabbitMQ conf.d path, bounds nothing there)."""
    name = "broker http://lavinmq.test:15690"
    assert reachable(name, load("overview.json")).detail == "reachable, LavinMQ 2.9.1"

    snippet = snippet_check(name, load("nodes.json"), FACTS)
    assert snippet.status == "ok" and snippet.fix == ""
    assert snippet.detail.startswith("not needed: LavinMQ 2.9.1 enforces no broker-wide")
    assert "only the queue argument x-consumer-timeout" in snippet.detail

    # where the broker-wide value is enforced on some queue type, a node without it fails
    nodes = [{"name": "rabbit@n1", "config_files": []}]
    for version in ("3.10.8", "4.0.5", "4.3.6"):
        check = snippet_check(name, nodes, capabilities_for("RabbitMQ", version))
        assert check.status == "fail" and check.fix is not None, version
    # and a version never measured keeps the check
    unmeasured = snippet_check(name, load("nodes.json"), capabilities_for("LavinMQ", "2.1.0"))
    assert unmeasured.status == "fail"


async def test_the_report_says_how_many_queues_the_policy_bounds_and_groups_one_fix(
    read: tuple[ManagementClient, RecordedLavinMQ],
) -> None:
    """Measured by hand on LavinMQ 2.9.1: the report said "in force where the broker enforces
    it on 8 queues" where it bounded 1, and printed seven unbounded lines sharing one fix."""
    client, _ = read
    desired = render(load_declarations(ROOT / "policies"), PolicyParameters(), FACTS)
    planned = await plan(client, desired, vhost=VHOST)
    queues = await client.list_queues()
    verdicts = judge(Measurements(queues=tuple(queues), broker=FACTS), THRESHOLDS, T0).verdicts
    result = PassResult(
        dry_run=False,
        started_at=T0,
        finished_at=T0,
        broker=FACTS,
        verdicts=tuple(tuple(RecordedVerdict(v, True) for v in verdicts)),
        policies=PoliciesOutcome(tuple(planned.outcomes)),
    )
    lines = render_text(result).splitlines()
    assert (
        "  vibey-reap-classic: unsupported, bounds 1 of 8 queues; not enforced on 7 (unbounded "
        "findings) [NotEnforced]"
    ) in lines
    [unbounded] = [line for line in lines if line.startswith("  unbounded")]
    assert unbounded.startswith("  unbounded    7 queues: vibey.jobs.held 2 messages, ")
    assert unbounded.endswith(" and 4 more (-o wide lists each)  [new]")
    step = lines[lines.index(unbounded) + 1]
    assert step == " " * 15 + "declare the queue with the argument x-consumer-timeout: 21600000"
    wide = render_text(result, wide=True).splitlines()
    assert len([line for line in wide if line.startswith("  unbounded")]) == 7
