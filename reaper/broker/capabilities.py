"""What a broker of a given product and version accepts, as measured on this project's
brokers (``tests/integration/test_broker_behaviour.py`` pins each value live). Pure.

Capabilities come from the version, never from a probing write: probing would change the
broker's definitions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from reaper.core.domain import BrokerFacts

__all__ = ["capabilities_for", "product_and_version", "version_tuple"]


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
    """What a broker of this product and version accepts. No broker-wide timeout yet: see
    :meth:`reaper.broker.client.ManagementClient.facts`.

    - RabbitMQ 4.0+: policy ``consumer-timeout``, ``apply-to: classic_queues|quorum_queues``
      and ``delivery-limit: -1`` are accepted; quorum queues get a delivery limit of 20 with
      no policy at all.
    - RabbitMQ 3.x: measured on 3.10, which refuses all three and has no default limit.
      3.11-3.13 were not measured here and get the 3.10 profile: it claims fewer keys, so the
      reconciler falls back rather than writing a policy the broker may refuse.
    - LavinMQ, or a product we cannot tell: nothing claimed.
    """
    major_minor = version_tuple(version)[:2]
    rabbit4 = product == "RabbitMQ" and major_minor >= (4, 0)
    return BrokerFacts(
        product=product,
        version=version,
        policy_consumer_timeout=rabbit4,
        policy_apply_to_queue_type=rabbit4,
        unlimited_delivery_limit=rabbit4,
        default_quorum_delivery_limit=20 if rabbit4 else None,
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
