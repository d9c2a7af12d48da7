"""One declared policy after reconciliation: its action, verification, reason and detail.

One declared policy after reconciliation (SPEC §5): its action, whether it is verified on
the queues, the stable reason a person or an alert keys on, and the detail in words. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from reaper.broker.port import BrokerPolicy
from reaper.core.domain import QueueStats
from reaper.core.terminal import first_few
from reaper.core.values import normalized
from reaper.policies.render import DesiredPolicy
from reaper.policies.verify import PolicyReason, QueueCheck

__all__ = ["PolicyOutcome", "PolicyState", "compact", "outcome", "to_delete"]

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

_Problems = list[tuple[PolicyReason, str]]


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
    #: The write this pass made (a dry run: would make): ``create``, ``update`` or
    #: ``delete``, and what it wrote, in words; empty when the policy is left as it was.
    write: str = ""
    change: str = ""

    @property
    def ok(self) -> bool:
        """Everything the broker accepts and enforces is in force (or nothing is to check)."""
        return self.action != "refused" and (self.verified is not False or self.unenforceable)

    @property
    def written(self) -> bool:
        """This pass wrote the policy: the broker took its create, update or delete."""
        return self.action in ("created", "updated", "deleted")

    @property
    def planned(self) -> bool:
        """A dry run's planned write: a "would" line, not a failure."""
        return self.action == "planned" and self.reason in (
            PolicyReason.WOULD_CREATE,
            PolicyReason.WOULD_UPDATE,
        )


@dataclass
class PolicyState:
    """One policy while a reconcile runs: what is desired, what the broker holds, what differs,
    what was done and what went wrong."""

    desired: DesiredPolicy
    actual: BrokerPolicy | None
    diff: tuple[str, ...]
    action: str = "unchanged"
    problems: _Problems = field(default_factory=list)


def to_delete(s: PolicyState) -> bool:
    """Our policy as the broker holds it carries a delivery limit this broker must no longer
    be given, and nothing else of it can be written: it goes, or its limit would drop."""
    held = s.actual.definition if s.actual is not None else {}
    return not s.desired.writable and any(w.key in held for w in s.desired.withheld)


def outcome(
    s: PolicyState,
    checks: Sequence[QueueCheck],
    held: Mapping[str, BrokerPolicy],
    unreadable: Sequence[tuple[QueueStats, str]],
    *,
    dry_run: bool,
    quiet: int = 0,
) -> PolicyOutcome:
    """What became of ``s``, from the queue checks of the pass (``checks``), the policies the
    broker holds (``held``) and the queues that cannot be read now (``unreadable``).
    ``quiet``: queues it is declared for that were verified as the listing was read and not
    kept (:mod:`reaper.reap.listing`), counted with the checks that passed."""
    d = s.desired
    mine = [c for c in checks if c.policy == d.name]
    targeted = [c for c in mine if c.targeted]
    checked = len(targeted) + quiet
    action = _action(s, dry_run=dry_run)
    problems = _problems(s, mine, held)
    notes = _notes(d, mine, unreadable)
    would_delete = dry_run and to_delete(s)
    would_change = dry_run and d.writable and bool(s.diff)
    write, change = _write(s, would_change=would_change, would_delete=would_delete)
    if action == "refused" or problems or would_change:
        verified: bool | None = False
    elif not checked:
        verified = None
    else:
        verified = True
    return PolicyOutcome(
        name=d.name,
        action=action,
        verified=verified,
        queues_checked=checked,
        queues_failing=tuple(sorted({c.queue for c in mine if not c.ok})),
        detail=_detail(
            s,
            targeted,
            problems,
            notes,
            would_change=would_change,
            would_delete=would_delete,
            quiet=quiet,
        ),
        reason=_reason(s, action, problems, bool(checked), would_change=would_change).value,
        fallbacks=tuple(
            u.detail for u in d.unsupported if u.fallback_in_force and u.key != "apply-to"
        ),
        unenforceable=bool(problems)
        and action != "refused"
        and not would_change
        and all(r is PolicyReason.NOT_ENFORCED for r, _ in problems),
        write=write,
        change=change,
    )


def _action(s: PolicyState, *, dry_run: bool) -> str:
    d = s.desired
    if s.action == "deleted":
        return "deleted"
    if dry_run and (d.writable or to_delete(s)):
        return "planned"
    if not d.writable:
        return "unsupported"
    return s.action


def _problems(
    s: PolicyState, mine: Sequence[QueueCheck], held: Mapping[str, BrokerPolicy]
) -> _Problems:
    """Every problem of the policy, the one its reason names first (``_PROBLEM_ORDER``)."""
    d = s.desired
    problems = list(s.problems)
    problems.extend(
        (PolicyReason.DELIVERY_LIMIT_WITHHELD, f"{w.detail}: {w.fix}") for w in d.withheld
    )
    if not d.writable and s.actual is not None and not to_delete(s):
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
    order = {r: i for i, r in enumerate(_PROBLEM_ORDER)}
    problems.sort(key=lambda p: order[p[0]])  # the detail leads with the reason's problem
    return problems


def _notes(
    d: DesiredPolicy, mine: Sequence[QueueCheck], unreadable: Sequence[tuple[QueueStats, str]]
) -> list[str]:
    # what holds instead of a refused key; the apply-to translation is in the plan only
    notes = [u.detail for u in d.unsupported if u.fallback_in_force and u.key != "apply-to"]
    if not any(c.reason is PolicyReason.NOT_ENFORCED for c in mine):
        notes.extend(u.detail for u in d.unenforced)  # no queue said it: say it once here
    unchecked: dict[str, list[str]] = {}
    for q, why in unreadable:
        if d.selects(q):
            unchecked.setdefault(why, []).append(q.name)
    for why, names in unchecked.items():
        if len(names) == 1:
            notes.append(f"not checked on {names[0]}, which cannot be read now ({why})")
            continue
        # a stopped node's thousands of queues are one note: counted, the first few named
        notes.append(
            f"not checked on {len(names):,} queues, which cannot be read now ({why}): "
            + first_few(names)
        )
    return notes


def _reason(
    s: PolicyState, action: str, problems: _Problems, targeted: bool, *, would_change: bool
) -> PolicyReason:
    if would_change and not s.problems and not s.desired.withheld:
        return PolicyReason.WOULD_CREATE if s.actual is None else PolicyReason.WOULD_UPDATE
    if problems:
        return problems[0][0]
    if not targeted:
        return PolicyReason.NO_OWNED_QUEUES
    if action == "unsupported":
        return PolicyReason.KEY_UNSUPPORTED
    if action == "deleted":
        return PolicyReason.DELETED
    return {
        "created": PolicyReason.CREATED,
        "updated": PolicyReason.UPDATED,
    }.get(action, PolicyReason.IN_SYNC)


def _write(s: PolicyState, *, would_change: bool, would_delete: bool) -> tuple[str, str]:
    """The write made (or, ``would_change``/``would_delete``, planned): its verb and what it
    wrote; two empty strings for none."""
    d = s.desired
    if would_delete:
        return "delete", "its delivery limit would drop"
    if s.action == "deleted":
        why = "its delivery limit would drop, and nothing else of it can be written on "
        return "delete", why + d.facts.name
    if would_change or s.action in ("created", "updated"):
        if s.actual is None:
            return "create", compact(d.body())
        return "update", "; ".join(s.diff)
    return "", ""


def _detail(
    s: PolicyState,
    targeted: Sequence[QueueCheck],
    problems: Sequence[tuple[PolicyReason, str]],
    notes: Sequence[str],
    *,
    would_change: bool,
    would_delete: bool = False,
    quiet: int = 0,
) -> str:
    d = s.desired
    parts: list[str] = []
    if would_delete or s.action == "deleted" or would_change:
        write, what = _write(s, would_change=would_change, would_delete=would_delete)
        verb = f"would {write}" if would_delete or would_change else "deleted"
        parts.append(f"{verb} {d.name}: {what}")
    shown = [text for _, text in problems[:_SHOWN]]
    parts.extend(shown)
    if len(problems) > _SHOWN:
        parts.append(f"and {len(problems) - _SHOWN} more problem(s)")
    if not d.writable and s.action != "deleted":
        parts.append(f"{d.name} is not written on {d.facts.name}")
    parts.extend(notes)
    n = len(targeted) + quiet
    if n:
        ok = sum(1 for c in targeted if c.ok) + quiet
        parts.append(f"{ok} of {n} owned {d.queue_type} queue(s) show the declared bounds in force")
    else:
        parts.append(f"no owned {d.queue_type} queue for {d.name} to verify it on")
    return "; ".join(parts)


def compact(body: Mapping[str, object]) -> str:
    """A policy body on one line, for a person."""
    shown = {k: body.get(k) for k in ("pattern", "apply-to", "priority", "definition")}
    return json.dumps(shown, sort_keys=True)
