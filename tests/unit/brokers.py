"""The capability profiles of the brokers this project measured (SPEC §4), as the unit tests
state them. Written out rather than taken from ``capabilities_for``, so a test never shares a
mistake with the code it checks (``test_broker_http`` holds that function to these values). A
test that needs a variant ``replace``s one field."""

from __future__ import annotations

from reaper.core.domain import BrokerFacts

RABBITMQ_310 = BrokerFacts(
    product="RabbitMQ",
    version="3.10.8",
    policy_consumer_timeout=False,
    policy_apply_to_queue_type=False,
    unlimited_delivery_limit=False,
    default_quorum_delivery_limit=None,
)
RABBITMQ_40 = BrokerFacts(
    product="RabbitMQ",
    version="4.0.5",
    policy_consumer_timeout=True,
    policy_apply_to_queue_type=True,
    unlimited_delivery_limit=True,
    default_quorum_delivery_limit=20,
)
LAVINMQ = BrokerFacts(
    product="LavinMQ",
    version="2.1.0",
    policy_consumer_timeout=False,
    policy_apply_to_queue_type=False,
    unlimited_delivery_limit=False,
    default_quorum_delivery_limit=None,
)
