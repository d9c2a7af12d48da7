"""What a broker of a given product and version accepts and enforces, as measured.

What a broker of a given product and version accepts and enforces, as measured on this
project's brokers. Pure.

Capabilities come from the version, never from a probing write: probing would change the
broker's definitions. What a version accepts is pinned in
``tests/integration/test_broker_behaviour.py``; what it enforces, with real consumers holding
a delivery, in ``tests/integration/test_consumer_timeout_enforcement.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from reaper.core.domain import BrokerFacts
from reaper.core.enforcement import TimeoutEnforcement, TimeoutSetting

__all__ = [
    "LAVINMQ_PINNED_VERSIONS",
    "PINNED_VERSIONS",
    "capabilities_for",
    "product_and_version",
    "version_tuple",
]

#: The RabbitMQ lines whose enforcement was pinned with real consumers.
PINNED_VERSIONS: Final = ((3, 10), (4, 0), (4, 3))

#: The LavinMQ lines measured on a real broker built from its source, with real consumers
#: holding deliveries (the responses are kept in ``tests/data/lavinmq-2.9.1``).
LAVINMQ_PINNED_VERSIONS: Final = ((2, 9),)

_QUEUE_TYPES: Final = ("classic", "quorum")
_EVERY_SETTING: Final = frozenset(TimeoutSetting)
_CHANNEL_CLOSE: Final = (
    "closes the consumer's channel (406 PRECONDITION_FAILED, delivery acknowledgement timed "
    "out); the delivery returns to ready"
)
_CHANNEL_TICK: Final = (
    "on the channel's 60 s tick, counted from channel open: between T and T + 60 s after the "
    "delivery"
)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"4.0.5"`` as ``(4, 0, 5)``; stops at the first part that is not a number."""
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def capabilities_for(product: str, version: str) -> BrokerFacts:
    """What a broker of this product and version accepts and enforces (the broker-wide timeout
    comes later: :meth:`reaper.broker.client.ManagementClient.facts`). Enforcement is claimed
    for the lines pinned live only (:data:`PINNED_VERSIONS`, :data:`LAVINMQ_PINNED_VERSIONS`):
    on any other version, or a product we cannot tell, no consumer timeout counts as in force.
    RabbitMQ 3.11-3.13 were not measured and get 3.10's accepted keys: claiming fewer keys makes
    the reconciler fall back rather than write a policy the broker may refuse. The table per
    version is ``docs/brokers.md`` (``tests/unit/test_broker_table.py`` holds the two equal);
    what is accepted is pinned in ``test_broker_behaviour.py`` (tests 1-3, 6, and 10 for a
    ``basic.get`` holder), what is enforced in ``test_consumer_timeout_enforcement.py``."""
    numbers = version_tuple(version)
    if product == "LavinMQ" and numbers[:2] in LAVINMQ_PINNED_VERSIONS:
        return _lavinmq(product, version)
    major_minor = numbers[:2]
    rabbit = product == "RabbitMQ"
    rabbit4 = rabbit and major_minor >= (4, 0)
    pinned = rabbit and major_minor in PINNED_VERSIONS
    # 4.0+ accepts the policy key consumer-timeout, apply-to classic_queues|quorum_queues and
    # delivery-limit -1, and gives a quorum queue a delivery limit of 20 with no policy at all;
    # 3.10 refuses all three and has no default limit.
    return BrokerFacts(
        product=product,
        version=version,
        policy_consumer_timeout=rabbit4,
        policy_apply_to_queue_type=rabbit4,
        unlimited_delivery_limit=rabbit4,
        default_quorum_delivery_limit=20 if rabbit4 else None,
        consumer_timeout_enforcement=_enforcement(numbers) if pinned else (),
        get_holder_counted_as_consumer=frozenset({"quorum"}) if pinned else None,
    )


def _enforcement(numbers: tuple[int, ...]) -> tuple[TimeoutEnforcement, ...]:
    if numbers[:2] == (3, 10):
        why = (
            "the channel enforces the broker-wide value it read when it opened; the queue "
            "argument x-consumer-timeout is accepted and ignored"
        )
        return tuple(
            TimeoutEnforcement(
                t,
                frozenset({TimeoutSetting.BROKER_WIDE}),
                _CHANNEL_CLOSE,
                _CHANNEL_TICK,
                why,
            )
            for t in _QUEUE_TYPES
        )
    if numbers[:2] == (4, 0):
        why = "the channel enforces the policy, the queue argument or the broker-wide value"
        return tuple(
            TimeoutEnforcement(t, _EVERY_SETTING, _CHANNEL_CLOSE, _CHANNEL_TICK, why)
            for t in _QUEUE_TYPES
        )
    refused = frozenset({TimeoutSetting.ARGUMENT}) if numbers >= (4, 3, 2) else frozenset()
    return (
        TimeoutEnforcement(
            "classic",
            frozenset(),
            "",
            "",
            "4.3 moved consumer timeouts from the channel into the queue types, and classic "
            "queues implement none, neither the policy key nor the broker-wide value "
            "(rabbitmq-server#16983): on this version only a quorum queue is bounded",
            refused,
        ),
        TimeoutEnforcement(
            "quorum",
            _EVERY_SETTING,
            "cancels the consumer (basic.cancel; the channel stays open); the delivery returns "
            "to ready",
            "when T has elapsed, by a timer in the queue",
            "the quorum queue enforces it since 4.3; measured on 4.3.6, a consumer that had "
            "acknowledged an earlier delivery was at times not cancelled until the queue's "
            "next command",
        ),
    )


def _lavinmq(product: str, version: str) -> BrokerFacts:
    """LavinMQ 2.9, as measured on 2.9.1 (policy PUTs and queue readings recorded in
    ``tests/data/lavinmq-2.9.1``; consumers holding deliveries with pika). It has no quorum
    queues: one declared ``x-queue-type: quorum`` is an ordinary queue, and ``apply-to:
    quorum_queues`` reaches every non-stream queue. Only a queue's ``x-consumer-timeout``
    bounds a delivery, and a held ``basic.get`` delivery is not counted in ``consumers``."""
    # delivery-limit -1 is accepted (201) and empties the queue at once (3 -> 0 messages: a
    # delivery count of 0 is "greater than -1"), so it never means unlimited. The policy key
    # consumer-timeout is refused as a number (400, "should be of type String") and, as a
    # string, accepted and never applied (effective_policy_definition stays empty); the
    # broker-wide consumer_timeout is not enforced (a delivery still held after 40 s of a 3 s
    # limit).
    return BrokerFacts(
        product=product,
        version=version,
        policy_consumer_timeout=False,
        policy_apply_to_queue_type=True,
        unlimited_delivery_limit=False,
        default_quorum_delivery_limit=None,
        consumer_timeout_enforcement=(
            TimeoutEnforcement(
                "classic",
                frozenset({TimeoutSetting.ARGUMENT}),
                "closes the consumer's channel (406 PRECONDITION_FAILED, consumer timeout); the "
                "delivery returns to ready",
                "on the vhost's consumer-timeout check, every consumer_timeout_loop_interval "
                "(60 s by default): between T and T + 60 s after the delivery",
                "LavinMQ takes a queue's consumer timeout from its x-consumer-timeout argument "
                "alone: the policy key is never applied and the broker-wide consumer_timeout "
                "is not enforced, so only a queue declared with the argument is bounded",
            ),
        ),
        get_holder_counted_as_consumer=frozenset(),
        quorum_queues=False,
        unlimited_delivery_limit_empties=True,
    )


def product_and_version(overview: Mapping[str, object]) -> tuple[str, str]:
    """The product and version ``GET /api/overview`` names: ``rabbitmq_version`` (RabbitMQ),
    or ``lavinmq_version`` / ``product_name: "LavinMQ"`` (LavinMQ)."""
    product_name = str(overview.get("product_name") or "")
    if "lavinmq_version" in overview or product_name.lower() == "lavinmq":
        version = overview.get("lavinmq_version") or overview.get("product_version") or ""
        return "LavinMQ", str(version) or "unknown"
    if "rabbitmq_version" in overview:
        return "RabbitMQ", str(overview["rabbitmq_version"])
    return (product_name or "unknown"), str(overview.get("product_version") or "unknown")
