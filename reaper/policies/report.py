"""The plan for a person and for a machine: ``reaper policies plan [--json]``."""

from __future__ import annotations

from reaper.policies.reconcile import Plan, compact

__all__ = ["plan_json", "plan_text"]


def plan_json(p: Plan) -> dict[str, object]:
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
                "not_enforced": [
                    {"key": u.key, "declared": u.declared, "detail": u.detail}
                    for u in pp.unenforced
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


def plan_text(p: Plan, *, wide: bool = False) -> str:
    """The plan for a person (``reaper policies plan``): each policy and its change, the owned
    queues as a table under a header row (a failing one's problem under it), the outcomes;
    ``wide``: each policy's desired and actual definitions too."""
    lines = [f"{p.broker}, vhost {p.vhost if p.vhost is not None else '(default)'}"]
    for pp in p.policies:
        lines.append(f"policy {pp.name} ({pp.source}): {pp.change}")
        if wide and pp.desired is not None:
            lines.append(f"  desired: {compact(pp.desired)}")
        if wide or pp.actual is None:
            lines.append(f"  actual:  {compact(pp.actual) if pp.actual is not None else 'none'}")
        lines.extend(f"  change:  {d}" for d in pp.differences if pp.actual is not None)
        lines.extend(f"  unsupported: {u.detail}" for u in pp.unsupported)
        lines.extend(f"  not enforced: {u.detail}" for u in pp.unenforced)
    lines.append("queues:")
    if not p.queues:
        lines.append("  no owned queue")
    rows = [("QUEUE", "TYPE", "POLICY", "CARRIES", "IN FORCE", "STATE")]
    for c in p.queues:
        bounds = ", ".join(
            f"{k} {'none' if v is None else v}" for k, v in sorted(c.in_force.items())
        )
        state = "ok" if c.ok else str(c.reason)
        rows.append(
            (c.queue, c.queue_type or "untyped", c.policy, c.carries or "-", bounds or "-", state)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for n, row in enumerate(rows if p.queues else []):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
        lines.append("  " + "  ".join([*cells, row[-1]]))
        if n and not p.queues[n - 1].ok:
            lines.append(f"    {p.queues[n - 1].problem}")
    lines.append("outcomes:")
    for o in p.outcomes:
        verified = {True: "verified", False: "NOT verified", None: "nothing to verify"}
        lines.append(f"  {o.name}: {o.action}, {verified[o.verified]} ({o.reason}): {o.detail}")
    return "\n".join(lines)
