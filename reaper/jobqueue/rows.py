"""Rows read back as the values the port speaks: a ``human_gate`` row as a :class:`Gate`, a
parked ``dead_letter`` row with its job's state as a :class:`ParkedDeadLetter`. The store's
reads and its answers read them the same way."""

from __future__ import annotations

import json

from reaper.core.dead_letters import ParkedLetter
from reaper.core.records import Gate
from reaper.core.storable import from_storage
from reaper.jobqueue.database import Record
from reaper.jobqueue.port import ParkedDeadLetter

__all__ = ["gate_of", "parked_of"]


def gate_of(row: Record) -> Gate:
    """A ``human_gate`` row as a :class:`Gate`."""
    choices = json.loads(row["choices"]) if row["choices"] else []
    return Gate(
        id=row["id"],
        project_id=row["project_id"],
        job_id=row["job_id"],
        kind=row["kind"],
        prompt=row["prompt"],
        choices=tuple(str(c) for c in choices) if isinstance(choices, list) else (),
        answer=row["answer"],
        answered_at=row["answered_at"],
        identity=row["identity"],
        created_at=row["created_at"],
        answered_by=row["answered_by"],
        superseded_by=row.get("superseded_by"),
        job_kind=row.get("job_kind"),
    )


def parked_of(row: Record) -> ParkedDeadLetter:
    """A parked ``dead_letter`` row, with its job's state, as a :class:`ParkedDeadLetter`."""
    return ParkedDeadLetter(
        letter=ParkedLetter(
            queue=from_storage(row["queue"]),
            identity=row["identity"],
            message_id=row["message_id"],
            origin_queue=row["origin_queue"],
            reason=row["reason"],
            body=row["body"],
            body_encoding=row["body_encoding"],
            body_bytes=row["body_bytes"],
            body_truncated=row["body_truncated"],
            is_json_object=row["is_json_object"],
        ),
        job_id=row["job_id"],
        parked_at=row["parked_at"],
        job_state=row["job_state"],
    )
