"""What the management API answers, read purely into the reaper's values.

Every number and table goes through :mod:`reaper.core.values`, so a queue's counts mean the
same here as in the judge. A queue listed before its statistics arrive lacks its counts and
policy fields; that absence is kept (``counts_known``/``policy_known``), never read as zero.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from reaper.broker.port import BrokerPolicy, RawMessage
from reaper.core.domain import QueueCounters, QueueStats
from reaper.core.observation import ChannelStats, ConsumerSeen
from reaper.core.values import limit, mapping, normalized, whole

__all__ = [
    "CHANNEL_COLUMNS",
    "CONSUMER_COLUMNS",
    "LAVINMQ",
    "QUEUE_COLUMNS",
    "RABBITMQ",
    "Dialect",
    "channel_of",
    "consumer_of",
    "dialect_for",
    "message_of",
    "policy_of",
    "queue_of",
]

#: The columns a queue listing asks for: everything the judge and the verifier read, nothing
#: else (the full queue object is ~40 fields with rate details).
QUEUE_COLUMNS: Final = (
    "name",
    "vhost",
    "type",
    "messages_ready",
    "messages_unacknowledged",
    "consumers",
    "head_message_timestamp",
    "policy",
    "effective_policy_definition",
    "arguments",
    # RabbitMQ 4.x only: the delivery limit resolved from policy, argument and default.
    "delivery_limit",
    # Deliveries and gets so far: a stalled queue is measured by it not moving across passes.
    "message_stats.deliver_get",
    # What a quiet pass is decided from (reaper.core.dead_letters.quiet): whether anything was
    # published to, fetched from or acknowledged on the queue since the last pass, and its bytes.
    "message_stats.publish",
    "message_stats.ack",
    "message_bytes",
    # LavinMQ lists no message_bytes, only its two parts (2.9.1, recorded)
    "message_bytes_ready",
    "message_bytes_unacknowledged",
    # Where the queue lives in a cluster (reaper.core.cluster): a queue whose node is gone is
    # still listed, as "down", with these and without its statistics.
    "state",
    "node",
    "leader",
    "members",
    "online",
)


#: A channel listing's columns: what a held delivery is observed from.
CHANNEL_COLUMNS: Final = ("name", "messages_unacknowledged", "message_stats.ack")

#: A consumer listing's columns: which channel consumes from which queue.
CONSUMER_COLUMNS: Final = ("consumer_tag", "ack_required", "queue.name", "channel_details.name")


@dataclass(frozen=True)
class Dialect:
    """How one product's management API answers the same requests (:data:`RABBITMQ`,
    :data:`LAVINMQ`): which columns to ask for, and what an absent field means."""

    product: str
    #: ``columns=`` keeps only top-level keys: ``message_stats.ack`` comes back missing, so
    #: ask for ``message_stats`` (LavinMQ 2.9.1, measured).
    top_level_columns: bool
    #: A counter absent from ``message_stats`` is one that has not moved yet (RabbitMQ lists
    #: a counter only once it has); where False, absent means not measured, never zero.
    absent_counter_is_zero: bool
    #: The queue's ``policy`` and ``effective_policy_definition`` arrive with its statistics
    #: (RabbitMQ), so their absence means "not yet known". Where False (LavinMQ, which omits
    #: ``policy`` from a single queue that has none), ``effective_policy_definition`` alone
    #: tells.
    policy_with_statistics: bool
    #: The queue listing names each queue's ``type``. Where False (LavinMQ lists none), a
    #: queue is a stream or MQTT session where its ``x-queue-type`` says so, else classic:
    #: LavinMQ declares any other ``x-queue-type`` (``quorum`` among them) as its ordinary
    #: queue.
    lists_queue_type: bool

    def columns(self, columns: tuple[str, ...]) -> str:
        """The ``columns=`` value to send for ``columns``."""
        if not self.top_level_columns:
            return ",".join(columns)
        return ",".join(dict.fromkeys(c.split(".", 1)[0] for c in columns))


RABBITMQ: Final = Dialect("RabbitMQ", False, True, True, True)
LAVINMQ: Final = Dialect("LavinMQ", True, False, False, False)

#: LavinMQ's queue types other than its ordinary (classic) one, as ``x-queue-type`` names them.
_LAVINMQ_QUEUE_TYPES: Final = frozenset({"stream", "mqtt"})


def dialect_for(product: str | None) -> Dialect:
    """The dialect of a product as :func:`reaper.broker.capabilities.product_and_version`
    names it; RabbitMQ's for any other (or not yet known)."""
    return LAVINMQ if product == "LavinMQ" else RABBITMQ


def queue_of(item: object, vhost: str, dialect: Dialect = RABBITMQ) -> QueueStats | None:
    """One queue of a listing; None when the item is not a queue (no name)."""
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        return None
    counts = [
        whole(item.get(key)) for key in ("messages_ready", "messages_unacknowledged", "consumers")
    ]
    queue_type = item.get("type") if dialect.lists_queue_type else _lavinmq_type(item)
    policy = item.get("policy")
    counts_known = all(c is not None for c in counts)
    if dialect.policy_with_statistics:
        policy_known = "policy" in item and "effective_policy_definition" in item
    else:
        policy_known = "effective_policy_definition" in item
    return QueueStats(
        vhost=str(item.get("vhost", vhost)),
        name=item["name"],
        type=queue_type if isinstance(queue_type, str) and queue_type else None,
        messages_ready=counts[0] or 0,
        messages_unacknowledged=counts[1] or 0,
        consumers=counts[2] or 0,
        head_message_timestamp=whole(item.get("head_message_timestamp")),
        policy=policy if isinstance(policy, str) and policy else None,
        effective_policy=_table(item.get("effective_policy_definition")),
        arguments=_table(item.get("arguments")),
        # A queue listed before its statistics arrive has no counts and no policy fields;
        # they arrive separately (3.10: policy and consumers first; 4.0 either way).
        counts_known=counts_known,
        policy_known=policy_known,
        reported_delivery_limit=limit(item.get("delivery_limit")),
        deliveries=_counter(item, "deliver_get", dialect) if counts_known else None,
        state=_text(item.get("state")),
        # A replicated queue is served by its leader; ``node`` names it too on RabbitMQ.
        node=_text(item.get("leader")) or _text(item.get("node")),
        members=_names(item.get("members")),
        online=_names(item.get("online")),
        counters=_counters(item),
    )


def _counters(item: Mapping[str, object]) -> QueueCounters:
    """The queue's counters; a counter not listed stays None (unknown), never 0."""
    stats = mapping(item.get("message_stats"))
    return QueueCounters(
        published=whole(stats.get("publish")),
        fetched=whole(stats.get("deliver_get")),
        acknowledged=whole(stats.get("ack")),
        message_bytes=_message_bytes(item),
    )


def _message_bytes(item: Mapping[str, object]) -> int | None:
    """The bodies' bytes on the queue, ready and unacknowledged: ``message_bytes``, or where it
    is not listed (LavinMQ) the sum of its two parts when both are; else unknown."""
    listed = whole(item.get("message_bytes"))
    if listed is not None:
        return listed
    ready = whole(item.get("message_bytes_ready"))
    unacked = whole(item.get("message_bytes_unacknowledged"))
    return None if ready is None or unacked is None else ready + unacked


def _lavinmq_type(item: Mapping[str, object]) -> str:
    declared = mapping(item.get("arguments")).get("x-queue-type")
    return declared if isinstance(declared, str) and declared in _LAVINMQ_QUEUE_TYPES else "classic"


def _counter(item: Mapping[str, object], name: str, dialect: Dialect) -> int | None:
    """A ``message_stats`` counter. RabbitMQ lists a counter once it has moved (and
    ``message_stats`` as ``[]`` before any has), so absent is zero there; elsewhere absent is
    not measured (None), never zero."""
    value = whole(mapping(item.get("message_stats")).get(name))
    if value is None and dialect.absent_counter_is_zero:
        return 0
    return value


def channel_of(item: object, dialect: Dialect = RABBITMQ) -> ChannelStats | None:
    """One channel of a listing; None when the item is not one (no name)."""
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        return None
    return ChannelStats(
        name=item["name"],
        messages_unacknowledged=whole(item.get("messages_unacknowledged")) or 0,
        acks=_counter(item, "ack", dialect),
    )


def consumer_of(item: object) -> ConsumerSeen | None:
    """One consumer of a listing; None when it names no queue or no channel."""
    if not isinstance(item, Mapping):
        return None
    queue = mapping(item.get("queue")).get("name")
    channel = mapping(item.get("channel_details")).get("name")
    if not isinstance(queue, str) or not isinstance(channel, str):
        return None
    tag = item.get("consumer_tag")
    return ConsumerSeen(
        queue=queue,
        channel=channel,
        tag=tag if isinstance(tag, str) else "",
        # a consumer that does not say is taken to require acknowledgements: watched
        ack_required=item.get("ack_required") is not False,
    )


def message_of(item: object) -> RawMessage:
    """A message as ``get`` returned it, with ``properties`` always a table: RabbitMQ answers
    ``[]`` for a message that has none. An item that is not a message object is kept opaque:
    what was read becomes its payload (compact JSON), which is then never taken as whole."""
    if not isinstance(item, Mapping):
        read = json.dumps(item, ensure_ascii=True, separators=(",", ":"), default=str)
        return {"properties": {}, "payload": read, "payload_encoding": "opaque"}
    result = dict(item)
    result["properties"] = dict(mapping(item.get("properties")))
    return result


def policy_of(item: object) -> BrokerPolicy | None:
    """One policy of a listing; None when the item is not a policy (no name)."""
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        return None
    return BrokerPolicy(
        name=item["name"],
        pattern=item.get("pattern"),
        apply_to=item.get("apply-to"),
        priority=item.get("priority"),
        definition=_table(item.get("definition")),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _names(value: object) -> tuple[str, ...] | None:
    """A list of node names; None when the broker did not list one."""
    if not isinstance(value, list):
        return None
    return tuple(v for v in value if isinstance(v, str))


def _table(value: object) -> dict[str, object]:
    """A table read from the broker, integral floats made ints (``20.0`` is 20)."""
    table = normalized(mapping(value))
    return dict(table) if isinstance(table, Mapping) else {}
