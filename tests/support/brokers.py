"""The capability profiles of the brokers this project measured (SPEC §4), as the unit tests
state them. Written out rather than taken from ``capabilities_for``, so a test never shares a
mistake with the code it checks (``test_broker_http`` holds that function to these values). A
test that needs a variant ``replace``s one field.

What each version enforces is what ``tests/integration/test_consumer_timeout_enforcement.py``
pinned with real consumers: 3.10 closes the channel for the broker-wide value only (its
``x-consumer-timeout`` is ignored), 4.0 for any of the three settings, both on the channel's
60 s tick; 4.3 cancels the consumer on quorum queues and enforces nothing on classic queues.
"""

from __future__ import annotations

from reaper.core.domain import BrokerFacts
from reaper.core.enforcement import TimeoutEnforcement, TimeoutSetting

POLICY, ARGUMENT, BROKER_WIDE = (
    TimeoutSetting.POLICY,
    TimeoutSetting.ARGUMENT,
    TimeoutSetting.BROKER_WIDE,
)
_CLOSE = (
    "closes the consumer's channel (406 PRECONDITION_FAILED, delivery acknowledgement timed "
    "out); the delivery returns to ready"
)
_TICK = (
    "on the channel's 60 s tick, counted from channel open: between T and T + 60 s after the "
    "delivery"
)
_WHY_310 = (
    "the channel enforces the broker-wide value it read when it opened; the queue argument "
    "x-consumer-timeout is accepted and ignored"
)
_WHY_40 = "the channel enforces the policy, the queue argument or the broker-wide value"
_WHY_43_CLASSIC = (
    "4.3 moved consumer timeouts from the channel into the queue types, and classic queues "
    "implement none, neither the policy key nor the broker-wide value (rabbitmq-server#16983): "
    "on this version only a quorum queue is bounded"
)
_WHY_43_QUORUM = (
    "the quorum queue enforces it since 4.3; measured on 4.3.6, a consumer that had "
    "acknowledged an earlier delivery was at times not cancelled until the queue's next command"
)

RABBITMQ_310 = BrokerFacts(
    product="RabbitMQ",
    version="3.10.8",
    policy_consumer_timeout=False,
    policy_apply_to_queue_type=False,
    unlimited_delivery_limit=False,
    default_quorum_delivery_limit=None,
    consumer_timeout_enforcement=(
        TimeoutEnforcement("classic", frozenset({BROKER_WIDE}), _CLOSE, _TICK, _WHY_310),
        TimeoutEnforcement("quorum", frozenset({BROKER_WIDE}), _CLOSE, _TICK, _WHY_310),
    ),
    get_holder_counted_as_consumer=frozenset({"quorum"}),
)
RABBITMQ_40 = BrokerFacts(
    product="RabbitMQ",
    version="4.0.5",
    policy_consumer_timeout=True,
    policy_apply_to_queue_type=True,
    unlimited_delivery_limit=True,
    default_quorum_delivery_limit=20,
    consumer_timeout_enforcement=(
        TimeoutEnforcement(
            "classic", frozenset({POLICY, ARGUMENT, BROKER_WIDE}), _CLOSE, _TICK, _WHY_40
        ),
        TimeoutEnforcement(
            "quorum", frozenset({POLICY, ARGUMENT, BROKER_WIDE}), _CLOSE, _TICK, _WHY_40
        ),
    ),
    get_holder_counted_as_consumer=frozenset({"quorum"}),
)
RABBITMQ_43 = BrokerFacts(
    product="RabbitMQ",
    version="4.3.6",
    policy_consumer_timeout=True,
    policy_apply_to_queue_type=True,
    unlimited_delivery_limit=True,
    default_quorum_delivery_limit=20,
    consumer_timeout_enforcement=(
        TimeoutEnforcement("classic", frozenset(), "", "", _WHY_43_CLASSIC, frozenset({ARGUMENT})),
        TimeoutEnforcement(
            "quorum",
            frozenset({POLICY, ARGUMENT, BROKER_WIDE}),
            "cancels the consumer (basic.cancel; the channel stays open); the delivery returns "
            "to ready",
            "when T has elapsed, by a timer in the queue",
            _WHY_43_QUORUM,
        ),
    ),
    get_holder_counted_as_consumer=frozenset({"quorum"}),
)
LAVINMQ = BrokerFacts(
    product="LavinMQ",
    version="2.1.0",
    policy_consumer_timeout=False,
    policy_apply_to_queue_type=False,
    unlimited_delivery_limit=False,
    default_quorum_delivery_limit=None,
)
