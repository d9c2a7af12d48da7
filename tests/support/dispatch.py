"""A dispatch message's body (``vibey.job.dispatch/1``, ADR-0044 §3) as the host's relay
publishes it, for the tests that dead-letter one."""

from __future__ import annotations

from reaper.core.dead_letters import DISPATCH_SCHEMA, DispatchPointer


def dispatch_body(pointer: DispatchPointer) -> dict[str, object]:
    """The body of the dispatch message ``pointer`` reads back from."""
    return {
        "schema": DISPATCH_SCHEMA,
        "job_id": str(pointer.job_id),
        "project_id": str(pointer.project_id),
        "dispatch_seq": pointer.dispatch_seq,
        "kind": pointer.kind,
        "not_before": pointer.not_before.isoformat(),
    }
