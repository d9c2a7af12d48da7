"""Rendering: the declarations filled with the thresholds and cut to what the broker accepts.

Pure (SPEC §4). A key the version refuses is dropped and recorded as :class:`Unsupported`, with
the fallback in force instead (or that nothing proves one); so is a value it accepts but that
would harm, and a declaration for a queue type the broker lacks is written for no queue
(LavinMQ: both, in ``docs/brokers.md``). A consumer timeout accepted but not enforced on the
declaration's queue type (4.3's classic queues) is still written, as :class:`Unenforced`: never
verified. On 3.10, where ``apply-to`` cannot name a queue type, the quorum policy is written
``apply-to: queues``: measured on 3.10, 4.0 and 4.3, a policy carrying ``delivery-limit`` never
attaches to a classic queue (``tests/integration/test_policy_behaviour.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from reaper.broker.port import policy_body
from reaper.core.bounds import dead_letter_exchange_in_force
from reaper.core.domain import BrokerFacts, QueueStats
from reaper.core.enforcement import TimeoutSetting
from reaper.core.terminal import first_few
from reaper.core.values import is_unlimited
from reaper.errors import ConfigError
from reaper.policies.declarations import (
    QUEUE_TYPE_APPLY_TO,
    Declaration,
    PolicyParameters,
    fill,
)

__all__ = ["DesiredPolicy", "Unenforced", "Unsupported", "Withheld", "render"]

#: Keys a RabbitMQ policy may carry that make it attach to quorum queues only: measured on
#: 3.10, 4.0 and 4.3, a policy carrying ``delivery-limit`` does not attach to a classic queue.
_QUORUM_ONLY_KEYS: Final = frozenset({"delivery-limit"})


@dataclass(frozen=True)
class Unsupported:
    """A declared key (or ``apply-to`` value) this broker cannot take, and what holds instead.

    ``fallback_in_force`` is False when the broker's facts cannot show the fallback (or show
    a different value): the outcome then fails, saying so."""

    key: str
    declared: object
    detail: str
    fallback_in_force: bool


@dataclass(frozen=True)
class Unenforced:
    """A declared key this broker accepts on the policy but does not enforce on the queue
    type the policy is for: written all the same, never verified (``NotEnforced``)."""

    key: str
    declared: object
    detail: str


@dataclass(frozen=True)
class Withheld:
    """A finite ``delivery-limit`` not written because an owned queue the policy selects has
    no dead-letter target in force: there the broker would drop a message at its last
    delivery (SPEC §1 (c), §4). ``queues``: those queues."""

    key: str
    declared: object
    queues: tuple[str, ...]

    @property
    def detail(self) -> str:
        shown = first_few(self.queues)
        return (
            f"{self.key} {self.declared} withheld: {shown} "
            f"{'has' if len(self.queues) == 1 else 'have'} no dead-letter target in force (no "
            "x-dead-letter-exchange argument, no dead-letter-exchange policy key), so a finite "
            "limit would drop messages"
        )

    @property
    def fix(self) -> str:
        return (
            "declare each with x-dead-letter-exchange (and a dead-letter queue bound to it); "
            "the next pass then writes the limit"
        )


@dataclass(frozen=True)
class DesiredPolicy:
    """One declaration rendered for one broker.

    ``definition`` is what is written; ``declared`` every bound the declaration asks for,
    including keys this broker refuses (verification checks each of them on the queues,
    through the fallback when the policy cannot carry it). ``writable`` is False when nothing
    can be expressed (or not without touching queues it is not for): then nothing is written
    and the outcome is ``unsupported``.
    """

    name: str
    source: str
    queue_type: str
    pattern: str
    apply_to: str
    priority: int
    definition: Mapping[str, object]
    declared: Mapping[str, object]
    facts: BrokerFacts
    writable: bool = True
    unsupported: tuple[Unsupported, ...] = ()
    unenforced: tuple[Unenforced, ...] = ()
    #: The declaration's offset above ``policy_priority`` (already included in ``priority``).
    priority_offset: int = 0
    #: A finite delivery limit not written: a queue it would reach has no dead-letter target.
    withheld: tuple[Withheld, ...] = ()

    def body(self) -> dict[str, object]:
        """The policy as the management API holds it."""
        return policy_body(self.pattern, self.apply_to, self.priority, self.definition)

    def selects(self, queue: QueueStats) -> bool:
        """Whether ``queue`` is one this policy is declared for: its name matches the pattern
        (Python ``re`` standing in for Erlang's, search semantics) and its type is the
        declared one (:attr:`QueueStats.kind`)."""
        return queue.kind == self.queue_type and re.search(self.pattern, queue.name) is not None

    @property
    def fallbacks_in_force(self) -> bool:
        return all(u.fallback_in_force for u in self.unsupported)


def render(
    declarations: Sequence[Declaration],
    params: PolicyParameters,
    facts: BrokerFacts,
    queues: Sequence[QueueStats] | None = None,
) -> list[DesiredPolicy]:
    """The declarations filled with ``params`` and cut to what ``facts`` says the broker
    accepts. Pure. Raises :class:`~reaper.errors.ConfigError` for a rendered pattern Python
    cannot compile or a priority that is not an integer.

    ``queues`` (the vhost's, as listed): a finite ``delivery-limit`` is withheld from a
    policy that selects a queue with no dead-letter target in force, since the broker would
    drop that queue's messages at their last delivery (:class:`Withheld`). Every caller that
    writes passes them; without them (rendering alone) nothing is withheld."""
    values = params.placeholders()
    problems: list[str] = []
    desired: list[DesiredPolicy] = []
    for d in declarations:
        name = str(fill(d.name, values))
        pattern = str(fill(d.pattern, values))
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"{d.source}: rendered pattern {pattern!r} does not compile: {exc}")
            continue
        priority = fill(d.priority, values)
        if isinstance(priority, str) and re.fullmatch(r"-?\d+", priority):
            priority = int(priority)
        if isinstance(priority, bool) or not isinstance(priority, int):
            problems.append(f"{d.source}: priority {priority!r} is not an integer")
            continue
        declared = {k: fill(v, values) for k, v in d.definition.items()}
        definition, unsupported, unenforced = _accepted(d, declared, facts)
        withheld = _withheld(d, pattern, definition, queues)
        for w in withheld:
            del definition[w.key]
            del declared[w.key]
        apply_to, writable = d.apply_to, bool(definition)
        if apply_to in QUEUE_TYPE_APPLY_TO and not facts.policy_apply_to_queue_type and writable:
            confined = (
                d.queue_type == "quorum"
                and facts.product == "RabbitMQ"
                and any(k in _QUORUM_ONLY_KEYS for k in definition)
            )
            unsupported.append(_apply_to_fallback(d, definition, facts, confined))
            apply_to, writable = ("queues", True) if confined else (apply_to, False)
        desired.append(
            DesiredPolicy(
                name=name,
                source=d.source,
                queue_type=d.queue_type,
                pattern=pattern,
                apply_to=apply_to,
                priority=priority + d.priority_offset,
                definition=definition,
                declared=declared,
                facts=facts,
                writable=writable,
                unsupported=tuple(unsupported),
                unenforced=tuple(unenforced),
                priority_offset=d.priority_offset,
                withheld=withheld,
            )
        )
    if problems:
        raise ConfigError(problems)
    return desired


def _accepted(
    d: Declaration, declared: Mapping[str, object], facts: BrokerFacts
) -> tuple[dict[str, object], list[Unsupported], list[Unenforced]]:
    """The keys this broker takes (the definition to write), those it refuses, and those it
    takes without enforcing them on the declaration's queue type."""
    definition: dict[str, object] = {}
    unsupported: list[Unsupported] = []
    unenforced: list[Unenforced] = []
    # A declaration for a queue type the broker does not have is written for no queue.
    if d.queue_type == "quorum" and not facts.quorum_queues:
        return definition, [_no_quorum_queues(d, facts)], unenforced
    for key, value in declared.items():
        refused = _unsupported_key(key, value, facts, d.queue_type)
        if refused is None:
            definition[key] = value
            ignored = _unenforced_key(key, value, facts, d.queue_type)
            unenforced.extend([ignored] if ignored is not None else [])
        else:
            unsupported.append(refused)
    return definition, unsupported, unenforced


def _withheld(
    d: Declaration,
    pattern: str,
    definition: Mapping[str, object],
    queues: Sequence[QueueStats] | None,
) -> tuple[Withheld, ...]:
    """The finite delivery limit that would reach a queue with no dead-letter target."""
    value = definition.get("delivery-limit")
    if value is None or is_unlimited(value) or queues is None:
        return ()
    lacking = tuple(
        sorted(
            q.name
            for q in queues
            if q.kind == d.queue_type
            and re.search(pattern, q.name) is not None
            and dead_letter_exchange_in_force(q) is None
        )
    )
    return (Withheld("delivery-limit", value, lacking),) if lacking else ()


def _unsupported_key(
    key: str, value: object, facts: BrokerFacts, queue_type: str
) -> Unsupported | None:
    if key == "consumer-timeout" and not facts.policy_consumer_timeout:
        return _consumer_timeout_fallback(value, facts, queue_type)
    if key == "delivery-limit" and is_unlimited(value) and facts.unlimited_delivery_limit_empties:
        return Unsupported(
            key,
            value,
            f"delivery-limit {value} is accepted by {facts.name} but empties the queue at once "
            "(measured: a delivery count of 0 is greater than -1), so it is never written; in "
            "force instead: no delivery limit, which a queue has there when no policy or "
            "argument sets one",
            True,
        )
    if key == "delivery-limit" and is_unlimited(value) and not facts.unlimited_delivery_limit:
        if facts.default_quorum_delivery_limit is None:
            return Unsupported(
                key,
                value,
                f"delivery-limit {value} (unlimited) is not accepted by {facts.name}; in "
                "force instead: no delivery limit, which is what a quorum queue has on this "
                "version when no policy or argument sets one (the work-queue policies exclude "
                "dead-letter queues)",
                True,
            )
        return Unsupported(
            key,
            value,
            f"delivery-limit {value} (unlimited) is not accepted by {facts.name}, which "
            f"gives every quorum queue a delivery limit of {facts.default_quorum_delivery_limit}"
            " by default: reads of a dead-letter queue would spend it, and nothing here can "
            "lift it",
            False,
        )
    return None


def _unenforced_key(
    key: str, value: object, facts: BrokerFacts, queue_type: str
) -> Unenforced | None:
    """The policy key ``consumer-timeout``, accepted here, where the version does not enforce
    it on ``queue_type``."""
    if key != "consumer-timeout":
        return None
    enforcement = facts.timeout_enforcement(queue_type)
    if enforcement is not None and enforcement.enforces(TimeoutSetting.POLICY):
        return None
    if enforcement is None:
        why = (
            f"{facts.name} was never pinned enforcing a consumer timeout on {queue_type} "
            "queues, so nothing proves it bounds them"
        )
    else:
        why = f"{facts.name} does not enforce it on {queue_type} queues: {enforcement.why}"
    return Unenforced(key, value, f"consumer-timeout {value} is accepted, but {why}")


def _no_quorum_queues(d: Declaration, facts: BrokerFacts) -> Unsupported:
    return Unsupported(
        "queue-type",
        d.queue_type,
        f"{facts.name} has no quorum queues (a queue declared with x-queue-type quorum is one "
        f"of its ordinary queues) and applies apply-to {d.apply_to!r} to every non-stream "
        "queue: not written, so it reaches no queue it is not declared for",
        True,
    )


def _consumer_timeout_fallback(value: object, facts: BrokerFacts, queue_type: str) -> Unsupported:
    refused = f"consumer-timeout is not a policy key on {facts.name}"
    evidence = facts.consumer_timeout_evidence or "no evidence given"
    have = facts.consumer_timeout_ms
    enforcement = facts.timeout_enforcement(queue_type)
    if enforcement is not None and enforcement.enforced == {TimeoutSetting.ARGUMENT}:
        return Unsupported(
            "consumer-timeout",
            value,
            f"{facts.name} does not apply the policy key consumer-timeout (refused as a "
            "number, accepted as a string and never applied), so it is not written; it "
            "enforces only the queue argument x-consumer-timeout, checked on each queue from "
            "its arguments: a queue declared without it is an unbounded finding",
            True,
        )
    if enforcement is None or not enforcement.enforces(TimeoutSetting.BROKER_WIDE):
        pinned = "was never pinned enforcing" if enforcement is None else "does not enforce"
        return Unsupported(
            "consumer-timeout",
            value,
            f"{refused}, and {facts.name} {pinned} the broker-wide consumer_timeout on "
            f"{queue_type} queues: nothing proves a bound of {value} ms",
            False,
        )
    if have is None:
        return Unsupported(
            "consumer-timeout",
            value,
            f"{refused}, and the broker does not show a broker-wide consumer_timeout in force "
            f"({evidence}): nothing proves a bound of {value} ms. Ship "
            f"conf.d/rabbitmq/20-vibey-reap.conf (consumer_timeout = {value}) into the node's "
            "conf.d and restart it",
            False,
        )
    if have != value:
        return Unsupported(
            "consumer-timeout",
            value,
            f"{refused}; the broker-wide consumer_timeout in force is {have} ms ({evidence}), "
            f"not the declared {value} ms: set consumer_timeout = {value} in the node's "
            "conf.d/20-vibey-reap.conf and restart it, or declare consumer_timeout_seconds = "
            f"{have // 1000}",
            False,
        )
    return Unsupported(
        "consumer-timeout",
        value,
        f"{refused}; in force instead: the broker-wide consumer_timeout = {have} ms ({evidence})",
        True,
    )


def _apply_to_fallback(
    d: Declaration, definition: Mapping[str, object], facts: BrokerFacts, confined: bool
) -> Unsupported:
    refused = f"apply-to {d.apply_to!r} is not accepted by {facts.name}"
    if confined:
        keys = ", ".join(sorted(k for k in definition if k in _QUORUM_ONLY_KEYS))
        return Unsupported(
            "apply-to",
            d.apply_to,
            f"{refused}; written as apply-to 'queues': its {keys} keeps it off classic queues "
            "(RabbitMQ attaches a policy carrying delivery-limit to quorum queues only)",
            True,
        )
    keys = ", ".join(sorted(definition))
    return Unsupported(
        "apply-to",
        d.apply_to,
        f"{refused}, and with apply-to 'queues' this policy would also reach {d.queue_type!r}'s "
        f"other queue types and compete with their policies: not written, so {keys} is not in "
        "force by policy here",
        False,
    )
