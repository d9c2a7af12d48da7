"""The broker client against HTTP failure shapes a real broker will not produce on demand
(respx), and its pure helpers. What a real broker does is in tests/integration."""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
import respx
from hypothesis import given
from hypothesis import strategies as st

from reaper.broker.capabilities import capabilities_for
from reaper.broker.client import PAGE_CONCURRENCY, REQUEUEING_ACKMODE, ManagementClient
from reaper.broker.http import BrokerRejected, api_path
from reaper.broker.records import QUEUE_COLUMNS
from reaper.core.domain import BrokerFacts
from reaper.core.values import normalized
from reaper.errors import BrokerRefused, BrokerUnavailable
from tests.support.brokers import LAVINMQ, RABBITMQ_40, RABBITMQ_43, RABBITMQ_310

URL = "http://broker.test:15672"
USER = "reaper"
PASSWORD = "hunter2-s3cr3t"

OVERVIEW_RABBIT = {"rabbitmq_version": "3.10.8", "product_name": "RabbitMQ", "node": "rabbit@h"}


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=URL, assert_all_called=False) as router:
        yield router


@pytest.fixture
async def client() -> AsyncIterator[ManagementClient]:
    async with ManagementClient(URL, USER, PASSWORD, timeout_seconds=2) as c:
        yield c


def queue_item(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "vhost": "/",
        "type": "quorum",
        "messages_ready": 1,
        "messages_unacknowledged": 0,
        "consumers": 0,
        "policy": None,
        "effective_policy_definition": {},
        "arguments": {"x-queue-type": "quorum"},
        **extra,
    }


def page(items: list[dict[str, Any]], number: int, count: int) -> dict[str, Any]:
    return {
        "items": items,
        "page": number,
        "page_count": count,
        "page_size": len(items),
        "item_count": len(items),
        "filtered_count": len(items) * count,
        "total_count": len(items) * count,
    }


def paged(pages: dict[int, list[dict[str, Any]]], count: int) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        number = int(request.url.params["page"])
        return httpx.Response(200, json=page(pages[number], number, count))

    return answer


def assert_no_password(exc: BaseException) -> None:
    assert PASSWORD not in str(exc)
    assert PASSWORD not in repr(exc)
    assert PASSWORD not in str(getattr(exc, "reason", ""))


# --------------------------------------------------------------------------- failure shapes


@given(st.lists(st.text(), min_size=1, max_size=4))
def test_each_name_in_a_management_path_stays_one_segment(names: list[str]) -> None:
    """A queue name with a slash, a dot-dot, a percent or a lone surrogate is one segment of
    the path, and decodes back to itself: it cannot address another object."""
    path = api_path("queues", *names)
    assert path.startswith("/api/queues/")
    parts = path.removeprefix("/api/queues/").split("/")
    assert [unquote(p, errors="surrogatepass") for p in parts] == names
    assert path.isascii()


def test_the_default_vhost_is_percent_encoded() -> None:
    assert api_path("exchanges", "/", "amq.default", "publish") == (
        "/api/exchanges/%2F/amq.default/publish"
    )


async def test_timeout_is_unavailable_and_names_the_timeout(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/overview").mock(side_effect=httpx.ReadTimeout("read timed out"))
    with pytest.raises(BrokerUnavailable) as caught:
        await client.facts()
    assert "timed out after 2 s" in caught.value.reason
    assert "http://broker.test:15672" in caught.value.reason
    assert caught.value.source == "broker"
    assert_no_password(caught.value)


async def test_connection_refused_says_what_to_check() -> None:
    # A real refused connection: a port nothing listens on.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with ManagementClient(f"http://127.0.0.1:{port}", USER, PASSWORD) as client:
        with pytest.raises(BrokerUnavailable) as caught:
            await client.list_queues()
    reason = caught.value.reason
    assert "connection refused" in reason
    assert "management plugin" in reason
    assert "\n" not in reason
    assert_no_password(caught.value)


async def test_500_is_unavailable_with_status(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/queues/%2F").respond(
        500, json={"error": "internal_server_error", "reason": "badarg"}
    )
    with pytest.raises(BrokerUnavailable) as caught:
        await client.list_queues()
    assert caught.value.status == 500
    assert not isinstance(caught.value, BrokerRefused)
    assert "answered 500" in caught.value.reason
    assert "badarg" in caught.value.reason


async def test_401_on_a_read_is_unavailable_and_names_the_user(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/overview").respond(
        401, json={"error": "not_authorized", "reason": "Login failed"}
    )
    with pytest.raises(BrokerUnavailable) as caught:
        await client.facts()
    assert not isinstance(caught.value, BrokerRefused)
    assert caught.value.status == 401
    assert "refused the credentials for user 'reaper' (401" in caught.value.reason
    assert "check [bus] username/password" in caught.value.reason
    assert_no_password(caught.value)


@pytest.mark.parametrize("status", [401, 403])
async def test_401_or_403_on_a_write_is_refused(
    mock: respx.MockRouter, client: ManagementClient, status: int
) -> None:
    mock.put("/api/policies/%2F/vibey-reap").respond(
        status, json={"error": "not_authorised", "reason": "Not administrator user"}
    )
    with pytest.raises(BrokerRefused) as caught:
        await client.put_policy(
            "vibey-reap", {"delivery-limit": 20}, pattern="^vibey\\.", apply_to="queues", priority=0
        )
    assert caught.value.status == status
    assert "policymaker" in caught.value.reason
    assert client.writes_made == 1
    assert_no_password(caught.value)


async def test_400_on_a_policy_is_rejected_with_the_brokers_words_on_one_line(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    # What 3.10 answers, HTML-escaped and multi-line as it comes.
    reason = (
        'Validation failed\n\n[{&lt;&lt;"consumer-timeout"&gt;&gt;,1000}] '
        "are not recognised policy settings\n"
    )
    mock.put("/api/policies/%2F/p").respond(400, json={"error": "bad_request", "reason": reason})
    with pytest.raises(BrokerRejected) as caught:
        await client.put_policy(
            "p", {"consumer-timeout": 1000}, pattern="^x", apply_to="queues", priority=0
        )
    assert caught.value.status == 400
    assert '[{<<"consumer-timeout">>,1000}] are not recognised policy settings' in str(caught.value)
    assert "\n" not in str(caught.value)


async def test_malformed_json_is_unavailable(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/queues/%2F").respond(200, text="<html>proxy error</html>")
    with pytest.raises(BrokerUnavailable) as caught:
        await client.list_queues()
    assert "returned a body that is not JSON" in caught.value.reason
    assert "<html>proxy" in caught.value.reason


async def test_truncated_body_by_content_length_is_unavailable(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    body = json.dumps([queue_item("vibey.a")]).encode()
    mock.get("/api/queues/%2F").respond(
        200,
        content=body[:20],
        headers={"content-type": "application/json", "content-length": str(len(body))},
    )
    with pytest.raises(BrokerUnavailable) as caught:
        await client.list_queues()
    assert f"truncated body on GET /api/queues/%2F (received 20 of {len(body)} bytes)" in str(
        caught.value
    )


async def test_connection_dropped_mid_body_is_unavailable(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/queues/%2F").mock(
        side_effect=httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body"
        )
    )
    with pytest.raises(BrokerUnavailable) as caught:
        await client.list_queues()
    assert "truncated or broken body" in caught.value.reason


async def test_truncated_json_without_length_is_unavailable(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/queues/%2F").respond(200, text='[{"name": "vibey.a", "type": "quo')
    with pytest.raises(BrokerUnavailable, match="not JSON"):
        await client.list_queues()


async def test_a_page_without_items_is_unavailable(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/queues/%2F").respond(200, json={"page": 1, "page_count": 1})
    with pytest.raises(BrokerUnavailable, match="no items list"):
        await client.list_queues()


@pytest.mark.parametrize(
    "shape",
    [
        httpx.ReadTimeout("timed out"),
        httpx.ConnectError(f"cannot connect to http://{USER}:{PASSWORD}@broker.test"),
        httpx.Response(401, json={"reason": f"bad password {PASSWORD}"}),
        httpx.Response(403, json={"reason": "no"}),
        httpx.Response(500, text=f"crash dump password={PASSWORD}"),
        httpx.Response(502, json={"reason": PASSWORD}),
        httpx.Response(200, text=f"not json {PASSWORD}"),
    ],
    ids=["timeout", "connect", "401", "403", "500", "502", "not-json"],
)
async def test_the_password_never_appears_in_an_error(
    mock: respx.MockRouter, client: ManagementClient, shape: Any
) -> None:
    route = mock.route()
    if isinstance(shape, Exception):
        route.mock(side_effect=shape)
    else:
        route.mock(return_value=shape)
    for call in (
        client.facts(),
        client.list_queues(),
        client.put_policy("p", {}, pattern="x", apply_to="queues", priority=0),
        client.get_messages("vibey.q.dlq", 1),
    ):
        with pytest.raises(BrokerUnavailable) as caught:
            await call
        assert_no_password(caught.value)


def test_a_url_with_credentials_is_refused_without_echoing_the_password() -> None:
    with pytest.raises(ValueError) as caught:
        ManagementClient(f"http://{USER}:{PASSWORD}@broker.test:15672", USER, PASSWORD)
    assert PASSWORD not in str(caught.value)
    assert "carries credentials" in str(caught.value)


def test_page_size_is_bounded_by_the_api() -> None:
    with pytest.raises(ValueError, match="page_size"):
        ManagementClient(URL, USER, PASSWORD, page_size=501)


# --------------------------------------------------------------------------- LavinMQ


async def test_a_lavinmq_style_api_is_detected_and_nothing_is_claimed(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/overview").respond(
        200, json={"lavinmq_version": "2.1.0", "product_name": "LavinMQ", "node": "lavin-1"}
    )
    mock.get("/api/consumers/%2F").respond(200, json=[])
    mock.get("/api/nodes").respond(200, json=[{"name": "lavin-1"}])
    lavin_queue = queue_item("vibey.jobs")
    del lavin_queue["type"]
    mock.get("/api/queues/%2F").respond(200, json=page([lavin_queue], 1, 1))
    mock.get("/api/policies/%2F").respond(403, json={"error": "access_refused"})

    facts = await client.facts()
    assert (facts.product, facts.version) == ("LavinMQ", "2.1.0")
    assert not facts.policy_consumer_timeout
    assert not facts.policy_apply_to_queue_type
    assert not facts.unlimited_delivery_limit
    assert facts.default_quorum_delivery_limit is None
    assert facts.consumer_timeout_ms is None
    assert "does not list the config files" in (facts.consumer_timeout_evidence or "")

    [queue] = await client.list_queues()
    # LavinMQ lists no type: a queue with no x-queue-type is its ordinary (classic) queue
    assert queue.type == "classic"
    assert queue.head_message_timestamp is None

    with pytest.raises(BrokerUnavailable) as caught:
        await client.list_policies()
    assert caught.value.status == 403
    assert not isinstance(caught.value, BrokerRefused)  # a read, not a refused write


# --------------------------------------------------------------------------- pagination


async def test_pagination_follows_page_count_with_one_request_per_page(
    mock: respx.MockRouter,
) -> None:
    pages = {n: [queue_item(f"vibey.q.{n}.{i}") for i in range(3)] for n in (1, 2, 3)}
    route = mock.get("/api/queues/%2F").mock(side_effect=paged(pages, 3))
    async with ManagementClient(URL, USER, PASSWORD, page_size=3) as client:
        queues = await client.list_queues()
        assert client.requests_made == 3
        assert client.writes_made == 0
    assert [q.name for q in queues] == [q["name"] for n in (1, 2, 3) for q in pages[n]]
    params = [call.request.url.params for call in route.calls]
    assert sorted(int(p["page"]) for p in params) == [1, 2, 3]
    assert {p["page_size"] for p in params} == {"3"}
    assert {p["columns"] for p in params} == {",".join(QUEUE_COLUMNS)}


async def test_a_queue_seen_on_two_pages_is_kept_once(mock: respx.MockRouter) -> None:
    # A queue created between two page reads shifts the boundary: the last of page 1 is the
    # first of page 2.
    pages = {1: [queue_item("a"), queue_item("b")], 2: [queue_item("b"), queue_item("c")]}
    mock.get("/api/queues/%2F").mock(side_effect=paged(pages, 2))
    async with ManagementClient(URL, USER, PASSWORD, page_size=2) as client:
        assert [q.name for q in await client.list_queues()] == ["a", "b", "c"]


async def test_an_api_that_ignores_pagination_is_one_request(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/queues/%2F").respond(200, json=[queue_item("a"), queue_item("b")])
    assert [q.name for q in await client.list_queues()] == ["a", "b"]
    assert client.requests_made == 1


class _PagesRecorded(httpx.AsyncBaseTransport):
    """Answers ``count`` pages of one queue each, recording which requests were sent and
    which answers' bodies were read (an answer's headers come first, its body on reading)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.sent: list[int] = []
        self.read: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        number = int(request.url.params["page"])
        self.sent.append(number)
        body = json.dumps(page([queue_item(f"q{number}")], number, self.count)).encode()
        return httpx.Response(200, stream=_Body(body, lambda: self.read.append(number)))


class _Body(httpx.AsyncByteStream):
    def __init__(self, body: bytes, on_read: Callable[[], None]) -> None:
        self.body, self.on_read = body, on_read

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.on_read()
        yield self.body


async def test_pages_ahead_are_requested_but_their_bodies_read_only_in_turn() -> None:
    # The broker prepares the pages ahead while one is judged; no page ahead is held.
    transport = _PagesRecorded(8)
    async with ManagementClient(URL, USER, PASSWORD, page_size=1, transport=transport) as client:
        seen = []
        async for queues in client.queue_pages():
            seen += [q.name for q in queues]
            await asyncio.sleep(0.01)  # the caller judges: the requests ahead go out meanwhile
            current = len(seen)
            assert transport.read == list(range(1, current + 1))
            assert sorted(transport.sent) == list(range(1, min(8, current + PAGE_CONCURRENCY) + 1))
        assert client.requests_made == 8
    assert seen == [f"q{n}" for n in range(1, 9)]


async def test_a_failing_page_fails_the_listing(mock: respx.MockRouter) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        number = int(request.url.params["page"])
        if number == 3:
            return httpx.Response(503, json={"reason": "node down"})
        return httpx.Response(200, json=page([queue_item(f"q{number}")], number, 4))

    mock.get("/api/queues/%2F").mock(side_effect=answer)
    async with ManagementClient(URL, USER, PASSWORD, page_size=1) as client:
        with pytest.raises(BrokerUnavailable) as caught:
            await client.list_queues()
    assert caught.value.status == 503


# --------------------------------------------------------------------------- shapes read


async def test_queue_fields_are_read_tolerantly(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    fresh = {"name": "fresh", "vhost": "/", "type": "classic", "arguments": {}}
    unlimited = queue_item(
        "unlimited",
        delivery_limit="unlimited",
        effective_policy_definition={"delivery-limit": -1.0, "consumer-timeout": 21600000.0},
        policy="vibey-dead",
    )
    empty_proplists = queue_item("empty", effective_policy_definition=[], arguments=[], policy="")
    stamped = queue_item("stamped", type="classic", head_message_timestamp=1795956433)
    mock.get("/api/queues/%2F").respond(
        200, json=page([fresh, unlimited, empty_proplists, stamped], 1, 1)
    )
    by_name = {q.name: q for q in await client.list_queues()}

    assert not by_name["fresh"].counts_known
    assert not by_name["fresh"].policy_known
    assert by_name["unlimited"].policy_known
    assert by_name["fresh"].messages == 0
    assert by_name["unlimited"].counts_known
    assert by_name["unlimited"].reported_delivery_limit == -1
    assert by_name["unlimited"].policy == "vibey-dead"
    assert by_name["unlimited"].effective_policy == {
        "delivery-limit": -1,
        "consumer-timeout": 21600000,
    }
    assert by_name["empty"].effective_policy == {}
    assert by_name["empty"].arguments == {}
    assert by_name["empty"].policy is None
    assert by_name["stamped"].head_message_timestamp == 1795956433
    assert by_name["stamped"].reported_delivery_limit is None


async def test_names_are_percent_encoded(mock: respx.MockRouter) -> None:
    route = mock.get(url__regex=r".*/api/queues/.*").respond(
        200, json=queue_item("vibey.é q/1", vhost="tenant/a b")
    )
    async with ManagementClient(URL, USER, PASSWORD, vhost="tenant/a b") as client:
        stats = await client.queue("vibey.é q/1")
    assert stats.name == "vibey.é q/1"
    raw = route.calls.last.request.url.raw_path.decode()
    assert raw.startswith("/api/queues/tenant%2Fa%20b/vibey.%C3%A9%20q%2F1?")


async def test_get_messages_can_only_requeue(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    route = mock.post("/api/queues/%2F/vibey.jobs.dead/get").respond(
        200,
        json=[
            {"payload": "{}", "payload_encoding": "string", "properties": [], "redelivered": False}
        ],
    )
    [message] = await client.get_messages("vibey.jobs.dead", 5)
    sent = json.loads(route.calls.last.request.content)
    assert sent == {
        "count": 5,
        "ackmode": "reject_requeue_true",
        "encoding": "auto",
        "truncate": 50000,
    }
    assert REQUEUEING_ACKMODE == "reject_requeue_true"
    assert message["properties"] == {}  # RabbitMQ answers [] for a message with none
    # There is no way to ask for another ackmode.
    parameters = inspect.signature(ManagementClient.get_messages).parameters
    assert not any("ack" in name for name in parameters)
    assert client.writes_made == 1


async def test_get_messages_without_truncation_sends_no_truncate(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    route = mock.post("/api/queues/%2F/q/get").respond(200, json=[])
    assert await client.get_messages("q", 1, truncate=None) == []
    assert "truncate" not in json.loads(route.calls.last.request.content)


async def test_a_missing_queue_is_unavailable_with_404(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/queues/%2F/gone").respond(404, json={"error": "Object Not Found"})
    with pytest.raises(BrokerUnavailable) as caught:
        await client.queue("gone")
    assert caught.value.status == 404
    assert "has no queue 'gone'" in caught.value.reason


# --------------------------------------------------------------------------- broker-wide timeout


def consumer(queue: str, timeout: int, **arguments: Any) -> dict[str, Any]:
    return {
        "consumer_tag": "amq.ctag-1",
        "consumer_timeout": timeout,
        "arguments": arguments,
        "queue": {"name": queue, "vhost": "/"},
        "ack_required": True,
    }


async def test_a_live_consumer_without_override_is_the_strongest_evidence(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/overview").respond(200, json={**OVERVIEW_RABBIT, "rabbitmq_version": "4.0.5"})
    mock.get("/api/consumers/%2F").respond(
        200,
        json=[
            consumer("own-arg", 5000, **{"x-consumer-timeout": 5000}),
            consumer("deleted-since", 7000),
            consumer("by-policy", 60000),
            consumer("plain", 21600000),
        ],
    )
    mock.get("/api/queues/%2F/by-policy").respond(
        200, json=queue_item("by-policy", effective_policy_definition={"consumer-timeout": 60000})
    )
    mock.get("/api/queues/%2F/plain").respond(200, json=queue_item("plain"))
    mock.get("/api/queues/%2F/deleted-since").respond(404, json={"error": "Object Not Found"})
    mock.get("/api/nodes").respond(
        200,
        json=[{"name": "rabbit@h", "config_files": ["/etc/rabbitmq/conf.d/20-vibey-reap.conf"]}],
    )

    facts = await client.facts(declared_consumer_timeout_ms=1)
    assert facts.consumer_timeout_ms == 21600000
    # Stronger than the node's word that the snippet (declaring 1 ms here) was loaded.
    assert "live consumer on queue 'plain'" in (facts.consumer_timeout_evidence or "")
    assert facts.policy_consumer_timeout and facts.default_quorum_delivery_limit == 20


@pytest.mark.parametrize(
    ("files", "declared", "expected", "evidence"),
    [
        (
            ["/etc/rabbitmq/rabbitmq.conf", "/etc/rabbitmq/conf.d/20-vibey-reap.conf"],
            21600000,
            21600000,
            "loaded /etc/rabbitmq/conf.d/20-vibey-reap.conf at boot, which declares 21600000",
        ),
        (
            ["/etc/rabbitmq/conf.d/20-vibey-reap.conf"],
            None,
            None,
            "the API does not show the value in it",
        ),
        (["/etc/rabbitmq/rabbitmq.conf"], 21600000, None, "did not load 20-vibey-reap.conf"),
    ],
    ids=["snippet-declared", "snippet-undeclared", "no-snippet"],
)
async def test_the_node_tells_only_whether_the_snippet_was_loaded(
    mock: respx.MockRouter,
    client: ManagementClient,
    files: list[str],
    declared: int | None,
    expected: int | None,
    evidence: str,
) -> None:
    mock.get("/api/overview").respond(200, json=OVERVIEW_RABBIT)
    mock.get("/api/consumers/%2F").respond(200, json=[])
    mock.get("/api/nodes").respond(200, json=[{"name": "rabbit@h", "config_files": files}])
    facts = await client.facts(declared_consumer_timeout_ms=declared)
    assert facts.consumer_timeout_ms == expected
    assert evidence in (facts.consumer_timeout_evidence or "")


async def test_a_node_the_user_may_not_read_leaves_the_timeout_unknown(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    mock.get("/api/overview").respond(200, json=OVERVIEW_RABBIT)
    mock.get("/api/consumers/%2F").respond(403, json={"reason": "Not monitor user"})
    mock.get("/api/nodes").respond(403, json={"reason": "Not monitor user"})
    facts = await client.facts(declared_consumer_timeout_ms=21600000)
    assert facts.consumer_timeout_ms is None
    assert "not readable by this user" in (facts.consumer_timeout_evidence or "")


# --------------------------------------------------------------------------- pure helpers


@pytest.mark.parametrize(
    ("product", "version", "four"),
    [
        ("RabbitMQ", "3.10.8", False),
        ("RabbitMQ", "3.13.7", False),
        ("RabbitMQ", "4.0.5", True),
        ("RabbitMQ", "4.1.0-rc.1", True),
        ("RabbitMQ", "4.3.6", True),
        ("LavinMQ", "2.1.0", False),
        ("unknown", "unknown", False),
    ],
)
def test_capabilities_come_from_the_version(product: str, version: str, four: bool) -> None:
    facts = capabilities_for(product, version)
    assert facts.policy_consumer_timeout is four
    assert facts.policy_apply_to_queue_type is four
    assert facts.unlimited_delivery_limit is four
    assert facts.default_quorum_delivery_limit == (20 if four else None)


@pytest.mark.parametrize("profile", [RABBITMQ_310, RABBITMQ_40, RABBITMQ_43, LAVINMQ])
def test_capabilities_are_the_profiles_the_unit_tests_judge_with(profile: BrokerFacts) -> None:
    assert capabilities_for(profile.product, profile.version) == profile


def test_normalize_definition_makes_integral_floats_ints() -> None:
    assert normalized(
        {"delivery-limit": 20.0, "ratio": 0.5, "flag": True, "nested": {"x": [1.0, 2.5]}}
    ) == {"delivery-limit": 20, "ratio": 0.5, "flag": True, "nested": {"x": [1, 2.5]}}
    assert normalized({"a": 20.0}) == normalized({"a": 20})
    assert type(normalized({"a": 20.0})["a"]) is int


async def test_a_read_whose_kept_alive_connection_was_closed_is_sent_once_more(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    """The node closed a pooled connection just as the request went out (seen on RabbitMQ 4.3
    under load): a read asks again, once."""
    route = mock.get("/api/queues/%2F").mock(
        side_effect=[
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            httpx.Response(200, json=page([queue_item("vibey.a")], 1, 1)),
        ]
    )
    queues = await client.list_queues()
    assert [q.name for q in queues] == ["vibey.a"]
    assert route.call_count == 2
    assert client.api.requests_made == 2 and client.api.writes_made == 0


async def test_a_read_broken_twice_is_unavailable_after_two_tries(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    route = mock.get("/api/queues/%2F").mock(
        side_effect=httpx.ReadError("connection reset by peer")
    )
    with pytest.raises(BrokerUnavailable, match="truncated or broken body"):
        await client.list_queues()
    assert route.call_count == 2
    assert (client.api.requests_made, client.api.writes_made, client.api.resent) == (2, 0, ["GET"])


async def test_a_policy_put_whose_connection_broke_is_sent_once_more(
    mock: respx.MockRouter, client: ManagementClient
) -> None:
    """Seen on RabbitMQ 4.0: the node closed the kept-alive connection after answering a PUT
    with 401, as the next PUT went out on it. A PUT writes the whole policy: sent again, it
    leaves what one would, and the answer is the broker's own (here the refusal)."""
    route = mock.put("/api/policies/%2F/vibey-reap-classic").mock(
        side_effect=[
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            httpx.Response(401, json={"error": "not_authorised", "reason": "Not policymaker"}),
        ]
    )
    with pytest.raises(BrokerRefused) as refused:
        await client.put_policy(
            "vibey-reap-classic", {"max-length": 1}, pattern=r"^vibey\.", apply_to="queues",
            priority=0,
        )  # fmt: skip
    assert refused.value.status == 401
    assert route.call_count == 2
    assert (client.api.writes_made, client.api.resent) == (2, ["PUT"])


@pytest.mark.parametrize(
    ("method", "path", "send"),
    [
        # a requeueing get: sent twice, it could count two deliveries on a quorum queue
        ("POST", "/api/queues/%2F/vibey.dead/get", lambda c: c.get_messages("vibey.dead", 5)),
        # a DELETE that took effect answers 404 the second time
        ("DELETE", "/api/policies/%2F/vibey-reap-old", lambda c: c.delete_policy("vibey-reap-old")),
    ],
    ids=["requeueing-get", "delete"],
)
async def test_a_write_whose_connection_broke_is_never_sent_twice(
    mock: respx.MockRouter,
    client: ManagementClient,
    method: str,
    path: str,
    send: Callable[[ManagementClient], Awaitable[object]],
) -> None:
    route = mock.request(method, path).mock(
        side_effect=httpx.RemoteProtocolError("Server disconnected without sending a response.")
    )
    with pytest.raises(BrokerUnavailable, match="truncated or broken body"):
        await send(client)
    assert route.call_count == 1
    assert (client.api.writes_made, client.api.resent) == (1, [])
