"""``ManagementClient``: RabbitMQ's management HTTP API as the broker port says.

``ManagementClient``: RabbitMQ's management HTTP API as the :class:`~reaper.broker.port.Broker`
port says, over one seam (:mod:`reaper.broker.http`).

Where each fact of :meth:`ManagementClient.facts` comes from: the product and version from
``GET /api/overview``; the capabilities from the version (:mod:`reaper.broker.capabilities`);
the broker-wide consumer timeout from the strongest evidence the broker offers
(:mod:`reaper.broker.evidence`). Nothing a pass calls deletes anything on the broker: the only
message read is a requeueing ``get``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Final

from reaper.broker.capabilities import capabilities_for, product_and_version
from reaper.broker.evidence import broker_wide_consumer_timeout, live_consumer_timeout, read_nodes
from reaper.broker.http import BrokerTls, ManagementApi, Transport, Turn, api_path
from reaper.broker.port import BrokerPolicy, ManagementEndpoint, QueuesByVhost, RawMessage
from reaper.broker.records import (
    CHANNEL_COLUMNS,
    CONSUMER_COLUMNS,
    QUEUE_COLUMNS,
    Dialect,
    channel_of,
    consumer_of,
    dialect_for,
    message_of,
    policy_of,
    queue_of,
)
from reaper.broker.vhosts import queues_by_vhost
from reaper.core.domain import BrokerFacts, QueueStats
from reaper.core.observation import ChannelStats, ConsumerSeen
from reaper.core.values import whole

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "PAGE_CONCURRENCY",
    "REQUEUEING_ACKMODE",
    "ManagementClient",
]

#: RabbitMQ refuses a ``page_size`` above 500 (400 ``invalid_pagination_parameters``). The
#: largest page is also the fastest: every page carries a fixed cost on the broker (it lists
#: and sorts every queue of the vhost before cutting the page), so the fewer pages the better.
#: Measured with bench/broker_read.py over 3,000 queues on RabbitMQ 3.10, against one
#: unpaginated listing: page_size 100 (30 pages) 5.5x, 250 (12 pages) 2.4x, 500 (6 pages)
#: 1.1-1.6x; on 4.0, 500 gives 1.0x.
MAX_PAGE_SIZE: Final = 500
DEFAULT_PAGE_SIZE: Final = 500

#: Pages after the first are requested this many ahead of the one being judged: the broker
#: serves each request in its own process, so concurrent pages overlap their fixed cost. A
#: page ahead holds its answer's headers only; its body is read when its turn comes.
PAGE_CONCURRENCY: Final = 4

#: The only ackmode this client ever sends: the message goes back to the queue. RabbitMQ's
#: ``ack_requeue_false`` deletes it, and LavinMQ's ``ack_requeue_true`` is destructive too.
REQUEUEING_ACKMODE: Final = "reject_requeue_true"


class ManagementClient:
    """A client of one broker's management API, for one default vhost. A cluster's is given
    one URL per node, in order of preference (:mod:`reaper.broker.http` fails over).

    Listings are asked in the dialect of the product :meth:`facts` last found (RabbitMQ's
    until then): LavinMQ's ``columns=`` keeps top-level keys only, so it is asked for
    ``message_stats``, ``queue`` and ``channel_details`` whole."""

    def __init__(
        self,
        management_url: str | Sequence[str],
        username: str,
        password: str,
        *,
        vhost: str = "/",
        timeout_seconds: float = 10,
        transport: Transport | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        tls: BrokerTls | None = None,
    ) -> None:
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be between 1 and {MAX_PAGE_SIZE}, not {page_size}")
        self.api = ManagementApi(
            management_url,
            username,
            password,
            timeout_seconds=timeout_seconds,
            transport=transport,
            tls=tls,
        )
        self.vhost = vhost
        self.page_size = page_size
        self.dialect: Dialect = dialect_for(None)

    @property
    def management_url(self) -> str:
        return self.api.management_url

    @property
    def management_urls(self) -> tuple[str, ...]:
        return self.api.management_urls

    @property
    def username(self) -> str:
        return self.api.username

    def begin_pass(self) -> None:
        self.api.begin_pass()

    def endpoints(self) -> tuple[ManagementEndpoint, ...]:
        """Each management URL and how it fared in this pass, in order of preference."""
        return tuple(
            ManagementEndpoint(
                url,
                True if url in self.api.answered else (False if url in self.api.skipped else None),
                self.api.skipped.get(url),
            )
            for url in self.api.management_urls
        )

    @property
    def requests_made(self) -> int:
        return self.api.requests_made

    @property
    def writes_made(self) -> int:
        return self.api.writes_made

    async def __aenter__(self) -> ManagementClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.api.aclose()

    # ----------------------------------------------------------------------- what it is

    async def whoami(self) -> Mapping[str, object]:
        """``GET /api/whoami``: the user and its tags."""
        return self.api.mapping(await self.api.request("GET", "/api/whoami"), "/api/whoami")

    async def facts(self, *, declared_consumer_timeout_ms: int | None = None) -> BrokerFacts:
        """What the broker is, what it accepts, its nodes, and the broker-wide consumer timeout
        in force with its evidence. ``declared_consumer_timeout_ms`` is the value the shipped
        ``20-vibey-reap.conf`` declares; it is reported as in force only when every running
        node lists that file among the ones it loaded, and a live consumer's figure overrides
        it."""
        overview = self.api.mapping(await self.api.request("GET", "/api/overview"), "/api/overview")
        product, version = product_and_version(overview)
        self.dialect = dialect_for(product)
        # Both at once: the pass waits for the broker's facts before it lists queues.
        (nodes, why_no_nodes), live = await asyncio.gather(
            read_nodes(self.api), live_consumer_timeout(self.api, self.vhost)
        )
        timeout_ms, evidence = broker_wide_consumer_timeout(
            nodes, why_no_nodes, live, declared_consumer_timeout_ms
        )
        return replace(
            capabilities_for(product, version),
            consumer_timeout_ms=timeout_ms,
            consumer_timeout_evidence=evidence,
            nodes=nodes,
        )

    # ----------------------------------------------------------------------- queues

    async def list_queues(self, vhost: str | None = None) -> list[QueueStats]:
        """Every queue of the vhost, column-projected and paginated, held whole: for callers
        that need every queue at once (a plan, the demo). A pass folds
        :meth:`queue_pages` instead and keeps only what it needs."""
        return [q async for page in self.queue_pages(vhost) for q in page]

    async def queue_pages(self, vhost: str | None = None) -> AsyncIterator[list[QueueStats]]:
        """Every queue of the vhost, a page at a time, column-projected: the cost grows with
        pages (``ceil(n / page_size)`` requests), never with queues. ``PAGE_CONCURRENCY`` pages
        are requested ahead of the one the caller works on, so the broker prepares them
        meanwhile, but each holds only its answer's headers until its turn: one page is held
        at a time (beside the one being read), whatever the number of queues. An API that
        ignores pagination and answers a plain list is one page.

        A queue created or deleted while the pages are read can shift the page boundaries by
        a few queues: a queue seen on two neighbouring pages is yielded once, and a queue
        missed is seen by the next pass."""
        vhost = self.vhost if vhost is None else vhost
        path = api_path("queues", vhost)
        first = await self.api.request("GET", path, params=self._page_params(1))
        if isinstance(first, list):
            yield self._queues(first, vhost, path, frozenset())
            return
        page_count = whole(self.api.mapping(first, path).get("page_count")) or 1
        page = self._queues(self._page_items(first, path), vhost, path, frozenset())
        del first
        ahead = _PagesAhead(self, path, page_count)
        try:
            ahead.fill()
            yield page
            while ahead.pending:
                before = frozenset(q.name for q in page)
                del page  # the caller is done with it: not held while the next one is read
                answer = await ahead.next()
                page = self._queues(self._page_items(answer, path), vhost, path, before)
                del answer
                yield page
        finally:
            await ahead.cancel()

    def _page_params(self, page: int) -> dict[str, str | int]:
        return {
            "page": page,
            "page_size": self.page_size,
            "columns": self.dialect.columns(QUEUE_COLUMNS),
        }

    async def _page(self, path: str, number: int, turn: Turn) -> object:
        return await self.api.request("GET", path, params=self._page_params(number), turn=turn)

    def _queues(
        self, items: list[object], vhost: str, path: str, before: frozenset[str]
    ) -> list[QueueStats]:
        """One page's queues, without those the page before already listed (or listed twice)."""
        seen = set(before)
        result: list[QueueStats] = []
        for item in items:
            stats = self._queue(item, vhost, path)
            if stats.name not in seen:
                seen.add(stats.name)
                result.append(stats)
        return result

    def _page_items(self, page: object, path: str) -> list[object]:
        items = page.get("items") if isinstance(page, Mapping) else None
        if not isinstance(items, list):
            raise self.api.unavailable(f"answered GET {path} with a page that has no items list")
        return items

    async def queues_by_vhost(self, pattern: str) -> QueuesByVhost:
        """How many queues matching ``pattern`` each vhost the user may read holds
        (:func:`reaper.broker.vhosts.queues_by_vhost`)."""
        return await queues_by_vhost(self.api, pattern)

    async def queue(self, name: str, vhost: str | None = None) -> QueueStats:
        """One queue, column-projected (for verification). A missing queue is a
        ``BrokerUnavailable`` with status 404."""
        vhost = self.vhost if vhost is None else vhost
        path = api_path("queues", vhost, name)
        body = await self.api.request(
            "GET",
            path,
            params={"columns": self.dialect.columns(QUEUE_COLUMNS)},
            missing=f"queue {name!r}",
        )
        return self._queue(body, vhost, path)

    def _queue(self, item: object, vhost: str, path: str) -> QueueStats:
        stats = queue_of(item, vhost, self.dialect)
        if stats is None:
            raise self.api.unavailable(f"answered GET {path} with a queue that has no name")
        return stats

    # ----------------------------------------------------------------------- consumers

    async def list_channels(self, vhost: str | None = None) -> list[ChannelStats]:
        """Every channel of the vhost, with its unacknowledged deliveries and acknowledgements
        so far (column-projected; one request)."""
        vhost = self.vhost if vhost is None else vhost
        path = api_path("vhosts", vhost, "channels")
        answer = await self.api.request(
            "GET", path, params={"columns": self.dialect.columns(CHANNEL_COLUMNS)}
        )
        listed = (channel_of(item, self.dialect) for item in self._listing(answer, path))
        return [c for c in listed if c is not None]

    async def list_consumers(self, vhost: str | None = None) -> list[ConsumerSeen]:
        """Every consumer of the vhost: its queue and its channel (column-projected; one
        request)."""
        vhost = self.vhost if vhost is None else vhost
        path = api_path("consumers", vhost)
        answer = await self.api.request(
            "GET", path, params={"columns": self.dialect.columns(CONSUMER_COLUMNS)}
        )
        return [c for c in map(consumer_of, self._listing(answer, path)) if c is not None]

    def _listing(self, answer: object, path: str) -> list[object]:
        if isinstance(answer, list):
            return answer
        if isinstance(answer, Mapping) and isinstance(answer.get("items"), list):
            return list(answer["items"])  # a paginated answer
        raise self.api.unavailable(f"answered GET {path} with something that is not a list")

    # ----------------------------------------------------------------------- messages

    async def get_messages(
        self, queue: str, count: int, *, vhost: str | None = None, truncate: int | None = 50000
    ) -> list[RawMessage]:
        """Read up to ``count`` messages and put them back (``reject_requeue_true``, the only
        ackmode this client can send). On a quorum queue each read counts as a delivery."""
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        vhost = self.vhost if vhost is None else vhost
        path = api_path("queues", vhost, queue, "get")
        body: dict[str, object] = {
            "count": count,
            "ackmode": REQUEUEING_ACKMODE,
            "encoding": "auto",
        }
        if truncate is not None:
            body["truncate"] = truncate
        answer = await self.api.request("POST", path, json=body, missing=f"queue {queue!r}")
        if not isinstance(answer, list):
            raise self.api.unavailable(f"answered POST {path} with something that is not messages")
        # An item that is not a message is still a letter read: kept opaque (message_of).
        return [message_of(m) for m in answer]

    async def publish(
        self,
        queue: str,
        body: str,
        *,
        properties: Mapping[str, object] | None = None,
        vhost: str | None = None,
    ) -> bool:
        """Publish ``body`` to ``queue`` through the default exchange; True if it was routed."""
        vhost = self.vhost if vhost is None else vhost
        path = api_path("exchanges", vhost, "amq.default", "publish")
        answer = await self.api.request(
            "POST",
            path,
            json={
                "properties": dict(properties or {}),
                "routing_key": queue,
                "payload": body,
                "payload_encoding": "string",
            },
        )
        return bool(self.api.mapping(answer, path).get("routed"))

    # ----------------------------------------------------------------------- policies

    async def list_policies(self, vhost: str | None = None) -> list[BrokerPolicy]:
        """Every policy of the vhost. One listing: measured on 3.10, 4.0 and 4.3, a user without
        the policymaker tag may list a vhost's policies but not GET one by name (401)."""
        vhost = self.vhost if vhost is None else vhost
        path = api_path("policies", vhost)
        answer = await self.api.request("GET", path)
        policies = [policy_of(p) for p in answer] if isinstance(answer, list) else [None]
        found = [p for p in policies if p is not None]
        if len(found) != len(policies):
            raise self.api.unavailable(f"answered GET {path} with something that is not policies")
        return found

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
        """Create or replace a policy. A key or ``apply-to`` this version refuses raises
        :class:`~reaper.broker.http.BrokerRejected` (400); a user without the ``policymaker``
        tag raises :class:`~reaper.errors.BrokerRefused` (401 on RabbitMQ, 403 on LavinMQ)."""
        vhost = self.vhost if vhost is None else vhost
        await self.api.request(
            "PUT",
            api_path("policies", vhost, name),
            json={
                "pattern": pattern,
                "definition": dict(definition),
                "priority": priority,
                "apply-to": apply_to,
            },
        )

    async def delete_policy(self, name: str, *, vhost: str | None = None) -> None:
        """Delete a policy by name: only ever one of the reaper's own, whose every key this
        broker can no longer be given safely (a withheld delivery limit)."""
        vhost = self.vhost if vhost is None else vhost
        await self.api.request("DELETE", api_path("policies", vhost, name))


class _PagesAhead:
    """The pages of one listing requested ahead (:meth:`ManagementClient.queue_pages`): at
    most ``PAGE_CONCURRENCY``, each waiting with its answer's headers until :meth:`next`
    gives it its turn to read its body."""

    def __init__(self, client: ManagementClient, path: str, page_count: int) -> None:
        self.client = client
        self.path = path
        self.page_count = page_count
        self.following = 2
        self.pending: deque[tuple[asyncio.Event, asyncio.Future[object]]] = deque()

    def fill(self) -> None:
        while self.following <= self.page_count and len(self.pending) < PAGE_CONCURRENCY:
            turn = asyncio.Event()
            number, self.following = self.following, self.following + 1
            self.pending.append(
                (turn, asyncio.ensure_future(self.client._page(self.path, number, turn.wait)))
            )

    async def next(self) -> object:
        """The next page's answer, read now; the page after the last one ahead is asked."""
        turn, answer = self.pending.popleft()
        self.fill()
        turn.set()
        return await answer

    async def cancel(self) -> None:
        for _, answer in self.pending:
            answer.cancel()
        await asyncio.gather(*(answer for _, answer in self.pending), return_exceptions=True)
