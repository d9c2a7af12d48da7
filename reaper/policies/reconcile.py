"""Reconciliation: write only a real difference, read it back, verify it on the queues.

Reconciliation (SPEC §4): read each declared policy; write only a real difference; read it
back; then verify on every owned queue, waiting a bounded time for the management statistics
to catch up. Also the plan (``reaper policies plan``): the same reading, nothing written.

A write the broker refuses (a user without the ``policymaker`` tag) is an outcome, never an
exception. A broker that cannot be read at all raises :class:`~reaper.errors.BrokerUnavailable`
for the pass to name as unreadable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from reaper.broker.port import Broker, BrokerPolicy
from reaper.core.cluster import queue_unavailable
from reaper.core.domain import QueueStats
from reaper.core.found import split_found
from reaper.core.values import normalized
from reaper.errors import BrokerRefused, BrokerUnavailable
from reaper.policies.outcome import PolicyOutcome, PolicyState, compact, outcome, to_delete
from reaper.policies.render import DesiredPolicy, Unenforced, Unsupported
from reaper.policies.verify import PolicyReason, QueueCheck, check_queues, differences

__all__ = [
    "POLL_INTERVAL_SECONDS",
    "Plan",
    "PolicyOutcome",
    "PolicyPlan",
    "QueuesRead",
    "ReadQueues",
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
class QueuesRead:
    """The vhost's queues as verification reads them: those to check, those that cannot be
    read now (each with why), and per policy the queues already verified as the listing was
    read and not kept (a pass's quiet queues, :mod:`reaper.reap.listing`)."""

    queues: Sequence[QueueStats]
    unreadable: Sequence[tuple[QueueStats, str]] = ()
    verified: Mapping[str, int] = field(default_factory=dict)


#: Reads the vhost's queues for verification, given the policies as finally rendered.
ReadQueues = Callable[[Sequence[DesiredPolicy]], Awaitable[QueuesRead]]


@dataclass(frozen=True)
class Plan:
    """Desired against actual, per policy and per queue, and the outcomes that follow."""

    broker: str
    vhost: str | None
    dry_run: bool
    policies: tuple[PolicyPlan, ...]
    queues: tuple[QueueCheck, ...]
    outcomes: tuple[PolicyOutcome, ...]


async def plan(
    client: Broker, desired: Sequence[DesiredPolicy], *, vhost: str | None = None
) -> Plan:
    """Desired against actual, per policy and per queue. Reads only; writes nothing."""
    return await reconcile(client, desired, vhost=vhost, dry_run=True)


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
    listed: QueuesRead | None = None,
    read_queues: ReadQueues | None = None,
) -> Plan:
    """Bring every desired policy to the broker and verify it on the queues; the plan says
    what was found, per policy and per queue, and its outcomes what became of each policy.

    Reads the vhost's policies (one listing); writes only a real (normalized) difference;
    reads the written ones back; then checks the queues (``listed``, the pass's own listing,
    while nothing was written; else read again by ``read_queues``, default one whole
    listing) until every declared queue shows its policy and bounds in force, for at most
    ``verify_wait_seconds`` (polling only while a write or the statistics are pending).

    ``dry_run`` writes nothing and says ``planned`` (a declaration this broker cannot hold at
    all says ``unsupported`` either way). A refused write is an outcome (``refused``), never an
    exception; a broker that cannot be read raises ``BrokerUnavailable``."""
    # One listing reads every policy: measured on 3.10, 4.0 and 4.3, a user without the
    # policymaker tag may list a vhost's policies but not GET one by name (401).
    held = _by_name(await client.list_policies(vhost))
    states = [
        PolicyState(d, held.get(d.name), differences(d, held.get(d.name)) if d.writable else ())
        for d in desired
    ]
    plans = tuple(_policy_plan(s) for s in states)

    written: set[str] = set()
    if not dry_run:
        written, held = await _write_differences(client, states, held, vhost)
    as_desired = frozenset(d.name for d in desired if not differences(d, held.get(d.name)))

    # Policies are cluster-wide: each is verified once, on the queues, whichever node leads
    # them. A queue that cannot be read now (its node down, no majority) shows no policy
    # fields at all: it is not checked (the pass names it unreadable) and not waited for.
    facts = desired[0].facts if desired else None
    deadline = clock() + verify_wait_seconds
    read = listed if listed is not None and _still_true(listed, desired, written) else None
    while True:
        if read is None:
            read = await (read_queues or _whole_listing(client, vhost))(desired)
        checks = check_queues(
            desired, read.queues, just_written=frozenset(written), held_as_desired=as_desired
        )
        if dry_run or not any(c.pending for c in checks) or clock() >= deadline:
            break
        read = None
        await sleep(max(0.0, min(poll_interval_seconds, deadline - clock())))

    outcomes = tuple(
        outcome(
            s,
            checks,
            held,
            read.unreadable,
            dry_run=dry_run,
            quiet=read.verified.get(s.desired.name, 0),
        )
        for s in states
    )
    return Plan(
        broker=facts.name if facts else "no declared policy",
        vhost=vhost,
        dry_run=dry_run,
        policies=plans,
        queues=tuple(checks),
        outcomes=outcomes,
    )


def _still_true(listed: QueuesRead, desired: Sequence[DesiredPolicy], written: set[str]) -> bool:
    """Whether the pass's listing still says what is in force: nothing was written since, and
    no policy withholds a key its quiet queues were verified with."""
    return not written and not any(d.withheld and listed.verified.get(d.name) for d in desired)


def _whole_listing(client: Broker, vhost: str | None) -> ReadQueues:
    """Every queue of the vhost, held whole; those that cannot be read now set apart."""

    async def read(desired: Sequence[DesiredPolicy]) -> QueuesRead:
        # A queue that cannot be read now (its node down, no majority) shows no policy fields
        # at all: it is not checked (the pass names it unreadable) and not waited for.
        nodes = desired[0].facts.nodes if desired else None
        listed = await client.list_queues(vhost)
        unreadable, queues = split_found(listed, lambda q: queue_unavailable(q, nodes))
        return QueuesRead(queues, unreadable)

    return read


async def _write_differences(
    client: Broker, states: Sequence[PolicyState], held: dict[str, BrokerPolicy], vhost: str | None
) -> tuple[set[str], dict[str, BrokerPolicy]]:
    """Write each policy that differs (delete a stale one of ours) and read the written ones
    back: the names written, and the policies as the broker holds them after."""
    written: set[str] = set()
    for s in states:
        writing = s.desired.writable and bool(s.diff)
        if await _write(client, s, vhost) if writing else await _delete_stale(client, s, vhost):
            written.add(s.desired.name)
    if written:
        held = _by_name(await client.list_policies(vhost))
        for s in states:
            if s.desired.name in written:
                _read_back(s, held.get(s.desired.name))
    return written, held


def _by_name(policies: Iterable[BrokerPolicy]) -> dict[str, BrokerPolicy]:
    return {p.name: p for p in policies}


async def _write(client: Broker, s: PolicyState, vhost: str | None) -> bool:
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


async def _delete_stale(client: Broker, s: PolicyState, vhost: str | None) -> bool:
    """Delete our policy where :func:`~reaper.policies.outcome.to_delete` says; True when it
    was deleted."""
    if not to_delete(s):
        return False
    try:
        await client.delete_policy(s.desired.name, vhost=vhost)
    except BrokerRefused as exc:
        s.action = "refused"
        s.problems.append((PolicyReason.REFUSED, f"{exc.reason}: {_POLICYMAKER_HINT}"))
        return False
    s.action = "deleted"
    return True


def _read_back(s: PolicyState, back: BrokerPolicy | None) -> None:
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


def _policy_plan(s: PolicyState) -> PolicyPlan:
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
