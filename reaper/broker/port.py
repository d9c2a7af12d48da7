"""The broker as the pass sees it: a Protocol over the management API, and its records.

The broker as the pass sees it: a Protocol over RabbitMQ's management API, and the typed
records it returns.

:class:`~reaper.broker.client.ManagementClient` is the real implementation (the only importer
of httpx). The pass, the reconciler and the gate answers depend only on this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from reaper.core.domain import BrokerFacts, QueueStats
from reaper.core.observation import ChannelStats, ConsumerSeen

__all__ = [
    "Broker",
    "BrokerPolicy",
    "ManagementEndpoint",
    "QueuesByVhost",
    "RawMessage",
    "policy_body",
]


@dataclass(frozen=True)
class QueuesByVhost:
    """Queues matching a pattern, counted per vhost; ``complete``: every one was counted (a
    broker with more than one page of them counts the first page's)."""

    counts: Mapping[str, int]
    complete: bool = True


#: One message as a requeueing ``get`` returns it: the management API's own object, untouched
#: (``reaper.core.dead_letters.decode`` reads it, whatever it holds).
RawMessage = Mapping[str, object]


@dataclass(frozen=True)
class BrokerPolicy:
    """A policy as the broker holds it, values as read (numbers may come back as floats:
    compare through :func:`reaper.core.values.normalized`)."""

    name: str
    pattern: object
    apply_to: object
    priority: object
    definition: Mapping[str, object]

    def body(self) -> dict[str, object]:
        """The policy as the management API writes it."""
        return policy_body(self.pattern, self.apply_to, self.priority, self.definition)


def policy_body(
    pattern: object, apply_to: object, priority: object, definition: Mapping[str, object]
) -> dict[str, object]:
    """A policy's body as the management API writes and holds it."""
    return {
        "pattern": pattern,
        "apply-to": apply_to,
        "priority": priority,
        "definition": dict(definition),
    }


@dataclass(frozen=True)
class ManagementEndpoint:
    """One management URL (a node of a cluster) and how it fared in this pass: ``answered``
    True when it answered, False when it refused or timed out and was skipped for the rest of
    the pass (``error`` says how), None when the pass did not need it."""

    url: str
    answered: bool | None
    error: str | None = None


class Broker(Protocol):
    """RabbitMQ's management API, as the pass reads (and for policies, writes) it."""

    @property
    def requests_made(self) -> int:
        """Every HTTP request sent so far."""
        ...

    @property
    def writes_made(self) -> int:
        """Those with a writing method (a requeueing read is one)."""
        ...

    def begin_pass(self) -> None:
        """A new pass: every management URL is tried again, in order of preference."""
        ...

    def endpoints(self) -> tuple[ManagementEndpoint, ...]:
        """Each management URL and how it fared since :meth:`begin_pass`."""
        ...

    async def facts(self, *, declared_consumer_timeout_ms: int | None = None) -> BrokerFacts:
        """What the broker is, what it accepts, its nodes, and the broker-wide consumer
        timeout."""
        ...

    async def list_queues(self, vhost: str | None = None) -> list[QueueStats]:
        """Every queue of the vhost, column-projected, in pages, held whole."""
        ...

    def queue_pages(self, vhost: str | None = None) -> AsyncIterator[list[QueueStats]]:
        """Every queue of the vhost, column-projected, one page at a time (a pass judges
        each page and drops it before the next is held)."""
        ...

    async def queue(self, name: str, vhost: str | None = None) -> QueueStats:
        """One queue, column-projected."""
        ...

    async def list_channels(self, vhost: str | None = None) -> list[ChannelStats]:
        """Every channel of the vhost: unacknowledged deliveries, acknowledgements so far."""
        ...

    async def queues_by_vhost(self, pattern: str) -> QueuesByVhost:
        """How many queues whose names ``pattern`` matches each vhost the user may read holds
        (every vhost at once, names only)."""
        ...

    async def list_consumers(self, vhost: str | None = None) -> list[ConsumerSeen]:
        """Every consumer of the vhost: its queue and its channel."""
        ...

    async def get_messages(
        self, queue: str, count: int, *, vhost: str | None = None, truncate: int | None = 50000
    ) -> list[RawMessage]:
        """Read up to ``count`` messages and put them back (``reject_requeue_true``)."""
        ...

    async def publish(
        self,
        queue: str,
        body: str,
        *,
        properties: Mapping[str, object] | None = None,
        vhost: str | None = None,
    ) -> bool:
        """Publish ``body`` to ``queue`` through the default exchange; True if routed."""
        ...

    async def list_policies(self, vhost: str | None = None) -> list[BrokerPolicy]:
        """Every policy of the vhost."""
        ...

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
        """Create or replace a policy (refusals raise ``BrokerRefused``/``BrokerRejected``)."""
        ...

    async def delete_policy(self, name: str, *, vhost: str | None = None) -> None:
        """Delete one of our policies (a refusal raises ``BrokerRefused``)."""
        ...

    async def aclose(self) -> None: ...
