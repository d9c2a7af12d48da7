"""A dead letter's message and identity, as a letter just read and a letter parked both hold them.

:class:`~reaper.core.domain.DeadLetter` and :class:`~reaper.core.dead_letters.ParkedLetter`
share it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Letter"]


@dataclass(frozen=True)
class Letter:
    """A dead letter as the reaper identifies it (:mod:`reaper.core.dead_letters.decode`).

    ``queue`` is ours: the dead-letter queue the pass read. ``message_id``, ``origin_queue``
    and ``reason`` come from properties and headers the message's publisher could write
    (``x-first-death-*``, ``x-death``): untrusted, shown only quoted and cut. ``body`` is the
    payload as the management API gave it (``body_encoding`` "string" or "base64");
    ``body_truncated`` is True whenever the body held is not provably the whole message.
    ``identity`` is stable across re-reads.
    """

    queue: str
    identity: str
    message_id: str | None
    origin_queue: str | None
    reason: str | None
    body: str
    body_encoding: str
    body_bytes: int
    body_truncated: bool
    is_json_object: bool
