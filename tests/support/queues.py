"""A queue as the management API lists it, for the judges' and the plans' tests: a quiet,
empty queue on vhost ``/`` unless told otherwise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reaper.core.domain import QueueStats


def queue_stats(
    name: str = "vibey.jobs",
    kind: str | None = "quorum",
    *,
    ready: int = 0,
    unacked: int = 0,
    consumers: int = 0,
    effective_policy: Mapping[str, Any] | None = None,
    arguments: Mapping[str, Any] | None = None,
    **fields: Any,
) -> QueueStats:
    """``name`` of type ``kind`` with the counts given, no policy in force and no arguments
    unless given; ``fields`` are QueueStats' others."""
    return QueueStats(
        vhost="/",
        name=name,
        type=kind,
        messages_ready=ready,
        messages_unacknowledged=unacked,
        consumers=consumers,
        effective_policy=effective_policy or {},
        arguments=arguments or {},
        **fields,
    )
