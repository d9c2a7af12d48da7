"""Broker failures said in words, with the fix (SPEC §2, issue: errors pointing the wrong way),
on every supported version: a vhost that does not exist, the AMQP port given as the
management URL, a URL ending in ``/api``, a user without the ``monitoring`` tag, a name that
does not resolve."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reaper.broker.client import ManagementClient
from reaper.errors import BrokerUnavailable
from tests.support.accounts import broker_user
from tests.support.services import AMQP_PORTS, BROKER_PASSWORD, BROKER_USER, BrokerUnderTest


async def failure(
    url: str, path: str = "/api/overview", user: str = BROKER_USER, password: str = BROKER_PASSWORD
) -> str:
    client = ManagementClient(url, user, password)
    try:
        with pytest.raises(BrokerUnavailable) as caught:
            await client.api.request("GET", path)
    finally:
        await client.aclose()
    return caught.value.reason


@pytest.fixture
def untagged(broker: BrokerUnderTest) -> Iterator[tuple[str, str]]:
    """A user with a password and permissions on the test's vhost, and no tags."""
    with broker_user(broker, "qr-untagged", "") as name_and_password:
        yield name_and_password


async def test_a_vhost_that_does_not_exist(broker: BrokerUnderTest) -> None:
    reason = await failure(broker.management_url, "/api/queues/qr-no-such-vhost")
    assert "has no vhost 'qr-no-such-vhost' (404 on GET /api/queues/qr-no-such-vhost)" in reason
    assert "set bus.vhost to one that exists" in reason


async def test_the_amqp_port_as_the_management_url(broker: BrokerUnderTest) -> None:
    port = AMQP_PORTS[broker.version]
    reason = await failure(f"http://127.0.0.1:{port}")
    assert "closed the connection without an HTTP answer" in reason
    if port == 5672:
        assert "port 5672 is RabbitMQ's AMQP port, not the management API's" in reason
    else:
        assert f"port {port} may be an AMQP port rather than the management API's" in reason
    assert "15672 for http, 15671 for https" in reason


async def test_a_url_ending_in_api(broker: BrokerUnderTest) -> None:
    reason = await failure(f"{broker.management_url}/api")
    assert "the URL ends in /api, and the reaper adds /api/... itself" in reason
    assert f"set the management URL to {broker.management_url}" in reason


async def test_a_user_without_the_monitoring_tag(
    broker: BrokerUnderTest, untagged: tuple[str, str]
) -> None:
    name, password = untagged
    reason = await failure(broker.management_url, user=name, password=password)
    assert "Not management user" in reason
    assert f"accepted the password of user {name!r} but its tags do not allow" in reason
    assert f"rabbitmqctl set_user_tags {name} monitoring policymaker" in reason
    assert "check [bus] username/password" not in reason
    # A wrong password is still a wrong password.
    wrong = await failure(broker.management_url, user=name, password="not-it")
    assert "check [bus] username/password" in wrong


async def test_a_name_that_does_not_resolve() -> None:
    reason = await failure("http://qr-no-such-host.invalid:15672")
    assert "the name 'qr-no-such-host.invalid' does not resolve" in reason


async def test_nothing_listening() -> None:
    reason = await failure("http://127.0.0.1:1")
    assert "connection refused or unreachable" in reason
