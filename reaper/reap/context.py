"""One pass as its steps see it: the configuration, ``now``, the sources and the mode.

One pass as its steps see it (SPEC §5): the configuration, the database's ``now``, the
sources as opened and as read, and the mode (an audit, a full pass, or the lease reap alone).

Built once the sources are measured, frozen, and handed to every step after: a step reads
what it may write to from here (:attr:`Pass.ledger`) rather than being told again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from reaper.broker.port import Broker
from reaper.core.domain import Dispatch
from reaper.jobqueue.port import JobQueue
from reaper.reap.measure import Reading
from reaper.reap.pass_config import PassConfig
from reaper.reap.stopping import StopRequest

__all__ = ["Mode", "Pass"]


class Mode(Enum):
    """What a pass may do: judge and write nothing (``audit``: ``--dry-run``), the whole pass
    (``full``), or the lease reap alone (``leases-only``: a worker hook switched off, no broker,
    no sighting)."""

    AUDIT = "audit"
    FULL = "full"
    LEASES_ONLY = "leases-only"


@dataclass(frozen=True)
class Pass:
    """The context every step after the measuring takes."""

    config: PassConfig
    mode: Mode
    #: The database's clock as the pass began (the pass's own clock when it could not be read).
    now: datetime
    reading: Reading
    #: The job queue and the ledger as opened (None: not opened), whether read or not.
    opened: JobQueue | None
    #: The broker's management API as opened (None: not opened, or a lease-only pass).
    broker_opened: Broker | None
    stop: StopRequest = field(default_factory=StopRequest)
    monotonic: Callable[[], float] = time.monotonic

    @property
    def dry_run(self) -> bool:
        return self.mode is Mode.AUDIT

    @property
    def leases_only(self) -> bool:
        return self.mode is Mode.LEASES_ONLY

    @property
    def store(self) -> JobQueue | None:
        """The job queue and the ledger, read: None when it could not be read."""
        return self.opened if self.reading.job_queue is not None else None

    @property
    def ledger(self) -> JobQueue | None:
        """Where this pass writes: the store, read, unless an audit. The ledger lives in
        PostgreSQL: without it nothing is written, not even broker news."""
        return None if self.dry_run else self.store

    @property
    def broker(self) -> Broker | None:
        """The broker, read: None when it could not be read (or was not asked)."""
        return self.broker_opened if self.reading.broker is not None else None

    @property
    def dispatch(self) -> Dispatch:
        """How the host dispatches, as measured (polling when the job queue was not read)."""
        job_queue = self.reading.job_queue
        return job_queue.dispatch.mode if job_queue else Dispatch.POLLING
