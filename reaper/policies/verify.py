"""Verification, pure: whether each declared bound is in force on the queues themselves (SPEC §4).

Which policy a queue carries is RabbitMQ's decision: the highest-priority policy whose pattern
matches the name (Erlang ``re``, search semantics), whose ``apply-to`` admits the queue's type,
and whose every key the queue type accepts. So each owned queue is asked which policy it
carries and what is in force on it, read the way the judge reads it
(:mod:`reaper.core.bounds`); ``verified`` comes from the queues, never from a status code, and
means enforced: a consumer timeout the version does not enforce on the queue's type is never in
force, whatever the queue shows (``NotEnforced``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from reaper.broker.port import BrokerPolicy
from reaper.core.bounds import consumer_timeout_bound, delivery_limit_bound
from reaper.core.domain import QueueStats
from reaper.core.enforcement import TimeoutSetting
from reaper.core.values import is_unlimited, mapping, normalized
from reaper.policies.render import DesiredPolicy

__all__ = ["PolicyReason", "QueueCheck", "check_queues", "differences"]


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
    NOT_ENFORCED = "NotEnforced"
    DELIVERY_LIMIT_WITHHELD = "DeliveryLimitWithheld"
    DELETED = "Deleted"
    WOULD_DELETE = "WouldDelete"


def differences(desired: DesiredPolicy, actual: BrokerPolicy | None) -> tuple[str, ...]:
    """What differs between the desired policy and the broker's (normalized), in words;
    empty when they agree. ``actual`` None: the policy does not exist."""
    if actual is None:
        return ("does not exist",)
    found: list[str] = []
    want = desired.body()
    have = actual.body()
    for key in ("pattern", "apply-to", "priority"):
        if normalized(want[key]) != normalized(have[key]):
            found.append(f"{key} {normalized(have[key])!r} → {normalized(want[key])!r}")
    want_def = dict(desired.definition)
    have_def = dict(actual.definition)
    for key in sorted({*want_def, *have_def}):
        if key not in have_def:
            found.append(f"{key} missing → {normalized(want_def[key])!r}")
        elif key not in want_def:
            found.append(f"{key} {normalized(have_def[key])!r} → removed")
        elif normalized(have_def[key]) != normalized(want_def[key]):
            found.append(f"{key} {normalized(have_def[key])!r} → {normalized(want_def[key])!r}")
    return tuple(found)


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
    declared: Mapping[str, object] = field(default_factory=dict)
    in_force: Mapping[str, object] = field(default_factory=dict)
    effective: Mapping[str, object] = field(default_factory=dict)
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
                checks.append(
                    _check(d, q, ours, coming=d.name in coming, written=d.name in just_written)
                )
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
    d: DesiredPolicy, q: QueueStats, ours: Mapping[str, bool], *, coming: bool, written: bool
) -> QueueCheck:
    """``ours``: each of our policy names, and whether this broker can hold it; ``written``:
    whether this pass just wrote ``d``."""
    declared, in_force, sources, unenforced = _bounds(d, q)
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
    carrying = _carrying_problem(base, d, q, ours, coming=coming)
    if carrying is not None:
        return carrying
    for key, want in declared.items():
        have = in_force.get(key)
        if have != want:
            return _bound_problem(
                base, d, q, key, have, want, sources.get(key), unenforced.get(key),
                coming=coming, written=written,
            )  # fmt: skip
    return base


def _carrying_problem(
    base: QueueCheck, d: DesiredPolicy, q: QueueStats, ours: Mapping[str, bool], *, coming: bool
) -> QueueCheck | None:
    """What is wrong with the policy ``q`` carries, if anything."""
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
    return None


def _bound_problem(
    base: QueueCheck,
    d: DesiredPolicy,
    q: QueueStats,
    key: str,
    have: object,
    want: object,
    source: str | None,
    unenforced: str | None,
    *,
    coming: bool,
    written: bool,
) -> QueueCheck:
    """A declared bound ``key`` that is not the one in force on ``q``: why."""
    shown = "none" if have is None else have
    wanted = "none (unlimited)" if want is None else want
    if unenforced is not None:
        # nothing to wait for: no write or statistics change what the version enforces
        return replace(
            base,
            reason=PolicyReason.NOT_ENFORCED,
            problem=f"{q.name} ({q.kind}) has no {key} in force, declared {wanted}: {unenforced}",
        )
    where = f" ({source})" if source is not None else ""
    carried = d.writable and key in d.definition
    # Just written and no argument of the queue's own in the way, a limit in force other than
    # the policy's is the queue that has not applied it yet: a 4.0 quorum queue lists the new
    # policy before the limit it resolves from it (an unlimited one included).
    catching_up = carried and written and f"x-{key}" not in mapping(q.arguments)
    if carried and normalized(q.effective_policy.get(key)) != normalized(d.definition[key]):
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
            pending=catching_up,
        )
    # the policy holds, but a queue argument (or an operator policy) overrides it; or the
    # key cannot be a policy key here and the fallback is not what was declared; or the queue
    # is catching up.
    return replace(
        base,
        reason=PolicyReason.NOT_IN_FORCE if carried else PolicyReason.FALLBACK_UNPROVEN,
        problem=f"{q.name} has {key} {shown} in force{where}, declared {wanted}",
        pending=catching_up,
    )


def _by_argument_alone(d: DesiredPolicy, q: QueueStats) -> bool:
    """Whether the version enforces a consumer timeout on ``q``'s type from the queue argument
    only (LavinMQ 2.9.1)."""
    enforcement = d.facts.timeout_enforcement(q.kind)
    return enforcement is not None and enforcement.enforced == {TimeoutSetting.ARGUMENT}


def _bounds(
    d: DesiredPolicy, q: QueueStats
) -> tuple[dict[str, object], dict[str, object], dict[str, str], dict[str, str]]:
    """Each declared key: the value declared to be in force, the value in force, where the
    broker's value comes from, and why it is not enforced where the version enforces no such
    bound on the queue's type. A negative delivery limit declares "unlimited" (None)."""
    declared: dict[str, object] = {}
    in_force: dict[str, object] = {}
    sources: dict[str, str] = {}
    unenforced: dict[str, str] = {}
    for key, value in d.declared.items():
        if key == "consumer-timeout":
            bound = consumer_timeout_bound(q, d.facts)
            declared[key], in_force[key], sources[key] = value, bound.value, bound.source
            if bound.known and not bound.enforced:
                unenforced[key] = bound.source + (f"; fix: {bound.fix}" if bound.fix else "")
            elif bound.value is not None and _by_argument_alone(d, q):
                # Only the queue's own x-consumer-timeout can bound it here, and no write of
                # ours changes it: the bound it declares is the one verified.
                declared[key] = bound.value
        elif key == "delivery-limit":
            if q.kind != "quorum":
                continue
            declared[key] = None if is_unlimited(value) else value
            bound = delivery_limit_bound(q, d.facts)
            in_force[key], sources[key] = bound.value, bound.source
        else:
            declared[key] = normalized(value)
            in_force[key] = normalized(q.effective_policy.get(key))
    return declared, in_force, sources, unenforced
