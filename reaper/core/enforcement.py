"""What a broker version does about a consumer timeout, per queue type.

What a broker version does about a consumer timeout, per queue type: not only which settings
it accepts but which it enforces (SPEC §4: verified means enforced). Pure values; the profiles
themselves are in :func:`reaper.broker.capabilities.capabilities_for`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["TimeoutEnforcement", "TimeoutSetting"]


class TimeoutSetting(StrEnum):
    """Where a consumer timeout is set on RabbitMQ."""

    POLICY = "policy"  # the policy key consumer-timeout
    ARGUMENT = "argument"  # the queue argument x-consumer-timeout
    BROKER_WIDE = "broker-wide"  # consumer_timeout in the node's configuration


@dataclass(frozen=True)
class TimeoutEnforcement:
    """What one broker version does to a consumer that holds a delivery past its timeout on
    one queue type, as pinned with a real consumer.

    A setting in neither ``enforced`` nor ``refused`` is accepted and ignored: it shows on the
    queue (``effective_policy_definition``, ``arguments``) and bounds nothing.
    """

    queue_type: str
    #: The settings this version enforces on this queue type; empty: none at all.
    enforced: frozenset[TimeoutSetting]
    #: What the broker does to the consumer ("" when nothing).
    action: str
    #: When, counted from the delivery, for a timeout of T ("" when never).
    when: str
    #: Why, in a sentence: the measurement or upstream issue behind it, and for a type with
    #: nothing enforced, what would bound it instead.
    why: str = ""
    #: Settings this version refuses on this queue type (a declare or consume carrying one
    #: fails), beyond the policy key that ``BrokerFacts.policy_consumer_timeout`` covers.
    refused: frozenset[TimeoutSetting] = frozenset()

    def enforces(self, setting: TimeoutSetting) -> bool:
        return setting in self.enforced
