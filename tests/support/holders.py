"""Real AMQP consumers that hold a delivery and never acknowledge it, for pinning what a broker
does about a consumer timeout (``test_consumer_timeout_enforcement.py``).

Each :class:`Holder` has a connection of its own (pika, manual ack, prefetch 1), so a channel
the broker closes takes nothing else with it. :func:`watch` services every holder's connection
(heartbeats included: a connection left unserviced is closed by the broker after a minute)
and records, on the monotonic clock, when the channel opened, when the delivery arrived, and
when the broker cancelled the consumer (``basic.cancel``) or closed the channel.

The broker-wide ``consumer_timeout`` can only be changed on the node, for everyone on it:
:func:`broker_wide_timeout` sets it for as short a window as the caller needs, under an
exclusive lock that every holder takes (shared) while it opens its channel and consumes, so no
holder of this project's tests picks up the short value by accident.
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pika
import pika.exceptions

from tests.support.services import BrokerUnderTest

#: The broker-wide value ``conf.d/rabbitmq/20-vibey-reap.conf`` ships on every test broker;
#: a window always ends by putting it back.
SHIPPED_CONSUMER_TIMEOUT_MS = 21_600_000
#: If the test process dies inside a window, the node restores the value itself this much later.
WINDOW_SAFETY_MS = 10_000


def connect(broker: BrokerUnderTest) -> Any:
    """An AMQP connection to the broker's AMQP port, into the test's vhost."""
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            host=urlsplit(broker.management_url).hostname or "127.0.0.1",
            port=broker.amqp_port,
            virtual_host=broker.vhost,
            credentials=pika.PlainCredentials(broker.username, broker.password),
            connection_attempts=3,
            retry_delay=1,
        )
    )


@dataclass
class Holder:
    """One consumer on a connection of its own, holding the first delivery it gets."""

    broker: BrokerUnderTest
    queue: str
    arguments: dict[str, object] | None = None
    connection: Any = None
    channel: Any = None
    opened_at: float | None = None
    consumed_at: float | None = None
    delivered_at: float | None = None
    cancelled_at: float | None = None
    closed_at: float | None = None
    close_code: int | None = None
    close_text: str = ""
    deliveries: list[bool] = field(default_factory=list)  # the redelivered flag of each

    def connect(self) -> None:
        self.connection = connect(self.broker)

    def start(self) -> None:
        """Open the channel and consume: manual ack, prefetch 1."""
        self.channel = self.connection.channel()
        self.opened_at = time.monotonic()
        self.channel.basic_qos(prefetch_count=1)
        self.channel.add_on_cancel_callback(self._on_cancel)
        self.channel.basic_consume(
            self.queue,
            on_message_callback=self._on_message,
            auto_ack=False,
            arguments=self.arguments,
        )
        self.consumed_at = time.monotonic()

    def _on_message(self, _channel: Any, method: Any, _properties: Any, _body: bytes) -> None:
        if self.delivered_at is None:
            self.delivered_at = time.monotonic()
        self.deliveries.append(bool(method.redelivered))  # held: never acknowledged

    def _on_cancel(self, _frame: Any) -> None:
        self.cancelled_at = time.monotonic()

    def service(self, seconds: float) -> None:
        """Let the connection do its work for up to ``seconds``; record a channel closed by
        the broker."""
        if self.connection is None or self.connection.is_closed:
            return
        try:
            self.connection.process_data_events(time_limit=seconds)
        except pika.exceptions.ChannelClosedByBroker as exc:
            self._closed(exc.reply_code, exc.reply_text)
        if self.closed_at is None and self.channel is not None and self.channel.is_closed:
            reason = getattr(self.channel, "_closing_reason", None)
            code = getattr(reason, "reply_code", None)
            self._closed(code, str(getattr(reason, "reply_text", reason)))

    def _closed(self, code: int | None, text: str) -> None:
        if self.closed_at is None:
            self.closed_at = time.monotonic()
            self.close_code, self.close_text = code, text

    @property
    def acted_on(self) -> bool:
        """The broker cancelled the consumer or closed its channel."""
        return self.cancelled_at is not None or self.closed_at is not None

    def since_consume(self, moment: float | None) -> float | None:
        """Seconds from ``basic.consume`` to ``moment``: the message waits in the queue before
        the consumer starts, so the broker delivers it at once. (``delivered_at`` is when this
        process read the delivery, which may be later.)"""
        if moment is None or self.consumed_at is None:
            return None
        return round(moment - self.consumed_at, 1)

    def since_open(self, moment: float | None) -> float | None:
        if moment is None or self.opened_at is None:
            return None
        return round(moment - self.opened_at, 1)

    def figures(self) -> str:
        if self.cancelled_at is not None:
            what = f"cancelled +{self.since_consume(self.cancelled_at)} s after the delivery"
        elif self.closed_at is not None:
            what = (
                f"channel closed {self.close_code} +{self.since_consume(self.closed_at)} s "
                f"after the delivery, +{self.since_open(self.closed_at)} s after channel open"
            )
        else:
            what = f"still held {self.since_consume(time.monotonic())} s after the delivery"
        return f"RabbitMQ {self.broker.version} {self.queue}: {what}"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.connection is not None and self.connection.is_open:
                self.connection.close()


def watch(holders: Sequence[Holder], seconds: float, done: Callable[[], bool]) -> float:
    """Service every holder until ``done()`` or ``seconds`` have passed; the seconds taken."""
    started = time.monotonic()
    while time.monotonic() - started < seconds and not done():
        for h in holders:
            h.service(0.05)
    return time.monotonic() - started


def delivered(holders: Sequence[Holder], seconds: float = 20) -> None:
    """Wait until every holder holds its delivery."""
    watch(holders, seconds, lambda: all(h.delivered_at is not None for h in holders))
    missing = [h.queue for h in holders if h.delivered_at is None]
    assert not missing, f"no delivery within {seconds} s on {missing}"


# --------------------------------------------------------------------------- the node


def rabbitmqctl(broker: BrokerUnderTest, *args: str) -> str:
    completed = subprocess.run(
        [*broker.rabbitmqctl, *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, (args, completed.stdout, completed.stderr)
    return completed.stdout.strip()


def node_value(broker: BrokerUnderTest, key: str) -> str:
    """The node's ``rabbit`` application setting ``key``, as ``rabbitmqctl eval`` prints it."""
    return rabbitmqctl(broker, "eval", f"application:get_env(rabbit, {key}).")


@contextlib.contextmanager
def node_lock(broker: BrokerUnderTest, name: str, exclusive: bool) -> Iterator[None]:
    """A file lock ``name`` of the node's, across this machine's test processes."""
    port = broker.management_url.rsplit(":", 1)[-1].strip("/")
    path = Path(tempfile.gettempdir()) / f"queue-reaper-{name}-{port}.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def node_setting(broker: BrokerUnderTest, key: str, during: int, kept: int) -> Iterator[None]:
    """The node's ``rabbit`` setting ``key`` is ``during`` inside the block and ``kept`` again
    right after it (in a ``finally``; the node also restores it by itself ``WINDOW_SAFETY_MS``
    later, should this process die inside the window). The caller holds the setting's lock."""
    held = f"{{ok,{kept}}}"
    assert node_value(broker, key) == held, f"the node does not hold {key} = {kept}"
    try:
        rabbitmqctl(
            broker,
            "eval",
            f"application:set_env(rabbit, {key}, {during}), "
            f"timer:apply_after({WINDOW_SAFETY_MS}, application, set_env, "
            f"[rabbit, {key}, {kept}]).",
        )
        yield
    finally:
        rabbitmqctl(broker, "eval", f"application:set_env(rabbit, {key}, {kept}).")
    assert node_value(broker, key) == held


def start(holders: Sequence[Holder]) -> None:
    """Open and consume outside any broker-wide window (a shared hold of the window's lock)."""
    with node_lock(holders[0].broker, "consumer-timeout", exclusive=False):
        for h in holders:
            h.start()


@contextlib.contextmanager
def broker_wide_timeout(broker: BrokerUnderTest, ms: int) -> Iterator[None]:
    """The node's broker-wide ``consumer_timeout`` is ``ms`` inside the block, and the shipped
    value again right after it (:func:`node_setting`). Keep the block to opening channels and
    consuming: every channel opened meanwhile on the node (3.10, 4.0), or every quorum consumer
    started meanwhile (4.3), takes the short value."""
    with (
        node_lock(broker, "consumer-timeout", exclusive=True),
        node_setting(broker, "consumer_timeout", ms, SHIPPED_CONSUMER_TIMEOUT_MS),
    ):
        yield
