"""Which bound is in force on a queue, and which queues are whose.

Which bound is in force on a queue, and which queues are whose: the rules the judge, the
policy verifier and the dead-letter read plan all ask, answered in one place. Pure.

Each rule reads the queue the way the broker resolves it (policy key, queue argument,
broker-wide value, version default), so that what the reaper says is in force is what the
broker would apply; and a consumer timeout counts only where the version enforces it on the
queue's type (:meth:`BrokerFacts.timeout_enforcement`), whatever the queue shows. "Unknown" is
a value (:class:`Bound` with ``known=False``), never a ``None`` that could be mistaken for "no
bound".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from reaper.core.domain import BrokerFacts, QueueStats, Thresholds
from reaper.core.enforcement import TimeoutSetting
from reaper.core.values import mapping, positive, whole

__all__ = [
    "POLICY_NOT_LISTED",
    "Bound",
    "consumer_timeout_bound",
    "dead_letter_exchange_in_force",
    "delivery_limit_bound",
    "get_holder_unseen",
    "is_consumerless_queue",
    "is_dead_letter_queue",
    "is_owned_queue",
    "message_ttl_ms",
]

POLICY_NOT_LISTED = "the broker has not yet listed the queue's policy"


@dataclass(frozen=True)
class Bound:
    """A bound the broker enforces on one queue, and where it was found.

    ``value`` is None when no finite bound is in force. ``known`` is False when that cannot be
    told (the broker's facts were not read, or the broker has not yet listed the queue's
    policy), so None never stands for "unknown" by accident. ``enforced`` is False when the
    version does not enforce (or was never pinned enforcing) this kind of bound on the queue's
    type, or enforces it only from a setting the queue lacks and the reaper cannot write
    (LavinMQ: the queue argument alone): whatever the queue shows, nothing is in force, and
    ``source`` says why, ``fix`` what a person does.
    """

    value: int | None
    source: str
    known: bool = True
    enforced: bool = True
    #: What a person does to put a bound in force where the reaper cannot ("" when it can,
    #: or when nothing can).
    fix: str = ""


def consumer_timeout_bound(queue: QueueStats, broker: BrokerFacts | None) -> Bound:
    """The consumer timeout (ms) the broker enforces on ``queue``.

    As RabbitMQ resolves it, among the settings the version enforces on the queue's type: the
    lower of the policy key ``consumer-timeout`` and the queue argument ``x-consumer-timeout``
    when either is set, else the broker-wide ``consumer_timeout``. A setting the version
    ignores (3.10's argument) is passed over and named; on a queue type the version does not
    enforce (4.3's classic queues) or was never pinned on, nothing is in force
    (``enforced=False``), whatever the queue's ``effective_policy_definition`` shows. Only a
    positive whole number counts as a bound. Not known while the broker has not yet listed the
    queue's policy, or without the broker's facts (then the version is not known either).
    """
    if not queue.policy_known:
        return Bound(None, POLICY_NOT_LISTED, known=False)
    if broker is None:
        return Bound(
            None,
            "broker facts not read, so which consumer timeout the broker enforces is not known",
            known=False,
        )
    shown = {
        TimeoutSetting.POLICY: positive(mapping(queue.effective_policy).get("consumer-timeout")),
        TimeoutSetting.ARGUMENT: positive(mapping(queue.arguments).get("x-consumer-timeout")),
        TimeoutSetting.BROKER_WIDE: positive(broker.consumer_timeout_ms),
    }
    enforcement = broker.timeout_enforcement(queue.kind)
    if enforcement is None or not enforcement.enforced:
        if enforcement is None:
            why = (
                f"{broker.name} was never pinned enforcing a consumer timeout on {queue.kind} "
                "queues, so none counts as in force"
            )
        else:
            why = f"{broker.name} enforces no consumer timeout on {queue.kind} queues"
            why += f": {enforcement.why}" if enforcement.why else ""
        return Bound(None, why + _shown_text(shown), enforced=False)
    ignored = {s: v for s, v in shown.items() if v is not None and not enforcement.enforces(s)}
    also = f"; {broker.name} ignores {_listed(ignored)}" if ignored else ""
    policy = shown[TimeoutSetting.POLICY] if TimeoutSetting.POLICY not in ignored else None
    argument = shown[TimeoutSetting.ARGUMENT] if TimeoutSetting.ARGUMENT not in ignored else None
    if policy is not None and argument is not None:
        return Bound(
            min(policy, argument),
            "policy consumer-timeout and argument x-consumer-timeout" + also,
        )
    if policy is not None:
        return Bound(policy, "policy consumer-timeout" + also)
    if argument is not None:
        return Bound(argument, "argument x-consumer-timeout" + also)
    wide = shown[TimeoutSetting.BROKER_WIDE]
    if wide is not None and enforcement.enforces(TimeoutSetting.BROKER_WIDE):
        evidence = (
            f" ({broker.consumer_timeout_evidence})" if broker.consumer_timeout_evidence else ""
        )
        return Bound(wide, f"broker-wide consumer_timeout{evidence}" + also)
    if enforcement.enforced == {TimeoutSetting.ARGUMENT}:
        # Only the queue's own declaration can bound it: no policy or node setting counts.
        return Bound(
            None,
            f"{broker.name} enforces a consumer timeout only from the queue argument "
            f"x-consumer-timeout, and this {queue.kind} queue was declared without it" + also,
            enforced=False,
            fix="declare the queue with the argument x-consumer-timeout",
        )
    absent = [
        f"no {name}"
        for setting, name in (
            (TimeoutSetting.POLICY, "consumer-timeout policy"),
            (TimeoutSetting.ARGUMENT, "x-consumer-timeout argument"),
            (TimeoutSetting.BROKER_WIDE, "broker-wide consumer_timeout in force"),
        )
        if enforcement.enforces(setting)
    ]
    return Bound(None, ", ".join(absent) + also)


def _listed(shown: Mapping[TimeoutSetting, int | None]) -> str:
    names = {
        TimeoutSetting.POLICY: "policy consumer-timeout",
        TimeoutSetting.ARGUMENT: "argument x-consumer-timeout",
        TimeoutSetting.BROKER_WIDE: "broker-wide consumer_timeout",
    }
    return " and ".join(f"{names[s]} {v}" for s, v in shown.items() if v is not None)


def _shown_text(shown: Mapping[TimeoutSetting, int | None]) -> str:
    """What the queue (and the node) show, which bounds nothing here."""
    if all(v is None for v in shown.values()):
        return ""
    return f"; shown but not in force: {_listed(shown)}"


def get_holder_unseen(queue: QueueStats, broker: BrokerFacts | None) -> str | None:
    """Why a live holder may hide behind "unacknowledged messages, no consumer" on ``queue``,
    or None when it cannot: a ``basic.get`` delivery still held is not counted in
    ``consumers`` on every queue type (measured on 3.10, 4.0 and 4.3: quorum queues count it,
    classic queues do not)."""
    if broker is None:
        return None
    counted = broker.get_holder_counted_as_consumer
    if counted is None:
        return (
            f"{broker.name} was never pinned on whether it counts a basic.get holder as a consumer"
        )
    if queue.kind in counted:
        return None
    return f"{broker.name} does not count a basic.get holder as a consumer on {queue.kind} queues"


def delivery_limit_applies(queue: QueueStats, broker: BrokerFacts | None) -> bool:
    """Whether a delivery limit can bind ``queue`` at all: a quorum queue always; a classic
    one only on LavinMQ (it lists no queue type), and only where a policy ``delivery-limit``
    or an ``x-delivery-limit`` argument sets one. RabbitMQ's classic queues have none."""
    if queue.kind != "classic":
        return queue.kind == "quorum"
    lavinmq = queue.type is None or (broker is not None and broker.product.lower() == "lavinmq")
    limit_set = "delivery-limit" in mapping(queue.effective_policy) or "x-delivery-limit" in (
        mapping(queue.arguments)
    )
    return lavinmq and limit_set


def delivery_limit_bound(queue: QueueStats, broker: BrokerFacts | None) -> Bound:
    """The delivery limit in force on a quorum ``queue``; ``value`` None means unlimited.

    Where the broker reports the limit it resolved (4.x lists ``delivery_limit``), that is the
    answer. Otherwise as RabbitMQ resolves it (``rabbit_quorum_queue:resolve_delivery_limit``):
    with both the policy key ``delivery-limit`` and the argument ``x-delivery-limit`` set, the
    lower of the two, unless either is negative, then the higher; with neither, the broker's
    default (20 on 4.x, none on 3.x). A negative limit is unlimited. So a dead-letter policy of
    -1 does not lift a queue's own ``x-delivery-limit`` of 5: 5 stays in force.
    """
    reported = whole(queue.reported_delivery_limit)
    if reported is not None:
        return Bound(None if reported < 0 else reported, "as the broker reports it on the queue")
    if not queue.policy_known:
        return Bound(None, POLICY_NOT_LISTED, known=False)
    policy = whole(mapping(queue.effective_policy).get("delivery-limit"))
    argument = whole(mapping(queue.arguments).get("x-delivery-limit"))
    if policy is not None and argument is not None:
        both = max(policy, argument) if policy < 0 or argument < 0 else min(policy, argument)
        limit, source = both, "policy delivery-limit and argument x-delivery-limit"
    elif policy is not None:
        limit, source = policy, "policy delivery-limit"
    elif argument is not None:
        limit, source = argument, "argument x-delivery-limit"
    elif broker is None:
        return Bound(None, "no delivery-limit policy or argument, and broker facts not read", False)
    elif broker.default_quorum_delivery_limit is None:
        return Bound(
            None, f"no delivery-limit policy or argument, and {broker.name} sets no default"
        )
    else:
        limit = broker.default_quorum_delivery_limit
        source = f"{broker.name} default for quorum queues"
    return Bound(None if limit < 0 else limit, source)


def dead_letter_exchange_in_force(queue: QueueStats) -> str | None:
    """The dead-letter exchange in force (the queue argument wins, as on RabbitMQ), or None.
    An empty name is the default exchange, which still dead-letters. Callers check
    ``queue.policy_known``: an unlisted policy may hold one."""
    for value in (
        mapping(queue.arguments).get("x-dead-letter-exchange"),
        mapping(queue.effective_policy).get("dead-letter-exchange"),
    ):
        if isinstance(value, str):
            return value
    return None


def message_ttl_ms(queue: QueueStats) -> int | None:
    """The per-queue message TTL in force (ms): the lower of ``x-message-ttl`` and the policy
    key ``message-ttl``, as RabbitMQ resolves it; None when neither is a whole number >= 0.
    Callers check ``queue.policy_known``: an unlisted policy may hold a lower one."""
    values = [
        ttl
        for ttl in (
            whole(mapping(queue.arguments).get("x-message-ttl")),
            whole(mapping(queue.effective_policy).get("message-ttl")),
        )
        if ttl is not None and ttl >= 0
    ]
    return min(values) if values else None


def is_owned_queue(name: str, thresholds: Thresholds) -> bool:
    return re.search(thresholds.owned_queue_pattern, name) is not None


def is_dead_letter_queue(name: str, thresholds: Thresholds) -> bool:
    return re.search(thresholds.dead_letter_queue_pattern, name) is not None


def is_consumerless_queue(name: str, thresholds: Thresholds) -> bool:
    return re.search(thresholds.consumerless_queue_pattern, name) is not None
