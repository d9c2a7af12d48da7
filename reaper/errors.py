"""The package's own errors, and the scrubbing that keeps secrets out of every message.

Adapters turn their driver's exceptions into these at one seam each (``jobqueue/database.py``
for asyncpg, ``broker/http.py`` for httpx), so nothing above them ever sees a driver type, and
every message that leaves the process has passed through :func:`scrub`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^@/\s]+)@")
_KEY_VALUE_SECRET = re.compile(r"(?i)\b(password|passwd|pwd)\s*[=:]\s*('[^']*'|\"[^\"]*\"|\S+)")

#: Secrets registered at start-up (the configured passwords), scrubbed from every message.
_known_secrets: set[str] = set()


def register_secret(secret: str | None) -> None:
    """Remember a secret so that :func:`scrub` removes it wherever it appears."""
    if secret:
        _known_secrets.add(secret)


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Remove passwords from ``text``: credentials inside URLs, ``password=...`` pairs, and
    every secret registered or passed in."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}***@", text)
    text = _KEY_VALUE_SECRET.sub(lambda m: f"{m[1]}=***", text)
    for secret in sorted({*_known_secrets, *(s for s in secrets if s)}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class ReaperError(Exception):
    """Base of every error the package raises on purpose. Its message is already scrubbed."""

    def __init__(self, message: str) -> None:
        super().__init__(scrub(message))

    @property
    def reason(self) -> str:
        return str(self)


class ConfigError(ReaperError):
    """The declared configuration is invalid. Carries every problem, not only the first."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = [scrub(p) for p in problems]
        super().__init__("; ".join(self.problems) or "invalid configuration")


class SourceUnreadable(ReaperError):
    """A source (PostgreSQL or the broker) could not be read; nothing is concluded from it."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        super().__init__(reason)


class StoreUnavailable(SourceUnreadable):
    def __init__(self, reason: str) -> None:
        super().__init__("job_queue", reason)
        #: What a write had already committed when the database went away (e.g. the lease
        #: batches moved before the failure), so the pass can report it.
        self.partial: object | None = None


class BrokerUnavailable(SourceUnreadable):
    def __init__(self, reason: str, status: int | None = None) -> None:
        self.status = status
        super().__init__("broker", reason)


class BrokerRefused(BrokerUnavailable):
    """The broker answered 401/403 to a write: reported, never raised past the reconciler."""


class GateError(ReaperError):
    """A gate answer cannot be taken (unknown gate, already answered, invalid choice)."""


class MigrationStopped(ReaperError):
    """``reaper db migrate`` stopped without changing anything half-way: a lock it needed was
    held past its lock_timeout (``blocking_pids`` names who held it), a statement failed, or the
    host's schema needs something done by hand. The message says which, and what was done."""

    def __init__(self, message: str, blocking_pids: tuple[int, ...] = ()) -> None:
        self.blocking_pids = blocking_pids
        super().__init__(message)


class PassFailed(ReaperError):
    """A pass could not produce a result (``reaper serve`` logs and counts it, and goes on)."""
