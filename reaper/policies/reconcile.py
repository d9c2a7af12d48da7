"""Reconciliation (SPEC §4): read each declared policy; write only a real difference; read it
back; then verify on every owned queue, waiting a bounded time for the management statistics
to catch up. Also the plan (``reaper policies plan``): the same reading, nothing written.

A write the broker refuses (a user without the ``policymaker`` tag) is an outcome, never an
exception. A broker that cannot be read at all raises :class:`~reaper.errors.BrokerUnavailable`
for the pass to name as unreadable.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from reaper.broker.port import Broker, BrokerPolicy
from reaper.core.cluster import queue_unavailable
from reaper.core.domain import QueueStats
from reaper.core.values import normalized
from reaper.errors import BrokerRefused, BrokerUnavailable
from reaper.policies.render import DesiredPolicy, Unenforced, Unsupported
from reaper.policies.verify import PolicyReason, QueueCheck, check_queues, differences

__all__ = [
    "POLL_INTERVAL_SECONDS",
    "Plan",
    "PolicyOutcome",
    "PolicyPlan",
    "compact",
    "plan",
    "reconcile",
]

#: How often verification re-reads the queues while it waits for statistics to catch up.
#: Measured lag on 3.10, 4.0 and 4.3: about 5 s for an existing queue (one statistics interval),
#: up to about 9 s for a queue declared a moment before.
POLL_INTERVAL_SECONDS: Final = 0.5

#: What a person does about a refused write.
_POLICYMAKER_HINT: Final = (
    "e.g. rabbitmqctl set_user_tags USER management policymaker, or run the pass as a user "
    "that has the tag"
)

_SHOWN: Final = 5  # queue problems spelled out in one outcome's detail

#: When several problems hold, the outcome's reason is the first of these that does.
_PROBLEM_ORDER: Final = (
    PolicyReason.REFUSED,
    PolicyReason.DEFINITION_REJECTED,
    PolicyReason.DELIVERY_LIMIT_WITHHELD,
    PolicyReason.READ_BACK_MISMATCH,
    PolicyReason.STALE_POLICY,
    PolicyReason.SHADOWED_BY,
    PolicyReason.FINITE_DELIVERY_LIMIT,
    PolicyReason.NOT_IN_FORCE,
    PolicyReason.QUEUE_NOT_CARRYING,
    PolicyReason.CARRIED_OUTSIDE_SCOPE,
    PolicyReason.NOT_ENFORCED,
    PolicyReason.FALLBACK_UNPROVEN,
)


@dataclass(frozen=True)
class PolicyOutcome:
    """One declared policy after reconciliation (SPEC §5)."""

    name: str
    action: str  # unchanged | created | updated | deleted | refused | unsupported | planned
    verified: bool | None
    queues_checked: int
    queues_failing: tuple[str, ...]
    detail: str
    reason: str = ""
    #: Not verified only because the broker cannot enforce a declared bound on some queues
    #: (``NotEnforced``): those queues are ``unbounded`` findings, and the pass stays ok.
    unenforceable: bool = False
    #: What holds instead of each key this broker refuses, where that is in force.
    fallbacks: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Everything the broker accepts and enforces is in force (or nothing is to check)."""
        return self.action != "refused" and (self.verified is not False or self.unenforceable)

    @property
    def planned(self) -> bool:
        """A dry run's planned write: a "would" line, not a failure."""
        return self.action == "planned" and self.reason in (
            PolicyReason.WOULD_CREATE,
            PolicyReason.WOULD_UPDATE,
        )


@dataclass(frozen=True)
class PolicyPlan:
    """One policy: desired against what the broker held when it was read."""

    name: str
    source: str
    desired: Mapping[str, object] | None  # the body to hold; None when nothing can be written
    actual: Mapping[str, object] | None  # the broker's, as read; None when there is none
    change: str  # "create" | "update" | "none" | "unsupported"
    differences: tuple[str, ...]
    unsupported: tuple[Unsupported, ...]
    unenforced: tuple[Unenforced, ...] = ()


@dataclass(frozen=True)
class Plan:
    """Desired against actual, per policy and per queue, and the outcomes that follow."""

    broker: str
    vhost: str | None
    dry_run: bool
    policies: tuple[PolicyPlan, ...]
    queues: tuple[QueueCheck, ...]
    outcomes: tuple[PolicyOutcome, ...]


@dataclass
class _PolicyState:
    desired: DesiredPolicy
    actual: BrokerPolicy | None
    diff: tuple[str, ...]
    action: str = "unchanged"
    problems: list[tuple[PolicyReason, str]] = field(default_factory=list)


async def plan(
    client: Broker, desired: Sequence[DesiredPolicy], *, vhost: str | None = None
) -> Plan:
    """Desired against actual, per policy and per queue. Reads only; writes nothing."""
    return await _run(client, desired, vhost=vhost, dry_run=True)


async def reconcile(
    client: Broker,
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
    client: Broker,
    desired: Sequence[DesiredPolicy],
    *,
    vhost: str | None,
    dry_run: bool,
    verify_wait_seconds: float = 0.0,
    poll_interval_seconds: float = POLL_INTERVAL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Plan:
    # One listing reads every policy: measured on 3.10, 4.0 and 4.3, a user without the
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
            writing = s.desired.writable and bool(s.diff)
            if await _write(client, s, vhost) if writing else await _delete_stale(client, s, vhost):
                written.add(s.desired.name)
    if written:
        held = _by_name(await client.list_policies(vhost))
        for s in states:
            if s.desired.name in written:
                _read_back(s, held.get(s.desired.name))
    as_desired = frozenset(d.name for d in desired if not differences(d, held.get(d.name)))

    # Policies are cluster-wide: each is verified once, on the queues, whichever node leads
    # them. A queue that cannot be read now (its node down, no majority) shows no policy
    # fields at all: it is not checked (the pass names it unreadable) and not waited for.
    facts = desired[0].facts if desired else None
    deadline = clock() + verify_wait_seconds
    while True:
        queues: list[QueueStats] = []
        unreadable: list[tuple[QueueStats, str]] = []
        for q in await client.list_queues(vhost):
            why = queue_unavailable(q, facts.nodes if facts else None)
            if why is None:
                queues.append(q)
            else:
                unreadable.append((q, why))
        checks = check_queues(
            desired, queues, just_written=frozenset(written), held_as_desired=as_desired
        )
        if dry_run or not any(c.pending for c in checks) or clock() >= deadline:
            break
        await sleep(max(0.0, min(poll_interval_seconds, deadline - clock())))

    outcomes = tuple(_outcome(s, checks, held, unreadable, dry_run=dry_run) for s in states)
    return Plan(
        broker=facts.name if facts else "no declared policy",
        vhost=vhost,
        dry_run=dry_run,
        policies=plans,
        queues=tuple(checks),
        outcomes=outcomes,
    )


def _by_name(policies: Iterable[BrokerPolicy]) -> dict[str, BrokerPolicy]:
    return {p.name: p for p in policies}


async def _write(client: Broker, s: _PolicyState, vhost: str | None) -> bool:
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
                f"the broker rejected {d.name} as rendered for {d.facts.name}: "
                f"{exc.reason}. The capabilities this version was taken to have are wrong: "
                "pin the behaviour in tests/integration/test_policy_behaviour.py and fix "
                "reaper.broker.capabilities_for",
            )
        )
        return False
    s.action = "created" if s.actual is None else "updated"
    return True


def _to_delete(s: _PolicyState) -> bool:
    """Our policy as the broker holds it carries a delivery limit this broker must no longer
    be given, and nothing else of it can be written: it goes, or its limit would drop."""
    held = s.actual.definition if s.actual is not None else {}
    return not s.desired.writable and any(w.key in held for w in s.desired.withheld)


async def _delete_stale(client: Broker, s: _PolicyState, vhost: str | None) -> bool:
    """Delete our policy where :func:`_to_delete` says; True when it was deleted."""
    if not _to_delete(s):
        return False
    try:
        await client.delete_policy(s.desired.name, vhost=vhost)
    except BrokerRefused as exc:
        s.action = "refused"
        s.problems.append((PolicyReason.REFUSED, f"{exc.reason}: {_POLICYMAKER_HINT}"))
        return False
    s.action = "deleted"
    return True


def _read_back(s: _PolicyState, back: BrokerPolicy | None) -> None:
    if s.action == "deleted":
        if back is not None:
            s.problems.append(
                (PolicyReason.READ_BACK_MISMATCH, f"{s.desired.name} is still there, deleted")
            )
        else:
            s.actual = None
        return
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
        actual=_normal_body(s.actual) if s.actual is not None else None,
        change=change,
        differences=s.diff,
        unsupported=d.unsupported,
        unenforced=d.unenforced,
    )


def _normal_body(actual: BrokerPolicy) -> dict[str, object]:
    """The broker's policy as a plan shows it: integral floats read as the integers they are."""
    body = normalized(actual.body())
    return dict(body) if isinstance(body, Mapping) else {}


def _outcome(
    s: _PolicyState,
    checks: Sequence[QueueCheck],
    held: Mapping[str, BrokerPolicy],
    unreadable: Sequence[tuple[QueueStats, str]],
    *,
    dry_run: bool,
) -> PolicyOutcome:
    d = s.desired
    mine = [c for c in checks if c.policy == d.name]
    targeted = [c for c in mine if c.targeted]
    failing = tuple(sorted({c.queue for c in mine if not c.ok}))

    if s.action == "deleted":
        action = "deleted"
    elif dry_run and (d.writable or _to_delete(s)):
        action = "planned"
    elif not d.writable:
        action = "unsupported"
    else:
        action = s.action

    problems = list(s.problems)
    problems.extend(
        (PolicyReason.DELIVERY_LIMIT_WITHHELD, f"{w.detail}: {w.fix}") for w in d.withheld
    )
    if not d.writable and s.actual is not None and not _to_delete(s):
        problems.append(
            (
                PolicyReason.STALE_POLICY,
                f"a policy named {d.name} exists ({compact(s.actual.body())}), but "
                f"{d.facts.name} cannot hold it as declared: delete it by hand so it cannot "
                "shadow or misapply",
            )
        )
    for c in mine:
        if c.reason is not None and c.problem is not None:
            text = c.problem
            if c.reason is PolicyReason.SHADOWED_BY and c.carries:
                other = held.get(c.carries)
                if other is not None:
                    text += f" (priority {normalized(other.priority)}, pattern {other.pattern!r})"
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
    if not any(c.reason is PolicyReason.NOT_ENFORCED for c in mine):
        notes.extend(u.detail for u in d.unenforced)  # no queue said it: say it once here
    notes.extend(
        f"not checked on {q.name}, which cannot be read now ({why})"
        for q, why in unreadable
        if d.selects(q)
    )

    order = {r: i for i, r in enumerate(_PROBLEM_ORDER)}
    problems.sort(key=lambda p: order[p[0]])  # the detail leads with the reason's problem

    would_delete = dry_run and _to_delete(s)
    would_change = dry_run and d.writable and bool(s.diff)
    if action == "refused" or problems or would_change:
        verified: bool | None = False
    elif not targeted:
        verified = None
    else:
        verified = True

    if would_change and not s.problems and not d.withheld:
        reason = PolicyReason.WOULD_CREATE if s.actual is None else PolicyReason.WOULD_UPDATE
    elif problems:
        reason = problems[0][0]
    elif not targeted:
        reason = PolicyReason.NO_OWNED_QUEUES
    elif action == "unsupported":
        reason = PolicyReason.KEY_UNSUPPORTED
    elif action == "deleted":
        reason = PolicyReason.DELETED
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
        detail=_detail(
            s, targeted, problems, notes, would_change=would_change, would_delete=would_delete
        ),
        reason=reason.value,
        fallbacks=tuple(
            u.detail for u in d.unsupported if u.fallback_in_force and u.key != "apply-to"
        ),
        unenforceable=bool(problems)
        and action != "refused"
        and not would_change
        and all(r is PolicyReason.NOT_ENFORCED for r, _ in problems),
    )


def _detail(
    s: _PolicyState,
    targeted: Sequence[QueueCheck],
    problems: Sequence[tuple[PolicyReason, str]],
    notes: Sequence[str],
    *,
    would_change: bool,
    would_delete: bool = False,
) -> str:
    d = s.desired
    parts: list[str] = []
    if would_delete:
        parts.append(f"would delete {d.name}: its delivery limit would drop")
    if s.action == "deleted":
        parts.append(
            f"deleted {d.name}: its delivery limit would drop, and nothing else of it "
            f"can be written on {d.facts.name}"
        )
    if would_change:
        verb = "would create" if s.actual is None else "would update"
        what = compact(d.body()) if s.actual is None else "; ".join(s.diff)
        parts.append(f"{verb} {d.name}: {what}")
    shown = [text for _, text in problems[:_SHOWN]]
    parts.extend(shown)
    if len(problems) > _SHOWN:
        parts.append(f"and {len(problems) - _SHOWN} more problem(s)")
    if not d.writable and s.action != "deleted":
        parts.append(f"{d.name} is not written on {d.facts.name}")
    parts.extend(notes)
    n = len(targeted)
    if n:
        ok = sum(1 for c in targeted if c.ok)
        parts.append(f"{ok} of {n} owned {d.queue_type} queue(s) show the declared bounds in force")
    else:
        parts.append(f"no owned {d.queue_type} queue for {d.name} to verify it on")
    return "; ".join(parts)


def compact(body: Mapping[str, object]) -> str:
    """A policy body on one line, for a person."""
    shown = {k: body.get(k) for k in ("pattern", "apply-to", "priority", "definition")}
    return json.dumps(shown, sort_keys=True)
