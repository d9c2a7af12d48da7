"""The broker-wide ``consumer_timeout`` in force, and the evidence for it on every node.

The broker-wide ``consumer_timeout`` in force, and the evidence for it (SPEC §4), on every
node of the broker. The strongest evidence the broker offers, in order: a live consumer (3.12+,
``GET /api/consumers/{vhost}``) with no per-consumer, per-queue or policy override shows the
broker-wide value; else each node's ``config_files`` (``GET /api/nodes``) listing our snippet
proves it was loaded at boot, though never the value inside it (that is the ``declared_ms`` the
caller says it ships, or None); else None, saying why: the reaper never assumes the broker's
built-in default. In a cluster each node reads its own configuration, so the value is in force
only where every running node loaded the snippet; a node that did not is named, a live consumer
proves nothing of the other nodes, and a stopped node is named as not checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from reaper.broker.http import ManagementApi, api_path
from reaper.broker.records import QUEUE_COLUMNS, queue_of
from reaper.core.domain import BrokerNode
from reaper.core.values import mapping, whole
from reaper.errors import BrokerUnavailable

__all__ = [
    "CONFIG_SNIPPET_NAME",
    "broker_wide_consumer_timeout",
    "live_consumer_timeout",
    "read_nodes",
]

#: The name of the broker-wide snippet this project ships (``conf.d/rabbitmq/``).
CONFIG_SNIPPET_NAME: Final = "20-vibey-reap.conf"

#: How many live consumers are inspected (one queue read each) when looking for one that
#: shows the broker-wide timeout.
_CONSUMER_CANDIDATES: Final = 3


async def read_nodes(api: ManagementApi) -> tuple[tuple[BrokerNode, ...] | None, str]:
    """Every node of the broker (one request), or None and why they cannot be read."""
    path = "/api/nodes"
    try:
        body = await api.request("GET", path, params={"columns": "name,running,config_files"})
    except BrokerUnavailable as exc:
        if exc.status in (401, 403, 404):
            return None, f"the nodes are not readable by this user: {exc.reason}"
        raise
    if not isinstance(body, list):
        raise api.unavailable(f"answered GET {path} with something that is not a node list")
    nodes = []
    for item in body:
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not name:
            raise api.unavailable(f"answered GET {path} with a node that has no name")
        files = item.get("config_files")
        nodes.append(
            BrokerNode(
                name=name,
                # Where a broker does not say (LavinMQ), the node that answered is running.
                running=item.get("running") is not False,
                config_files=(tuple(str(f) for f in files) if isinstance(files, list) else None),
            )
        )
    return tuple(sorted(nodes, key=lambda n: n.name)), ""


def broker_wide_consumer_timeout(
    nodes: Sequence[BrokerNode] | None,
    why_no_nodes: str,
    live: tuple[int, str] | None,
    declared_ms: int | None,
) -> tuple[int | None, str]:
    """The broker-wide consumer timeout in force (ms, or None) and the evidence for it, from
    the nodes as read, a live consumer's figure (if one shows it) and the declared value."""
    if nodes is None:
        return live if live is not None else (None, why_no_nodes)
    if len(nodes) <= 1:
        if live is not None:
            return live
        if not nodes:
            return None, "the broker lists no node, so no loaded config files can be read"
        return _one_node(nodes[0], declared_ms)
    running = [n for n in nodes if n.running]
    stopped = [n.name for n in nodes if not n.running]
    unchecked = (
        f"; not running, so not checked: {', '.join(stopped)} (checked once it runs)"
        if stopped
        else ""
    )
    lacking = [_lacks_snippet(n) for n in running]
    missing = [why for why in lacking if why is not None]
    if not running or missing:
        shown = "; ".join(missing) or "no node is listed running"
        consumer = (
            f"; a live consumer shows {live[0]} ms, but only for its own node" if live else ""
        )
        return None, (
            f"the broker-wide consumer_timeout is not proven on every node of the cluster: "
            f"{shown}{consumer}{unchecked}"
        )
    loaded = (
        f"every running node ({', '.join(n.name for n in running)}) loaded {CONFIG_SNIPPET_NAME}"
    )
    if live is not None:
        return live[0], f"{live[1]}; {loaded} at boot{unchecked}"
    if declared_ms is None:
        return None, f"{loaded} at boot; the API does not show the value in it{unchecked}"
    return declared_ms, (
        f"{loaded} at boot, which declares {declared_ms} ms (config_files proves the file was "
        f"loaded, not its value){unchecked}"
    )


def _snippet(node: BrokerNode) -> str | None:
    return next((f for f in node.config_files or () if f.endswith(CONFIG_SNIPPET_NAME)), None)


def _lacks_snippet(node: BrokerNode) -> str | None:
    """Why a running node does not prove the snippet, or None when it does."""
    if node.config_files is None:
        return f"node {node.name} does not list the config files it loaded"
    if _snippet(node) is None:
        loaded = ", ".join(node.config_files) or "none"
        return f"node {node.name} did not load {CONFIG_SNIPPET_NAME} (loaded: {loaded})"
    return None


def _one_node(node: BrokerNode, declared_ms: int | None) -> tuple[int | None, str]:
    lacking = _lacks_snippet(node)
    if lacking is not None:
        if node.config_files is None:
            return None, lacking
        return None, f"{lacking}; the API does not show the consumer_timeout in force"
    snippet = _snippet(node)
    if declared_ms is None:
        return (
            None,
            f"node {node.name} loaded {snippet} at boot; the API does not show the value in it",
        )
    return declared_ms, (
        f"node {node.name} loaded {snippet} at boot, which declares {declared_ms} ms "
        "(config_files proves the file was loaded, not its value)"
    )


async def live_consumer_timeout(api: ManagementApi, vhost: str) -> tuple[int, str] | None:
    """RabbitMQ 3.12+ shows each consumer's timeout. The figure is broker-wide only when
    neither the consumer (``x-consumer-timeout``), the queue's arguments nor its policy
    override it."""
    try:
        consumers = await api.request("GET", api_path("consumers", vhost))
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
        path = api_path("queues", where, name)
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
