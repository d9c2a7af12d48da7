"""A broker in memory, for unit tests of the pass (no tests here).

It answers as the ``Broker`` port says, from queues the test declares, and applies written
policies to them the way RabbitMQ selects one (highest priority whose pattern matches and whose
``apply-to`` admits the queue's type). It is a stand-in for the pass's own logic, never evidence
about a real broker: what brokers do is pinned live in ``tests/integration``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace

from reaper.broker.capabilities import capabilities_for
from reaper.broker.port import BrokerPolicy, ManagementEndpoint, QueuesByVhost, RawMessage
from reaper.core.domain import BrokerFacts, BrokerNode, QueueCounters, QueueStats
from reaper.core.observation import ChannelStats, ConsumerSeen

_APPLIES = {"queues": {"classic", "quorum"}, "quorum_queues": {"quorum"}}
_APPLIES["classic_queues"] = {"classic"}


def _truncated(message: RawMessage, truncate: int) -> RawMessage:
    payload = message.get("payload")
    if not isinstance(payload, str) or len(payload) <= truncate:
        return message
    return {**message, "payload": payload[: max(0, truncate)]}


@dataclass
class FakeBroker:
    version: str = "4.0.5"
    consumer_timeout_ms: int | None = 21_600_000
    queues: dict[str, QueueStats] = field(default_factory=dict)
    messages: dict[str, list[RawMessage]] = field(default_factory=dict)
    policies: dict[str, BrokerPolicy] = field(default_factory=dict)
    published: list[tuple[str, str]] = field(default_factory=list)
    channels: list[ChannelStats] = field(default_factory=list)
    consumers: list[ConsumerSeen] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    requests: int = 0
    writes: int = 0
    nodes: tuple[BrokerNode, ...] | None = None
    #: Messages whose whole body a get returned (one that did not truncate).
    bodies_read: int = 0
    #: List each queue's counters as RabbitMQ does (``deliver_get`` once something was
    #: fetched, the bodies' bytes); off, every counter is unlisted (unknown).
    counting: bool = False
    #: Messages every get so far returned, per queue (``deliver_get``).
    fetched: dict[str, int] = field(default_factory=dict)
    #: Queues a page of :meth:`queue_pages` lists.
    page_size: int = 500
    #: Queues other vhosts hold, by vhost (this broker's own are :attr:`queues`, on ``/``).
    elsewhere: dict[str, list[str]] = field(default_factory=dict)

    @property
    def requests_made(self) -> int:
        return self.requests

    @property
    def writes_made(self) -> int:
        return self.writes

    def begin_pass(self) -> None:
        pass

    def endpoints(self) -> tuple[ManagementEndpoint, ...]:
        return (ManagementEndpoint("http://fake-broker.test", True),)

    def declare(self, name: str, kind: str = "classic", **counts: int) -> None:
        self.queues[name] = QueueStats(
            vhost="/",
            name=name,
            type=kind,
            messages_ready=counts.get("ready", 0),
            messages_unacknowledged=counts.get("unacked", 0),
            consumers=counts.get("consumers", 0),
        )

    def put_letters(self, queue: str, letters: list[RawMessage]) -> None:
        self.messages[queue] = list(letters)
        self.queues[queue] = replace(self.queues[queue], messages_ready=len(letters))

    async def list_channels(self, vhost: str | None = None) -> list[ChannelStats]:
        self.requests += 1
        return list(self.channels)

    async def list_consumers(self, vhost: str | None = None) -> list[ConsumerSeen]:
        self.requests += 1
        return list(self.consumers)

    async def facts(self, *, declared_consumer_timeout_ms: int | None = None) -> BrokerFacts:
        self.requests += 1
        return replace(
            capabilities_for("RabbitMQ", self.version),
            consumer_timeout_ms=self.consumer_timeout_ms,
            consumer_timeout_evidence="the fake broker says so",
            nodes=self.nodes,
        )

    async def list_queues(self, vhost: str | None = None) -> list[QueueStats]:
        self.requests += 1
        return [self._with_policy(q) for q in self.queues.values()]

    async def queue_pages(self, vhost: str | None = None) -> AsyncIterator[list[QueueStats]]:
        """The queues in pages of ``page_size``, one request each."""
        listed = [self._with_policy(q) for q in self.queues.values()]
        self.requests += 1
        yield listed[: self.page_size]
        for start in range(self.page_size, len(listed), self.page_size):
            self.requests += 1
            yield listed[start : start + self.page_size]

    async def queues_by_vhost(self, pattern: str) -> QueuesByVhost:
        self.requests += 1
        named = {"/": list(self.queues), **self.elsewhere}
        counts = {v: sum(bool(re.search(pattern, q)) for q in qs) for v, qs in named.items()}
        return QueuesByVhost({v: n for v, n in counts.items() if n})

    async def queue(self, name: str, vhost: str | None = None) -> QueueStats:
        self.requests += 1
        return self._with_counters(self._with_policy(self.queues[name]))

    async def get_messages(
        self, queue: str, count: int, *, vhost: str | None = None, truncate: int | None = 50000
    ) -> list[RawMessage]:
        self.requests += 1
        self.writes += 1
        self.reads.append(queue)
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        found = list(self.messages.get(queue, []))[:count]
        if found:
            self.fetched[queue] = self.fetched.get(queue, 0) + len(found)
        if truncate is None:
            self.bodies_read += len(found)
            return found
        # as RabbitMQ answers: the payload cut to `truncate` characters, its size stated whole
        return [_truncated(m, truncate) for m in found]

    async def publish(
        self,
        queue: str,
        body: str,
        *,
        properties: Mapping[str, object] | None = None,
        vhost: str | None = None,
    ) -> bool:
        self.requests += 1
        self.writes += 1
        self.published.append((queue, body))
        return queue in self.queues

    async def list_policies(self, vhost: str | None = None) -> list[BrokerPolicy]:
        self.requests += 1
        return list(self.policies.values())

    async def put_policy(
        self,
        name: str,
        definition: Mapping[str, object],
        *,
        pattern: str,
        apply_to: str,
        priority: int,
        vhost: str | None = None,
    ) -> None:
        self.requests += 1
        self.writes += 1
        self.policies[name] = BrokerPolicy(name, pattern, apply_to, priority, dict(definition))

    async def delete_policy(self, name: str, *, vhost: str | None = None) -> None:
        self.requests += 1
        self.writes += 1
        self.policies.pop(name, None)

    async def aclose(self) -> None:
        pass

    def _with_counters(self, queue: QueueStats) -> QueueStats:
        if not self.counting:
            return queue
        sizes = [m.get("payload_bytes") for m in self.messages.get(queue.name, [])]
        return replace(
            queue,
            counters=QueueCounters(
                fetched=self.fetched.get(queue.name),
                message_bytes=sum(s for s in sizes if isinstance(s, int)),
            ),
        )

    def _with_policy(self, queue: QueueStats) -> QueueStats:
        matching = [
            p
            for p in self.policies.values()
            if isinstance(p.pattern, str)
            and re.search(p.pattern, queue.name)
            and queue.kind in _APPLIES.get(str(p.apply_to), set())
            and not (queue.kind == "classic" and "delivery-limit" in p.definition)
        ]
        if not matching:
            return replace(queue, policy=None, effective_policy={})
        best = max(matching, key=lambda p: p.priority if isinstance(p.priority, int) else 0)
        return replace(queue, policy=best.name, effective_policy=dict(best.definition))
