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


def plan_text(p: Plan) -> str:
    """The plan for a person (``reaper policies plan``)."""
    lines = [f"{p.broker}, vhost {p.vhost if p.vhost is not None else '(default)'}"]
    for pp in p.policies:
        lines.append(f"policy {pp.name} ({pp.source}): {pp.change}")
        if pp.desired is not None:
            lines.append(f"  desired: {compact(pp.desired)}")
        lines.append(f"  actual:  {compact(pp.actual) if pp.actual is not None else 'none'}")
        lines.extend(f"  change:  {d}" for d in pp.differences if pp.actual is not None)
        lines.extend(f"  unsupported: {u.detail}" for u in pp.unsupported)
        lines.extend(f"  not enforced: {u.detail}" for u in pp.unenforced)
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
