"""A moment as every output a person reads gives it: UTC, ISO 8601, ``Z`` (SPEC §12).

One format in every listing, report, answer, refusal and log line, so a time copied from one
output finds its line in another (``+00:00`` and ``Z`` name the same instant but do not grep
alike). Identities written into the ledger keep the form they were first written in. Pure.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["utc"]


def utc(when: datetime, timespec: str = "seconds") -> str:
    """``when`` in UTC as ``2026-12-06T20:44:46Z`` (``timespec`` as ``datetime.isoformat``)."""
    return when.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
