"""The broker-wide ``consumer_timeout`` in force, and the evidence for it (SPEC §4).

The strongest evidence the broker offers, in order:

1. RabbitMQ 3.12+: a live consumer in ``GET /api/consumers/{vhost}`` shows the timeout in
   force on it; only a consumer with no per-consumer, per-queue or policy override tells the
   broker-wide value.
2. ``GET /api/nodes/{node}``: ``config_files`` lists the files loaded at boot; a file ending in
   ``20-vibey-reap.conf`` proves our snippet was loaded, but the API never shows the value
   inside it, so the value is the one the caller declares it ships (``declared_ms``), and
   None when the caller does not say.
3. Otherwise None, with the evidence saying why: the reaper never assumes the broker's
   built-in default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Final

from reaper.broker.http import ManagementApi, segment
from reaper.broker.records import QUEUE_COLUMNS, queue_of
from reaper.core.values import mapping, whole
from reaper.errors import BrokerUnavailable

__all__ = ["CONFIG_SNIPPET_NAME", "broker_wide_consumer_timeout"]

#: The name of the broker-wide snippet this project ships (``conf.d/rabbitmq/``).
CONFIG_SNIPPET_NAME: Final = "20-vibey-reap.conf"

#: How many live consumers are inspected (one queue read each) when looking for one that
#: shows the broker-wide timeout.
_CONSUMER_CANDIDATES: Final = 3


async def broker_wide_consumer_timeout(
    api: ManagementApi, vhost: str, node: str | None, declared_ms: int | None
) -> tuple[int | None, str]:
    """The broker-wide consumer timeout in force (ms, or None) and the evidence for it."""
    # Both reads at once: the pass waits for the broker's facts before it lists queues.
    live, from_node = await asyncio.gather(
        _from_live_consumer(api, vhost), _from_node(api, node, declared_ms)
    )
    return live if live is not None else from_node


async def _from_node(
    api: ManagementApi, node: str | None, declared_ms: int | None
) -> tuple[int | None, str]:
    if node is None:
        return None, "the overview names no node, so its loaded config files cannot be read"
    path = f"/api/nodes/{segment(node)}"
    try:
        body = await api.request("GET", path, params={"columns": "name,config_files"})
    except BrokerUnavailable as exc:
        if exc.status in (401, 403, 404):
            return None, f"node {node} is not readable by this user: {exc.reason}"
        raise
    files = api.mapping(body, path).get("config_files")
    if not isinstance(files, list):
        return None, f"node {node} does not list the config files it loaded"
    snippet = next(
        (f for f in files if isinstance(f, str) and f.endswith(CONFIG_SNIPPET_NAME)), None
    )
    if snippet is None:
        loaded = ", ".join(str(f) for f in files) or "none"
        return None, (
            f"node {node} did not load {CONFIG_SNIPPET_NAME} (loaded: {loaded}); "
            "the API does not show the consumer_timeout in force"
        )
    if declared_ms is None:
        return None, f"node {node} loaded {snippet} at boot; the API does not show the value in it"
    return declared_ms, (
        f"node {node} loaded {snippet} at boot, which declares {declared_ms} ms "
        "(config_files proves the file was loaded, not its value)"
    )


async def _from_live_consumer(api: ManagementApi, vhost: str) -> tuple[int, str] | None:
    """RabbitMQ 3.12+ shows each consumer's timeout. The figure is broker-wide only when
    neither the consumer (``x-consumer-timeout``), the queue's arguments nor its policy
    override it."""
    try:
        consumers = await api.request("GET", f"/api/consumers/{segment(vhost)}")
    except BrokerUnavailable as exc:
        if exc.status in (401, 403, 404):
            return None
        raise
    if not isinstance(consumers, list):
        return None
    inspected = 0
    for consumer in consumers:
        if not isinstance(consumer, Mapping) or inspected >= _CONSUMER_CANDIDATES:
            continue
        timeout = whole(consumer.get("consumer_timeout"))
        queue = mapping(consumer.get("queue"))
        name = queue.get("name")
        if timeout is None or not isinstance(name, str):
            continue
        if "x-consumer-timeout" in mapping(consumer.get("arguments")):
            continue
        inspected += 1
        where = str(queue.get("vhost", vhost))
        path = f"/api/queues/{segment(where)}/{segment(name)}"
        try:
            body = await api.request(
                "GET", path, params={"columns": ",".join(QUEUE_COLUMNS)}, missing=f"queue {name!r}"
            )
        except BrokerUnavailable as exc:
            if exc.status == 404:  # deleted since it was listed
                continue
            raise
        stats = queue_of(body, where)
        if stats is None:
            raise api.unavailable(f"answered GET {path} with a queue that has no name")
        if "x-consumer-timeout" in stats.arguments or "consumer-timeout" in stats.effective_policy:
            continue
        return timeout, (
            f"a live consumer on queue {stats.name!r} (vhost {stats.vhost!r}) with no "
            f"override shows consumer_timeout {timeout} ms (/api/consumers)"
        )
    return None
