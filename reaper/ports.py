"""The two sources as the pass sees them, in the domain's words.

``store.PostgresStore`` and ``broker.ManagementClient`` are the real implementations; the
pass depends only on these Protocols, so it never imports a driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from reaper.domain import (
    BrokerFacts,
    ClaimableHead,
    DeadLetter,
    HeldLease,
    QueueStats,
    Source,
    Verdict,
)


class JobQueue(Protocol):
    """The job queue's record in PostgreSQL, and the ledger."""

    async def expired_leases(
        self, now: datetime, grace_seconds: int, limit: int, project_id: UUID | None = None
    ) -> list[HeldLease]: ...

    async def count_expired_leases(
        self, now: datetime, grace_seconds: int, project_id: UUID | None = None
    ) -> int: ...

    async def claimable_heads(
        self, now: datetime, known_phases: frozenset[str], project_id: UUID | None = None
    ) -> list[ClaimableHead]: ...

    async def apply_lease_verdicts(self, verdicts: Sequence[Verdict], now: datetime) -> Any: ...

    async def record_sightings(
        self,
        observed: Sequence[Verdict],
        *,
        now: datetime,
        sources_read: frozenset[Source],
        project_id: UUID | None = None,
    ) -> list[Verdict]: ...

    async def count_parked_dead_letters(self, queue: str) -> int: ...

    async def parked_identities(self, identities: Sequence[str]) -> set[str]: ...

    async def park_dead_letters(
        self,
        letters: Sequence[DeadLetter],
        *,
        now: datetime,
        depth: int,
        min_depth: int,
        owned_queue_pattern: str,
        dead_letter_queue_pattern: str,
    ) -> list[Verdict]: ...

    async def close(self) -> None: ...


class Broker(Protocol):
    """The broker's management API."""

    requests_made: int
    writes_made: int

    async def facts(self, *, declared_consumer_timeout_ms: int | None = None) -> BrokerFacts: ...

    async def list_queues(self, vhost: str | None = None) -> list[QueueStats]: ...

    async def queue(self, name: str, vhost: str | None = None) -> QueueStats: ...

    async def get_messages(
        self, queue: str, count: int, *, vhost: str | None = None, truncate: int | None = 50000
    ) -> list[dict[str, Any]]: ...

    async def aclose(self) -> None: ...
