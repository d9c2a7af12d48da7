"""The declared broker policies (SPEC §4): render, plan, reconcile, verify on the queues.

Three steps, each its own function:

- :func:`render` (pure) turns the reviewed declarations in ``policies/*.json`` into the
  policies this broker can hold, given the thresholds and the broker's measured capabilities.
  A key the version refuses is dropped and recorded as :class:`Unsupported`, naming the
  fallback in force instead (or saying that nothing proves one is).
- :func:`plan` reads each policy and every queue of the vhost and says, per policy and per
  queue, what is declared against what is there. It writes nothing.
- :func:`reconcile` does the same, writes only a real difference, reads every written policy
  back, and then asks every owned queue which policy it carries and which bounds are in force
  on it, waiting a bounded time for the management statistics to catch up. ``verified`` comes
  from the queues, never from a status code.

Which policy a queue carries is RabbitMQ's decision: the highest-priority policy whose pattern
matches the name (Erlang ``re``, search semantics), whose ``apply-to`` admits the queue's type,
and whose every key the queue type accepts. Measured on 3.10 and 4.0
(``tests/integration/test_policy_behaviour.py``): a policy carrying ``delivery-limit`` never
attaches to a classic queue. So the work-queue policies exclude dead-letter queues with a
negative lookahead (a dead-letter queue must never get a finite limit from us), and on 3.10,
where ``apply-to`` cannot name a queue type, the quorum policy is written with
``apply-to: queues`` and its ``delivery-limit`` keeps it off classic queues.

A write the broker refuses (a user without the ``policymaker`` tag) is an outcome, never an
exception. A broker that cannot be read at all raises :class:`~reaper.errors.BrokerUnavailable`
for the pass to name as unreadable.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from reaper.domain import BrokerFacts, QueueStats, Thresholds
from reaper.errors import BrokerRefused, BrokerUnavailable, ConfigError
from reaper.judge import consumer_timeout_bound, delivery_limit_bound

if TYPE_CHECKING:
    from reaper.reap import PolicyOutcome

__all__ = [
    "DEFAULT_POLICY_DIR",
    "POLL_INTERVAL_SECONDS",
    "Declaration",
    "DesiredPolicy",
    "Plan",
    "PolicyBroker",
    "PolicyParameters",
    "PolicyPlan",
    "PolicyReason",
    "QueueCheck",
    "Unsupported",
    "check_queues",
    "desired_for",
    "differences",
    "load_declarations",
    "plan",
    "plan_json",
    "plan_text",
    "reconcile",
    "render",
]

#: The reviewed declarations, one JSON file per policy (``policies/README.md``). In a checkout,
#: ``reaper/declared_policies`` is a link to the top-level ``policies/``; a wheel carries the
#: files themselves there.
DEFAULT_POLICY_DIR: Final = (Path(__file__).resolve().parent / "declared_policies").resolve()

#: How often verification re-reads the queues while it waits for statistics to catch up.
#: Measured lag on 3.10 and 4.0: about 5 s for an existing queue (one statistics interval),
#: up to about 9 s for a queue declared a moment before.
POLL_INTERVAL_SECONDS: Final = 0.5

#: ``apply-to`` values that name a queue type, and the type each admits.
_QUEUE_TYPE_APPLY_TO: Final = {"quorum_queues": "quorum", "classic_queues": "classic"}
_APPLY_TO: Final = frozenset({"queues", *_QUEUE_TYPE_APPLY_TO})
_QUEUE_TYPES: Final = frozenset({"quorum", "classic"})

#: Keys a RabbitMQ policy may carry that make it attach to quorum queues only: measured on
#: 3.10 and 4.0, a policy carrying ``delivery-limit`` does not attach to a classic queue.
_QUORUM_ONLY_KEYS: Final = frozenset({"delivery-limit"})

_REQUIRED_FIELDS: Final = ("name", "queue_type", "pattern", "apply-to", "priority", "definition")
_FIELDS: Final = frozenset({*_REQUIRED_FIELDS, "description", "priority_offset"})
_PLACEHOLDER: Final = re.compile(r"\{([a-z_][a-z0-9_]*)\}")

#: What a person does about a refused write.
_POLICYMAKER_HINT: Final = (
    "e.g. rabbitmqctl set_user_tags USER management policymaker, or run the pass as a user "
    "that has the tag"
)

_SHOWN: Final = 5  # queue problems spelled out in one outcome's detail


class PolicyReason(StrEnum):
    """The stable reason of a policy outcome: what a person, an alert or a test keys on."""

    IN_SYNC = "InSync"
    CREATED = "Created"
    UPDATED = "Updated"
    WOULD_CREATE = "WouldCreate"
    WOULD_UPDATE = "WouldUpdate"
    KEY_UNSUPPORTED = "KeyUnsupported"
    NO_OWNED_QUEUES = "NoOwnedQueues"
    REFUSED = "Refused"
    DEFINITION_REJECTED = "DefinitionRejected"
    READ_BACK_MISMATCH = "ReadBackMismatch"
    SHADOWED_BY = "ShadowedBy"
    FINITE_DELIVERY_LIMIT = "FiniteDeliveryLimit"
    NOT_IN_FORCE = "NotInForce"
    QUEUE_NOT_CARRYING = "QueueNotCarrying"
    CARRIED_OUTSIDE_SCOPE = "CarriedOutsideScope"
    STALE_POLICY = "StalePolicy"
    FALLBACK_UNPROVEN = "FallbackUnproven"


#: When several problems hold, the outcome's reason is the first of these that does.
_PROBLEM_ORDER: Final = (
    PolicyReason.REFUSED,
    PolicyReason.DEFINITION_REJECTED,
    PolicyReason.READ_BACK_MISMATCH,
    PolicyReason.STALE_POLICY,
    PolicyReason.SHADOWED_BY,
    PolicyReason.FINITE_DELIVERY_LIMIT,
    PolicyReason.NOT_IN_FORCE,
    PolicyReason.QUEUE_NOT_CARRYING,
    PolicyReason.CARRIED_OUTSIDE_SCOPE,
    PolicyReason.FALLBACK_UNPROVEN,
)


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Declaration:
    """One reviewed file of ``policies/``, placeholders not yet filled."""

    source: str  # the file name, e.g. "quorum.json"
    name: str
    queue_type: str  # the queue type the policy is for: "quorum" or "classic"
    pattern: str
    apply_to: str
    priority: Any  # an int, or a placeholder such as "{policy_priority}"
    definition: Mapping[str, Any]
    priority_offset: int = 0
    description: str = ""


@dataclass(frozen=True)
class PolicyParameters:
    """The values the declarations' placeholders are filled with (``[queue.reap]``, ``[bus]``)."""

    prefix: str = "vibey"
    consumer_timeout_seconds: int = 21600
    delivery_limit: int = 20
    owned_queue_pattern: str = r"^vibey\."
    dead_letter_queue_pattern: str = r"(\.dlq|\.dead)$"
    policy_priority: int = 0

    @classmethod
    def from_thresholds(
        cls, thresholds: Thresholds, *, prefix: str, policy_priority: int
    ) -> PolicyParameters:
        return cls(
            prefix=prefix,
            consumer_timeout_seconds=thresholds.consumer_timeout_seconds,
            delivery_limit=thresholds.delivery_limit,
            owned_queue_pattern=thresholds.owned_queue_pattern,
            dead_letter_queue_pattern=thresholds.dead_letter_queue_pattern,
            policy_priority=policy_priority,
        )

    @classmethod
    def from_settings(cls, settings: Any) -> PolicyParameters:
        """From ``reaper.config.Settings`` (taken untyped so this module never imports it)."""
        reap = settings.queue.reap
        return cls(
            prefix=settings.bus.prefix,
            consumer_timeout_seconds=reap.consumer_timeout_seconds,
            delivery_limit=reap.delivery_limit,
            owned_queue_pattern=reap.owned_queue_pattern,
            dead_letter_queue_pattern=reap.dead_letter_queue_pattern,
            policy_priority=reap.policy_priority,
        )

    @property
    def consumer_timeout_ms(self) -> int:
        return self.consumer_timeout_seconds * 1000

    def placeholders(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "consumer_timeout_ms": self.consumer_timeout_ms,
            "consumer_timeout_seconds": self.consumer_timeout_seconds,
            "delivery_limit": self.delivery_limit,
            "owned_queue_pattern": self.owned_queue_pattern,
            "dead_letter_queue_pattern": self.dead_letter_queue_pattern,
            "policy_priority": self.policy_priority,
        }


_KNOWN_PLACEHOLDERS: Final = frozenset(PolicyParameters().placeholders())


def load_declarations(directory: Path | str = DEFAULT_POLICY_DIR) -> list[Declaration]:
    """Every ``*.json`` declaration in ``directory``, in file-name order. Raises
    :class:`~reaper.errors.ConfigError` naming every problem in every file."""
    directory = Path(directory)
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ConfigError([f"no policy declarations (*.json) in {directory}"])
    problems: list[str] = []
    declarations: list[Declaration] = []
    for path in files:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: not readable JSON: {exc}")
            continue
        declaration, found = _declaration(path.name, raw)
        problems.extend(f"{path}: {p}" for p in found)
        if declaration is not None:
            declarations.append(declaration)
    names = [d.name for d in declarations]
    problems.extend(
        f"{directory}: more than one declaration is named {n!r}"
        for n in sorted({n for n in names if names.count(n) > 1})
    )
    if problems:
        raise ConfigError(problems)
    return declarations


def _declaration(source: str, raw: Any) -> tuple[Declaration | None, list[str]]:
    if not isinstance(raw, dict):
        return None, ["a declaration is a JSON object"]
    problems = [f"unknown field {k!r}" for k in sorted(set(raw) - _FIELDS)]
    problems += [f"missing field {k!r}" for k in _REQUIRED_FIELDS if k not in raw]
    if problems:
        return None, problems
    for key in ("name", "pattern", "queue_type", "apply-to"):
        if not isinstance(raw[key], str) or not raw[key]:
            problems.append(f"{key!r} must be a non-empty string")
    if raw["queue_type"] not in _QUEUE_TYPES:
        problems.append(f"queue_type must be one of {sorted(_QUEUE_TYPES)}")
    apply_to = raw["apply-to"]
    if apply_to not in _APPLY_TO:
        problems.append(f"apply-to must be one of {sorted(_APPLY_TO)}")
    elif apply_to in _QUEUE_TYPE_APPLY_TO and _QUEUE_TYPE_APPLY_TO[apply_to] != raw["queue_type"]:
        problems.append(f"apply-to {apply_to!r} does not admit queue_type {raw['queue_type']!r}")
    definition = raw["definition"]
    if not isinstance(definition, dict) or not definition:
        problems.append("'definition' must be a non-empty object")
        definition = {}
    priority = raw["priority"]
    if isinstance(priority, bool) or not isinstance(priority, int | str):
        problems.append("'priority' must be an integer or a placeholder")
    offset = raw.get("priority_offset", 0)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        problems.append("'priority_offset' must be a non-negative integer")
    templated = [("name", raw["name"]), ("pattern", raw["pattern"]), ("priority", priority)]
    for where, value in [*templated, *definition.items()]:
        if isinstance(value, str):
            unknown = {m for m in _PLACEHOLDER.findall(value)} - _KNOWN_PLACEHOLDERS
            problems.extend(
                f"{where!r}: unknown placeholder {{{u}}} (known: {sorted(_KNOWN_PLACEHOLDERS)})"
                for u in sorted(unknown)
            )
    if problems:
        return None, problems
    return (
        Declaration(
            source=source,
            name=raw["name"],
            queue_type=raw["queue_type"],
            pattern=raw["pattern"],
            apply_to=apply_to,
            priority=priority,
            definition=dict(definition),
            priority_offset=offset,
            description=str(raw.get("description", "")),
        ),
        [],
    )


# --------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class Unsupported:
    """A declared key (or ``apply-to`` value) this broker cannot take, and what holds instead.

    ``fallback_in_force`` is False when the broker's facts cannot show the fallback (or show
    a different value): the outcome then fails, saying so."""

    key: str
    declared: Any
    detail: str
    fallback_in_force: bool


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
    definition: Mapping[str, Any]
    declared: Mapping[str, Any]
    facts: BrokerFacts
    writable: bool = True
    unsupported: tuple[Unsupported, ...] = ()
    #: The declaration's offset above ``policy_priority`` (already included in ``priority``).
    priority_offset: int = 0

    def body(self) -> dict[str, Any]:
        """The policy as the management API holds it."""
        return {
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "priority": self.priority,
            "definition": dict(self.definition),
        }

    def selects(self, queue: QueueStats) -> bool:
        """Whether ``queue`` is one this policy is declared for: its name matches the pattern
        (Python ``re`` standing in for Erlang's, search semantics) and its type is the
        declared one. A broker that reports no type (LavinMQ) is taken as classic."""
        queue_type = queue.type or "classic"
        return queue_type == self.queue_type and re.search(self.pattern, queue.name) is not None

    @property
    def fallbacks_in_force(self) -> bool:
        return all(u.fallback_in_force for u in self.unsupported)


def render(
    declarations: Sequence[Declaration], params: PolicyParameters, facts: BrokerFacts
) -> list[DesiredPolicy]:
    """The declarations filled with ``params`` and cut to what ``facts`` says the broker
    accepts. Pure. Raises :class:`~reaper.errors.ConfigError` for a rendered pattern Python
    cannot compile or a priority that is not an integer."""
    values = params.placeholders()
    problems: list[str] = []
    desired: list[DesiredPolicy] = []
    for d in declarations:
        name = str(_fill(d.name, values))
        pattern = str(_fill(d.pattern, values))
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"{d.source}: rendered pattern {pattern!r} does not compile: {exc}")
            continue
        priority = _fill(d.priority, values)
        if isinstance(priority, str) and re.fullmatch(r"-?\d+", priority):
            priority = int(priority)
        if isinstance(priority, bool) or not isinstance(priority, int):
            problems.append(f"{d.source}: priority {priority!r} is not an integer")
            continue
        declared = {k: _fill(v, values) for k, v in d.definition.items()}
        definition: dict[str, Any] = {}
        unsupported: list[Unsupported] = []
        for key, value in declared.items():
            refused = _unsupported_key(key, value, facts)
            if refused is None:
                definition[key] = value
            else:
                unsupported.append(refused)
        apply_to, writable = d.apply_to, bool(definition)
        if apply_to in _QUEUE_TYPE_APPLY_TO and not facts.policy_apply_to_queue_type and writable:
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
                priority_offset=d.priority_offset,
            )
        )
    if problems:
        raise ConfigError(problems)
    return desired


def desired_for(
    settings: Any, facts: BrokerFacts, directory: Path | str = DEFAULT_POLICY_DIR
) -> list[DesiredPolicy]:
    """Load, fill and render the declarations for ``settings`` (``reaper.config.Settings``)."""
    return render(load_declarations(directory), PolicyParameters.from_settings(settings), facts)


def _fill(template: Any, values: Mapping[str, Any]) -> Any:
    """A placeholder standing alone takes its value's type (``"{delivery_limit}"`` → 20);
    inside a longer string it is substituted as text, and the substituted text is not
    scanned again (a pattern's own ``{2}`` stays as it is)."""
    if not isinstance(template, str):
        return template
    alone = _PLACEHOLDER.fullmatch(template)
    if alone is not None:
        return values[alone[1]]
    return _PLACEHOLDER.sub(lambda m: str(values[m[1]]), template)


def _broker(facts: BrokerFacts) -> str:
    return f"{facts.product} {facts.version}"


def _unsupported_key(key: str, value: Any, facts: BrokerFacts) -> Unsupported | None:
    if key == "consumer-timeout" and not facts.policy_consumer_timeout:
        return _consumer_timeout_fallback(value, facts)
    if key == "delivery-limit" and _is_unlimited(value) and not facts.unlimited_delivery_limit:
        if facts.default_quorum_delivery_limit is None:
            return Unsupported(
                key,
                value,
                f"delivery-limit {value} (unlimited) is not accepted by {_broker(facts)}; in "
                "force instead: no delivery limit, which is what a quorum queue has on this "
                "version when no policy or argument sets one (the work-queue policies exclude "
                "dead-letter queues)",
                True,
            )
        return Unsupported(
            key,
            value,
            f"delivery-limit {value} (unlimited) is not accepted by {_broker(facts)}, which "
            f"gives every quorum queue a delivery limit of {facts.default_quorum_delivery_limit}"
            " by default: reads of a dead-letter queue would spend it, and nothing here can "
            "lift it",
            False,
        )
    return None


def _consumer_timeout_fallback(value: Any, facts: BrokerFacts) -> Unsupported:
    refused = f"consumer-timeout is not a policy key on {_broker(facts)}"
    evidence = facts.consumer_timeout_evidence or "no evidence given"
    have = facts.consumer_timeout_ms
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
    d: Declaration, definition: Mapping[str, Any], facts: BrokerFacts, confined: bool
) -> Unsupported:
    refused = f"apply-to {d.apply_to!r} is not accepted by {_broker(facts)}"
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


def _is_unlimited(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value < 0


# --------------------------------------------------------------------------- comparing


def _normal(value: Any) -> Any:
    """Numbers come back as floats (``20.0``); compare them as the integers they are."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def differences(desired: DesiredPolicy, actual: Mapping[str, Any] | None) -> tuple[str, ...]:
    """What differs between the desired policy and the broker's (normalized), in words;
    empty when they agree. ``actual`` None: the policy does not exist."""
    if actual is None:
        return ("does not exist",)
    found: list[str] = []
    want = _normal(desired.body())
    have = _normal({k: actual.get(k) for k in ("pattern", "apply-to", "priority")})
    for key in ("pattern", "apply-to", "priority"):
        if want[key] != have[key]:
            found.append(f"{key} {have[key]!r} → {want[key]!r}")
    definition = actual.get("definition")
    have_def = _normal(definition) if isinstance(definition, Mapping) else {}
    for key in sorted({*want["definition"], *have_def}):
        if key not in have_def:
            found.append(f"{key} missing → {want['definition'][key]!r}")
        elif key not in want["definition"]:
            found.append(f"{key} {have_def[key]!r} → removed")
        elif have_def[key] != want["definition"][key]:
            found.append(f"{key} {have_def[key]!r} → {want['definition'][key]!r}")
    return tuple(found)


# --------------------------------------------------------------------------- queues


@dataclass(frozen=True)
class QueueCheck:
    """One queue checked against one declared policy.

    ``targeted`` is False for a queue the policy is not declared for but that carries it
    anyway. ``declared``/``in_force`` hold each declared bound and what the broker enforces
    on the queue (``None``: no finite bound). ``pending`` problems may still clear while the
    broker's statistics catch up; verification waits for those only.
    """

    queue: str
    queue_type: str | None
    policy: str
    targeted: bool
    expected_policy: str | None
    carries: str | None
    declared: Mapping[str, Any] = field(default_factory=dict)
    in_force: Mapping[str, Any] = field(default_factory=dict)
    effective: Mapping[str, Any] = field(default_factory=dict)
    reason: PolicyReason | None = None
    problem: str | None = None
    pending: bool = False

    @property
    def ok(self) -> bool:
        return self.reason is None


def check_queues(
    desired: Sequence[DesiredPolicy],
    queues: Iterable[QueueStats],
    *,
    just_written: frozenset[str] = frozenset(),
    held_as_desired: frozenset[str] | None = None,
) -> list[QueueCheck]:
    """Check every queue against every desired policy. Pure.

    For each queue a policy is declared for: it carries that policy (when the policy is
    written), and every declared bound is the one in force on it, read the way the judge
    reads it (policy, queue argument, broker-wide value or default). Any queue carrying one
    of our policies that is not declared for it is a problem too.

    A queue not (yet) showing its policy is ``pending`` only when the broker holds that policy
    as desired (``held_as_desired``, default: all of them): after a refused write or in a dry
    run nothing is coming, so there is nothing to wait for."""
    ours = {d.name: d.writable for d in desired}
    coming = set(ours) if held_as_desired is None else held_as_desired
    checks: list[QueueCheck] = []
    for q in sorted(queues, key=lambda q: q.name):
        for d in desired:
            if d.selects(q):
                checks.append(_check(d, q, ours, coming=d.name in coming))
            elif q.policy == d.name:
                checks.append(
                    QueueCheck(
                        queue=q.name,
                        queue_type=q.type,
                        policy=d.name,
                        targeted=False,
                        expected_policy=None,
                        carries=q.policy,
                        effective=dict(q.effective_policy),
                        reason=PolicyReason.CARRIED_OUTSIDE_SCOPE,
                        problem=(
                            f"{q.name} ({q.type or 'untyped'}) carries {d.name} but is not an "
                            f"owned {d.queue_type} queue it is declared for (pattern "
                            f"{d.pattern!r}): the broker's regex disagrees with Python's"
                        ),
                        pending=d.name in just_written,
                    )
                )
    return checks


def _check(
    d: DesiredPolicy, q: QueueStats, ours: Mapping[str, bool], *, coming: bool
) -> QueueCheck:
    """``ours``: each of our policy names, and whether this broker can hold it."""
    declared, in_force, sources = _bounds(d, q)
    base = QueueCheck(
        queue=q.name,
        queue_type=q.type,
        policy=d.name,
        targeted=True,
        expected_policy=d.name if d.writable else None,
        carries=q.policy,
        declared=declared,
        in_force=in_force,
        effective=dict(q.effective_policy),
    )
    if not q.policy_known:
        return replace(
            base,
            reason=PolicyReason.QUEUE_NOT_CARRYING,
            problem=f"{q.name} lists no policy yet (its statistics have not arrived)",
            pending=True,
        )
    if d.writable and q.policy != d.name:
        if q.policy is None:
            return replace(
                base,
                reason=PolicyReason.QUEUE_NOT_CARRYING,
                problem=f"{q.name} carries no policy (expected {d.name})",
                pending=coming,
            )
        if q.policy in ours:
            stale = not ours[q.policy]
            return replace(
                base,
                reason=PolicyReason.QUEUE_NOT_CARRYING,
                problem=f"{q.name} carries {q.policy} instead of {d.name}"
                + (", a policy this broker cannot hold as declared: delete it" if stale else ""),
                pending=coming and not stale,
            )
        return replace(
            base,
            reason=PolicyReason.SHADOWED_BY,
            problem=f"{q.name} carries policy {q.policy!r} instead of {d.name}",
        )
    if not d.writable and q.policy == d.name:
        return replace(
            base,
            reason=PolicyReason.STALE_POLICY,
            problem=(
                f"{q.name} carries {d.name}, which this broker cannot hold as declared: "
                "delete that policy by hand"
            ),
        )
    for key, want in declared.items():
        have = in_force.get(key)
        if have == want:
            continue
        shown = "none" if have is None else have
        wanted = "none (unlimited)" if want is None else want
        where = f" ({sources[key]})" if key in sources else ""
        carried = d.writable and key in d.definition
        if carried and _normal(q.effective_policy.get(key)) != _normal(d.definition[key]):
            # the policy's own value is not shown yet: statistics lag behind a write
            return replace(
                base,
                reason=PolicyReason.NOT_IN_FORCE,
                problem=f"{q.name} has {key} {shown} in force{where}, declared {wanted}",
                pending=coming,
            )
        if key == "delivery-limit" and want is None:
            return replace(
                base,
                reason=PolicyReason.FINITE_DELIVERY_LIMIT,
                problem=(
                    f"{q.name} has a delivery limit of {shown} in force{where}: each "
                    "requeueing read spends one delivery, and the broker drops the message "
                    "once it is spent"
                ),
            )
        # the policy holds, but a queue argument (or an operator policy) overrides it; or the
        # key cannot be a policy key here and the fallback is not what was declared
        return replace(
            base,
            reason=PolicyReason.NOT_IN_FORCE if carried else PolicyReason.FALLBACK_UNPROVEN,
            problem=f"{q.name} has {key} {shown} in force{where}, declared {wanted}",
        )
    return base


def _bounds(
    d: DesiredPolicy, q: QueueStats
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """Each declared key: the value declared to be in force, the value in force, and where
    the broker's value comes from. A negative delivery limit declares "unlimited" (None)."""
    declared: dict[str, Any] = {}
    in_force: dict[str, Any] = {}
    sources: dict[str, str] = {}
    effective = _normal(dict(q.effective_policy))
    for key, value in d.declared.items():
        if key == "consumer-timeout":
            bound = consumer_timeout_bound(q, d.facts)
            declared[key], in_force[key], sources[key] = value, bound.value, bound.source
        elif key == "delivery-limit":
            if (q.type or "classic") != "quorum":
                continue
            declared[key] = None if _is_unlimited(value) else value
            reported = q.reported_delivery_limit
            if reported is not None:  # 4.x resolves policy, argument and default itself
                in_force[key] = None if reported < 0 else reported
                sources[key] = "as the broker reports it on the queue"
            else:
                bound = delivery_limit_bound(q, d.facts)
                in_force[key], sources[key] = bound.value, bound.source
        else:
            declared[key], in_force[key] = _normal(value), effective.get(key)
    return declared, in_force, sources


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class PolicyPlan:
    """One policy: desired against what the broker held when it was read."""

    name: str
    source: str
    desired: Mapping[str, Any] | None  # the body to hold; None when nothing can be written
    actual: Mapping[str, Any] | None  # the broker's, as read; None when there is none
    change: str  # "create" | "update" | "none" | "unsupported"
    differences: tuple[str, ...]
    unsupported: tuple[Unsupported, ...]


@dataclass(frozen=True)
class Plan:
    """Desired against actual, per policy and per queue, and the outcomes that follow."""

    broker: str
    vhost: str | None
    dry_run: bool
    policies: tuple[PolicyPlan, ...]
    queues: tuple[QueueCheck, ...]
    outcomes: tuple[PolicyOutcome, ...]


def plan_json(p: Plan) -> dict[str, Any]:
    """The plan as one JSON-ready object (``reaper policies plan --json``)."""
    return {
        "broker": p.broker,
        "vhost": p.vhost,
        "dry_run": p.dry_run,
        "policies": [
            {
                "name": pp.name,
                "declaration": pp.source,
                "change": pp.change,
                "desired": pp.desired,
                "actual": pp.actual,
                "differences": list(pp.differences),
                "unsupported": [
                    {
                        "key": u.key,
                        "declared": u.declared,
                        "detail": u.detail,
                        "fallback_in_force": u.fallback_in_force,
                    }
                    for u in pp.unsupported
                ],
            }
            for pp in p.policies
        ],
        "queues": [
            {
                "queue": c.queue,
                "type": c.queue_type,
                "policy": c.policy,
                "declared_for": c.targeted,
                "expected_policy": c.expected_policy,
                "carries": c.carries,
                "declared": dict(c.declared),
                "in_force": dict(c.in_force),
                "effective_policy_definition": dict(c.effective),
                "ok": c.ok,
                "reason": c.reason.value if c.reason else None,
                "problem": c.problem,
            }
            for c in p.queues
        ],
        "outcomes": [
            {
                "name": o.name,
                "action": o.action,
                "verified": o.verified,
                "queues_checked": o.queues_checked,
                "queues_failing": list(o.queues_failing),
                "reason": o.reason,
                "detail": o.detail,
            }
            for o in p.outcomes
        ],
    }


def plan_text(p: Plan) -> str:
    """The plan for a person (``reaper policies plan``)."""
    lines = [f"{p.broker}, vhost {p.vhost if p.vhost is not None else '(default)'}"]
    for pp in p.policies:
        lines.append(f"policy {pp.name} ({pp.source}): {pp.change}")
        if pp.desired is not None:
            lines.append(f"  desired: {_compact(pp.desired)}")
        lines.append(f"  actual:  {_compact(pp.actual) if pp.actual is not None else 'none'}")
        lines.extend(f"  change:  {d}" for d in pp.differences if pp.actual is not None)
        lines.extend(f"  unsupported: {u.detail}" for u in pp.unsupported)
    lines.append("queues:")
    if not p.queues:
        lines.append("  no owned queue")
    for c in p.queues:
        state = "ok" if c.ok else f"{c.reason}: {c.problem}"
        bounds = ", ".join(
            f"{k} {'none' if v is None else v}" for k, v in sorted(c.in_force.items())
        )
        lines.append(
            f"  {c.queue} ({c.queue_type or 'untyped'}) for {c.policy}: carries "
            f"{c.carries or 'no policy'}; in force: {bounds or '-'}; {state}"
        )
    lines.append("outcomes:")
    for o in p.outcomes:
        verified = {True: "verified", False: "NOT verified", None: "nothing to verify"}
        lines.append(f"  {o.name}: {o.action}, {verified[o.verified]} ({o.reason}): {o.detail}")
    return "\n".join(lines)


def _compact(body: Mapping[str, Any]) -> str:
    shown = {k: body.get(k) for k in ("pattern", "apply-to", "priority", "definition")}
    return json.dumps(shown, sort_keys=True)


# --------------------------------------------------------------------------- reconcile


class PolicyBroker(Protocol):
    """What the reconciler needs of ``reaper.broker.ManagementClient``."""

    async def put_policy(
        self,
        name: str,
        definition: Mapping[str, Any],
        *,
        pattern: str,
        apply_to: str,
        priority: int,
        vhost: str | None = None,
    ) -> None: ...

    async def list_policies(self, vhost: str | None = None) -> list[dict[str, Any]]: ...

    async def list_queues(self, vhost: str | None = None) -> list[QueueStats]: ...


@dataclass
class _PolicyState:
    desired: DesiredPolicy
    actual: dict[str, Any] | None
    diff: tuple[str, ...]
    action: str = "unchanged"
    problems: list[tuple[PolicyReason, str]] = field(default_factory=list)


async def plan(
    client: PolicyBroker, desired: Sequence[DesiredPolicy], *, vhost: str | None = None
) -> Plan:
    """Desired against actual, per policy and per queue. Reads only; writes nothing."""
    return await _run(client, desired, vhost=vhost, dry_run=True)


async def reconcile(
    client: PolicyBroker,
    desired: Sequence[DesiredPolicy],
    *,
    vhost: str | None = None,
    dry_run: bool = False,
    verify_wait_seconds: float = 10.0,
    poll_interval_seconds: float = POLL_INTERVAL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> list[PolicyOutcome]:
    """Bring every desired policy to the broker and verify it on the queues.

    Reads the vhost's policies (one listing); writes only a real (normalized) difference;
    reads the written ones back (one more listing); then reads the vhost's queues until every
    declared queue shows its policy and bounds in force, for at most ``verify_wait_seconds``
    (polling only while a policy was just written or a queue is not yet showing one the
    broker holds). In sync, that is two requests and no write.

    ``dry_run`` writes nothing and says ``planned`` (a declaration this broker cannot hold at
    all says ``unsupported`` either way). A refused write is an outcome (``refused``), never an
    exception; a broker that cannot be read raises ``BrokerUnavailable``."""
    result = await _run(
        client,
        desired,
        vhost=vhost,
        dry_run=dry_run,
        verify_wait_seconds=verify_wait_seconds,
        poll_interval_seconds=poll_interval_seconds,
        clock=clock,
        sleep=sleep,
    )
    return list(result.outcomes)


async def _run(
    client: PolicyBroker,
    desired: Sequence[DesiredPolicy],
    *,
    vhost: str | None,
    dry_run: bool,
    verify_wait_seconds: float = 0.0,
    poll_interval_seconds: float = POLL_INTERVAL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Plan:
    # One listing reads every policy: measured on 3.10 and 4.0, a user without the
    # policymaker tag may list a vhost's policies but not GET one by name (401).
    held = _by_name(await client.list_policies(vhost))
    states = [
        _PolicyState(d, held.get(d.name), differences(d, held.get(d.name)) if d.writable else ())
        for d in desired
    ]
    plans = tuple(_policy_plan(s) for s in states)

    written: set[str] = set()
    if not dry_run:
        for s in states:
            if s.desired.writable and s.diff and await _write(client, s, vhost):
                written.add(s.desired.name)
    if written:
        held = _by_name(await client.list_policies(vhost))
        for s in states:
            if s.desired.name in written:
                _read_back(s, held.get(s.desired.name))
    as_desired = frozenset(d.name for d in desired if not differences(d, held.get(d.name)))

    deadline = clock() + verify_wait_seconds
    while True:
        queues = await client.list_queues(vhost)
        checks = check_queues(
            desired, queues, just_written=frozenset(written), held_as_desired=as_desired
        )
        if dry_run or not any(c.pending for c in checks) or clock() >= deadline:
            break
        await sleep(max(0.0, min(poll_interval_seconds, deadline - clock())))

    outcomes = tuple(_outcome(s, checks, held, dry_run=dry_run) for s in states)
    facts = desired[0].facts if desired else None
    return Plan(
        broker=_broker(facts) if facts else "no declared policy",
        vhost=vhost if vhost is not None else getattr(client, "vhost", None),
        dry_run=dry_run,
        policies=plans,
        queues=tuple(checks),
        outcomes=outcomes,
    )


def _by_name(policies: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(p.get("name")): dict(p) for p in policies}


async def _write(client: PolicyBroker, s: _PolicyState, vhost: str | None) -> bool:
    """Write one policy; True when the broker took it. A refusal is recorded, not raised."""
    d = s.desired
    try:
        await client.put_policy(
            d.name,
            d.definition,
            pattern=d.pattern,
            apply_to=d.apply_to,
            priority=d.priority,
            vhost=vhost,
        )
    except BrokerRefused as exc:
        s.action = "refused"
        s.problems.append((PolicyReason.REFUSED, f"{exc.reason}: {_POLICYMAKER_HINT}"))
        return False
    except BrokerUnavailable as exc:
        if exc.status != 400:
            raise
        s.action = "refused"
        s.problems.append(
            (
                PolicyReason.DEFINITION_REJECTED,
                f"the broker rejected {d.name} as rendered for {_broker(d.facts)}: "
                f"{exc.reason}. The capabilities this version was taken to have are wrong: "
                "pin the behaviour in tests/integration/test_policy_behaviour.py and fix "
                "reaper.broker.capabilities_for",
            )
        )
        return False
    s.action = "created" if s.actual is None else "updated"
    return True


def _read_back(s: _PolicyState, back: Mapping[str, Any] | None) -> None:
    mismatch = differences(s.desired, back)
    if mismatch:
        s.problems.append(
            (
                PolicyReason.READ_BACK_MISMATCH,
                f"read back after the write, {s.desired.name} still differs "
                f"({'; '.join(mismatch)}): another writer is racing this one, or the broker "
                "rewrites the policy",
            )
        )


def _policy_plan(s: _PolicyState) -> PolicyPlan:
    d = s.desired
    if not d.writable:
        change = "unsupported"
    elif not s.diff:
        change = "none"
    else:
        change = "create" if s.actual is None else "update"
    return PolicyPlan(
        name=d.name,
        source=d.source,
        desired=d.body() if d.writable else None,
        actual=_normal(_policy_body(s.actual)) if s.actual is not None else None,
        change=change,
        differences=s.diff,
        unsupported=d.unsupported,
    )


def _policy_body(actual: Mapping[str, Any]) -> dict[str, Any]:
    return {k: actual.get(k) for k in ("pattern", "apply-to", "priority", "definition")}


def _outcome(
    s: _PolicyState,
    checks: Sequence[QueueCheck],
    held: Mapping[str, Mapping[str, Any]],
    *,
    dry_run: bool,
) -> PolicyOutcome:
    from reaper.reap import PolicyOutcome  # reap imports this module; PolicyOutcome lives there

    d = s.desired
    mine = [c for c in checks if c.policy == d.name]
    targeted = [c for c in mine if c.targeted]
    failing = tuple(sorted({c.queue for c in mine if not c.ok}))

    if not d.writable:
        action = "unsupported"
    elif dry_run:
        action = "planned"
    else:
        action = s.action

    problems = list(s.problems)
    if not d.writable and s.actual is not None:
        problems.append(
            (
                PolicyReason.STALE_POLICY,
                f"a policy named {d.name} exists ({_compact(s.actual)}), but {_broker(d.facts)} "
                "cannot hold it as declared: delete it by hand so it cannot shadow or misapply",
            )
        )
    for c in mine:
        if c.reason is not None and c.problem is not None:
            text = c.problem
            if c.reason is PolicyReason.SHADOWED_BY and c.carries:
                other = held.get(c.carries)
                if other is not None:
                    text += (
                        f" (priority {_normal(other.get('priority'))}, "
                        f"pattern {other.get('pattern')!r})"
                    )
                text += (
                    f": raise [queue.reap] policy_priority (now {d.priority - d.priority_offset}, "
                    f"{d.name} at {d.priority}) above that policy's, or narrow the pattern "
                    f"of {c.carries!r}"
                )
            problems.append((c.reason, text))
    problems.extend(
        (PolicyReason.FALLBACK_UNPROVEN, u.detail) for u in d.unsupported if not u.fallback_in_force
    )
    # what holds instead of a refused key; the apply-to translation is in the plan only
    notes = [u.detail for u in d.unsupported if u.fallback_in_force and u.key != "apply-to"]

    order = {r: i for i, r in enumerate(_PROBLEM_ORDER)}
    problems.sort(key=lambda p: order[p[0]])  # the detail leads with the reason's problem

    would_change = dry_run and d.writable and bool(s.diff)
    if action == "refused" or problems or would_change:
        verified: bool | None = False
    elif not targeted:
        verified = None
    else:
        verified = True

    if would_change and not s.problems:
        reason = PolicyReason.WOULD_CREATE if s.actual is None else PolicyReason.WOULD_UPDATE
    elif problems:
        reason = problems[0][0]
    elif not targeted:
        reason = PolicyReason.NO_OWNED_QUEUES
    elif action == "unsupported":
        reason = PolicyReason.KEY_UNSUPPORTED
    else:
        reason = {
            "created": PolicyReason.CREATED,
            "updated": PolicyReason.UPDATED,
        }.get(action, PolicyReason.IN_SYNC)

    return PolicyOutcome(
        name=d.name,
        action=action,
        verified=verified,
        queues_checked=len(targeted),
        queues_failing=failing,
        detail=_detail(s, targeted, problems, notes, would_change=would_change),
        reason=reason.value,
    )


def _detail(
    s: _PolicyState,
    targeted: Sequence[QueueCheck],
    problems: Sequence[tuple[PolicyReason, str]],
    notes: Sequence[str],
    *,
    would_change: bool,
) -> str:
    d = s.desired
    parts: list[str] = []
    if would_change:
        verb = "would create" if s.actual is None else "would update"
        what = _compact(d.body()) if s.actual is None else "; ".join(s.diff)
        parts.append(f"{verb} {d.name}: {what}")
    shown = [text for _, text in problems[:_SHOWN]]
    parts.extend(shown)
    if len(problems) > _SHOWN:
        parts.append(f"and {len(problems) - _SHOWN} more problem(s)")
    if not d.writable:
        parts.append(f"{d.name} is not written on {_broker(d.facts)}")
    parts.extend(notes)
    n = len(targeted)
    if n:
        ok = sum(1 for c in targeted if c.ok)
        parts.append(f"{ok} of {n} owned {d.queue_type} queue(s) show the declared bounds in force")
    else:
        parts.append(f"no owned {d.queue_type} queue for {d.name} to verify it on")
    return "; ".join(parts)
