"""Which dispatch is in force: the one declared against what the host's schema shows.

Which dispatch is in force (SPEC §3): the declared ``[queue.reap] dispatch`` against what the
host's schema shows. Where the host dispatches through RabbitMQ, a job the reaper makes ready
again must start a new dispatch episode, or no worker ever receives it (ADR-0044 §4)."""

from __future__ import annotations

from dataclasses import dataclass

from reaper.core.domain import Dispatch, Source
from reaper.errors import SourceUnreadable

__all__ = ["DispatchInForce", "dispatch_in_force"]

_SCHEMA = "job.dispatch_seq and job_outbox"


@dataclass(frozen=True)
class DispatchInForce:
    mode: Dispatch
    #: Why, for the report: declared, or what the schema showed.
    why: str


def dispatch_in_force(declared: str, outbox_schema: bool) -> DispatchInForce:
    """The dispatch in force. Raises :class:`SourceUnreadable` for the job queue when
    ``outbox`` is declared and the schema has no outbox: requeueing there would strand every
    job it moved, so nothing of the job queue is acted on."""
    if declared == "polling":
        return DispatchInForce(Dispatch.POLLING, "declared (dispatch = polling)")
    if declared == "outbox":
        if not outbox_schema:
            raise SourceUnreadable(
                Source.JOB_QUEUE.value,
                f"dispatch = outbox is declared, but the database has no {_SCHEMA}: nothing "
                "was moved, since a requeued job would never be dispatched. Create them (reaper "
                "db migrate --outbox) or declare dispatch = polling",
            )
        return DispatchInForce(Dispatch.OUTBOX, "declared (dispatch = outbox)")
    if outbox_schema:
        return DispatchInForce(Dispatch.OUTBOX, f"detected: the schema has {_SCHEMA}")
    return DispatchInForce(Dispatch.POLLING, f"detected: the schema has no {_SCHEMA}")
