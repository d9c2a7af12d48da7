"""Which gates a person's options select, read from the store as views.

Which gates a person selects (``reaper gates list``, and ``reaper gates answer`` over a
selection): by kind, by project as typed, by how long ago they were raised, and by the
dead-letter queue their letters were read from; read from the store as views at the
database's clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from reaper.config import Settings
from reaper.gates.ids import resolve_project
from reaper.gates.views import GateView, parse_since, views_of
from reaper.jobqueue.port import GateFilter, JobQueue

__all__ = ["Selection", "select"]


@dataclass(frozen=True)
class Selection:
    """What a person's options select; each field narrows (None: any)."""

    open_only: bool = True
    kind: str | None = None
    #: A project as typed: ``fleet``, an id or a prefix of one in the ledger.
    project: str | None = None
    #: Raised at least this long before the database's clock.
    older_than: timedelta | None = None
    #: Raised since this moment or this long ago, as ``--since`` takes it.
    since: str | None = None
    #: Only dead-letter gates whose letter was read from, or dead-lettered out of, this queue.
    queue: str | None = None


async def select(store: JobQueue, settings: Settings, chosen: Selection) -> list[GateView]:
    """The gates ``chosen`` selects, oldest first, as a person sees them now."""
    now = (await store.database_facts()).now
    project = None if chosen.project is None else await resolve_project(store, chosen.project)
    gates = await store.list_gates(
        GateFilter(
            open_only=chosen.open_only,
            kind=chosen.kind,
            project_id=project,
            raised_before=None if chosen.older_than is None else now - chosen.older_than,
            raised_since=None if chosen.since is None else parse_since(chosen.since, now),
        )
    )
    views = await views_of(store, settings, gates, now)
    if chosen.queue is None:
        return views
    return [
        v
        for v in views
        if v.parked is not None
        and chosen.queue in (v.parked.letter.queue, v.parked.letter.origin_queue)
    ]
