"""The broker client against real brokers: every supported RabbitMQ version, a vhost of each
test's own (the ``broker`` fixture)."""

from __future__ import annotations

import contextlib
import math
import socket
import struct
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from reaper import errors
from reaper.broker.client import ManagementClient
from reaper.broker.http import BrokerRejected
from reaper.broker.records import QUEUE_COLUMNS
from reaper.core.domain import QueueStats
from reaper.core.values import normalized
from reaper.errors import BrokerRefused, BrokerUnavailable
from tests.support.accounts import broker_user
from tests.support.services import BrokerUnderTest, policy_named, poll_until

pytestmark = pytest.mark.broker

STATS_WAIT_SECONDS = 20


def import_queues(broker: BrokerUnderTest, names: list[str], queue_type: str = "classic") -> None:
    """Declare many queues in one request (a definitions import into the test's vhost)."""
    queues = [
        {
            "name": n,
            "durable": True,
            "auto_delete": False,
            "arguments": {"x-queue-type": queue_type},
        }
        for n in names
    ]
    with broker.admin() as admin:
        admin.post(
            f"/api/definitions/{broker.vhost_path}", json={"queues": queues}, timeout=120
        ).raise_for_status()


async def wait_for(probe: Callable[[], Any], what: str) -> Any:
    return await poll_until(probe, what, STATS_WAIT_SECONDS)


async def test_facts_report_product_version_and_capabilities(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    facts = await client.facts()
    assert facts.product == "RabbitMQ"
    assert facts.version.startswith(broker.version)
    four = broker.at_least(4, 0)
    assert facts.policy_consumer_timeout is four
    assert facts.policy_apply_to_queue_type is four
    assert facts.unlimited_delivery_limit is four
    assert facts.default_quorum_delivery_limit == (20 if four else None)
    # what it enforces: pinned in test_consumer_timeout_enforcement.py
    classic, quorum = facts.timeout_enforcement("classic"), facts.timeout_enforcement("quorum")
    assert classic is not None and quorum is not None
    assert bool(classic.enforced) is not broker.at_least(4, 3)
    assert quorum.enforced
    assert facts.get_holder_counted_as_consumer == {"quorum"}
    # The node cannot tell the value inside the snippet, so without a declared value the
    # timeout is unknown, and the evidence says what the node did show.
    assert facts.consumer_timeout_ms is None
    assert facts.consumer_timeout_evidence
    assert client.writes_made == 0


async def test_facts_take_the_declared_timeout_only_with_the_snippet_loaded(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    with broker.admin() as admin:
        node = admin.get("/api/overview").json()["node"]
        files = admin.get(f"/api/nodes/{quote(node, safe='')}").json()["config_files"]
    loaded = any(f.endswith("20-vibey-reap.conf") for f in files)
    facts = await client.facts(declared_consumer_timeout_ms=21_600_000)
    if loaded:
        assert facts.consumer_timeout_ms == 21_600_000
        assert "20-vibey-reap.conf at boot" in (facts.consumer_timeout_evidence or "")
    else:
        assert facts.consumer_timeout_ms is None
        assert "did not load 20-vibey-reap.conf" in (facts.consumer_timeout_evidence or "")


# A live consumer needs AMQP 0-9-1, and the project has no AMQP client: this is just enough of
# the protocol to open a channel and hold a basic.consume (no heartbeats, no deliveries read).


def _frame(channel: int, class_id: int, method_id: int, arguments: bytes) -> bytes:
    payload = struct.pack(">HH", class_id, method_id) + arguments
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


def _shortstr(text: str) -> bytes:
    data = text.encode()
    return bytes([len(data)]) + data


def _expect(sock: socket.socket, class_id: int, method_id: int) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the broker closed the AMQP connection"
            data += chunk
        return data

    while True:
        kind, _, size = struct.unpack(">BHI", exactly(7))
        payload = exactly(size + 1)[:-1]
        if kind == 1:
            assert struct.unpack(">HH", payload[:4]) == (class_id, method_id), payload[:80]
            return payload


@contextlib.contextmanager
def live_consumer(broker: BrokerUnderTest, queue: str) -> Any:
    sock = socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=10)
    try:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        _expect(sock, 10, 10)  # connection.start
        login = f"\0{broker.username}\0{broker.password}".encode()
        start_ok = b"\0\0\0\0" + _shortstr("PLAIN") + struct.pack(">I", len(login)) + login
        sock.sendall(_frame(0, 10, 11, start_ok + _shortstr("en_US")))
        channel_max, frame_max, _ = struct.unpack(">HIH", _expect(sock, 10, 30)[4:12])
        sock.sendall(_frame(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, 0)))
        sock.sendall(_frame(0, 10, 40, _shortstr(broker.vhost) + _shortstr("") + b"\0"))
        _expect(sock, 10, 41)
        sock.sendall(_frame(1, 20, 10, _shortstr("")))
        _expect(sock, 20, 11)
        consume = b"\0\0" + _shortstr(queue) + _shortstr("") + b"\0" + b"\0\0\0\0"
        sock.sendall(_frame(1, 60, 20, consume))
        _expect(sock, 60, 21)
        yield
    finally:
        sock.close()


async def test_a_live_consumer_shows_the_broker_wide_timeout_where_the_broker_tells(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    broker.declare_queue(
        "vibey.override", queue_type="quorum", arguments={"x-consumer-timeout": 5000}
    )
    broker.declare_queue("vibey.plain", queue_type="quorum")
    with live_consumer(broker, "vibey.override"), live_consumer(broker, "vibey.plain"):
        with broker.admin() as admin:

            def both_listed() -> dict[str, dict[str, Any]] | None:
                listed = admin.get(f"/api/consumers/{broker.vhost_path}").json()
                by_queue = {c["queue"]["name"]: c for c in listed}
                return by_queue if len(by_queue) == 2 else None

            consumers = await wait_for(both_listed, "the two consumers to be listed")
        # A wrong declared value, so the test can tell where the figure came from.
        facts = await client.facts(declared_consumer_timeout_ms=1)

    if broker.at_least(4, 0):
        # 4.0 shows each consumer's timeout; one with an override is not broker-wide.
        assert consumers["vibey.override"]["consumer_timeout"] == 5000
        wide = consumers["vibey.plain"]["consumer_timeout"]
        assert facts.consumer_timeout_ms == wide
        assert "live consumer on queue 'vibey.plain'" in (facts.consumer_timeout_evidence or "")
    else:
        # 3.10 shows none, so the node's config_files are all there is.
        assert all("consumer_timeout" not in c for c in consumers.values())
        assert facts.consumer_timeout_ms in (1, None)
        assert "live consumer" not in (facts.consumer_timeout_evidence or "")


async def test_listing_many_queues_costs_pages_not_queues(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    names = [f"vibey.load.{i:05d}" for i in range(1200)]
    import_queues(broker, names)

    before = client.requests_made
    queues = await client.list_queues()
    assert client.requests_made - before == math.ceil(1200 / client.page_size) == 3
    assert sorted(q.name for q in queues) == names
    assert client.writes_made == 0

    # Statistics arrive a few seconds after a declare; until then the counts are unknown.
    async def all_counted() -> list[QueueStats] | None:
        listed = await client.list_queues()
        return listed if all(q.counts_known and q.policy_known for q in listed) else None

    listed = await wait_for(all_counted, "statistics of 1,200 queues")
    for queue in listed:
        assert queue.vhost == broker.vhost
        assert queue.type == "classic"
        assert queue.arguments == {"x-queue-type": "classic"}
        assert (queue.messages_ready, queue.messages_unacknowledged, queue.consumers) == (0, 0, 0)
        assert queue.policy is None
        assert queue.effective_policy == {}


async def test_listing_is_column_projected(broker: BrokerUnderTest) -> None:
    broker.declare_queue("vibey.a", queue_type="quorum")
    broker.declare_queue("vibey.b")
    broker.publish("vibey.b", "x")
    with broker.admin() as admin:

        def projected() -> list[dict[str, Any]] | None:
            page = admin.get(
                f"/api/queues/{broker.vhost_path}",
                params={"page": 1, "page_size": 500, "columns": ",".join(QUEUE_COLUMNS)},
            ).json()
            items: list[dict[str, Any]] = page["items"]
            arrived = all("messages_ready" in i and "policy" in i for i in items)
            return items if arrived else None

        items = await wait_for(projected, "queue statistics")
    # a nested column (message_stats.deliver_get, ...) comes back inside its top-level key
    top_level = {column.split(".", 1)[0] for column in QUEUE_COLUMNS}
    nested = {c.split(".", 1)[1] for c in QUEUE_COLUMNS if c.startswith("message_stats.")}
    assert nested == {"deliver_get", "publish", "ack"}
    for item in items:
        assert set(item) <= top_level, set(item) - top_level
        assert set(item.get("message_stats") or {}) <= nested, item
        assert {
            "name",
            "vhost",
            "type",
            "arguments",
            "policy",
            "effective_policy_definition",
        } <= set(item)


async def test_unicode_and_slashes_in_names_are_percent_encoded(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    name = "vibey.é ü/1 ✓.dlq"
    broker.declare_queue(name, queue_type="quorum")
    assert await client.publish(name, '{"n": 1}', properties={"message_id": "m-1"})

    assert name in {q.name for q in await client.list_queues()}
    stats = await client.queue(name)
    assert (stats.name, stats.type) == (name, "quorum")
    [message] = await client.get_messages(name, 1)
    assert message["payload"] == '{"n": 1}'
    assert message["properties"]["message_id"] == "m-1"


async def test_the_slash_vhost_is_percent_encoded(broker: BrokerUnderTest) -> None:
    async with ManagementClient(
        broker.management_url, broker.username, broker.password, vhost="/"
    ) as client:
        queues = await client.list_queues()
    assert all(q.vhost == "/" for q in queues)


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
async def test_get_messages_requeues(
    broker: BrokerUnderTest, client: ManagementClient, queue_type: str
) -> None:
    broker.declare_queue("vibey.jobs.dead", queue_type=queue_type)
    for i in range(3):
        broker.publish("vibey.jobs.dead", f"m{i}")

    first = await client.get_messages("vibey.jobs.dead", 3)
    second = await client.get_messages("vibey.jobs.dead", 3)
    assert sorted(m["payload"] for m in first) == ["m0", "m1", "m2"]
    assert sorted(m["payload"] for m in second) == ["m0", "m1", "m2"]
    assert all(m["redelivered"] for m in second)

    def still_three() -> bool:
        return broker.queue("vibey.jobs.dead").get("messages") == 3

    await wait_for(still_three, "the queue to report its three messages")


async def test_get_messages_on_a_missing_queue_is_404(client: ManagementClient) -> None:
    with pytest.raises(BrokerUnavailable) as caught:
        await client.get_messages("vibey.nowhere.dlq", 1)
    assert caught.value.status == 404


async def test_publish_reports_routing(broker: BrokerUnderTest, client: ManagementClient) -> None:
    broker.declare_queue("vibey.jobs.x")
    assert await client.publish("vibey.jobs.x", "{}") is True
    assert await client.publish("vibey.jobs.nowhere", "{}") is False


async def test_policies_round_trip_and_count_writes(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    assert await policy_named(client, "vibey-reap") is None
    assert await client.list_policies() == []
    await client.put_policy(
        "vibey-reap", {"delivery-limit": 20}, pattern=r"^vibey\.", apply_to="queues", priority=0
    )
    assert client.writes_made == 1
    policy = await policy_named(client, "vibey-reap")
    assert policy is not None
    assert normalized(policy.definition) == {"delivery-limit": 20}
    assert (policy.pattern, policy.apply_to, policy.priority) == (r"^vibey\.", "queues", 0)
    assert [p.name for p in await client.list_policies()] == ["vibey-reap"]
    assert client.writes_made == 1


async def test_a_refused_key_is_rejected_with_the_brokers_reason(
    broker: BrokerUnderTest, client: ManagementClient
) -> None:
    with pytest.raises(BrokerRejected) as caught:
        await client.put_policy(
            "bad", {"no-such-key": 1}, pattern="^x$", apply_to="queues", priority=0
        )
    assert caught.value.status == 400
    assert "no-such-key" in caught.value.reason
    assert "\n" not in caught.value.reason


async def test_a_user_without_policymaker_is_refused(broker: BrokerUnderTest) -> None:
    with broker_user(broker, "qr-nopolicy", "management") as (user, password):
        async with ManagementClient(
            broker.management_url, user, password, vhost=broker.vhost
        ) as client:
            assert (await client.whoami())["name"] == user
            await client.list_queues()  # a management user may read its vhost
            with pytest.raises(BrokerRefused) as caught:
                await client.put_policy(
                    "vibey-reap", {"max-length": 1}, pattern="^x$", apply_to="queues", priority=0
                )
        assert caught.value.status == 401  # RabbitMQ answers 401 (LavinMQ 403)
        assert password not in str(caught.value) and password not in repr(caught.value)


async def test_wrong_credentials_are_unavailable_and_scrubbed(
    broker: BrokerUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a configuration loaded earlier in this process registered the default password, "guest",
    # as a secret: the user name would be scrubbed too
    monkeypatch.setattr(errors, "_known_secrets", set())
    password = f"wrong-{uuid.uuid4().hex}"
    async with ManagementClient(broker.management_url, "guest", password) as client:
        with pytest.raises(BrokerUnavailable) as caught:
            await client.facts()
    assert caught.value.status == 401
    assert not isinstance(caught.value, BrokerRefused)
    assert "refused the credentials for user 'guest'" in caught.value.reason
    assert password not in str(caught.value) and password not in repr(caught.value)
