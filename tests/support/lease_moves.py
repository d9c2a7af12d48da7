"""A pass's lease moves for tests of what reads them (the report, the metrics): counted as the
store counts them, and listed back (:class:`ListedMoves`, standing in for the ledger a listing
reads) as :class:`~reaper.reap.leases.LeaseListing` reads them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from datetime import datetime, timedelta

from reaper.core.domain import Action, Dispatch, Verdict
from reaper.jobqueue.port import LeaseReap, LeaseReapRun
from reaper.reap.leases import LeaseListing, LeaseReapOutcome
from reaper.reap.progress import RecordedVerdict
from reaper.reap.result import PassResult


class ListedMoves:
    """A store whose lease listing gives back ``verdicts``, as the ledger recorded them."""

    def __init__(self, verdicts: Sequence[Verdict]) -> None:
        self.verdicts = verdicts
        self.reads = 0

    async def lease_listing(
        self, run: LeaseReapRun, reap: LeaseReap
    ) -> AsyncGenerator[Verdict, None]:
        self.reads += 1
        for v in self.verdicts:
            yield v


def lease_outcome(
    verdicts: Sequence[Verdict], now: datetime, *, recorded: bool = True
) -> LeaseReapOutcome:
    """The lease step of a pass at ``now`` that moved (``recorded``; else ruled on) each of
    ``verdicts``: counted, its first few read back as the pass reads them."""
    reap = LeaseReap()
    for v in verdicts:
        lease = v.lease
        expiry = lease.lease_expires_at if lease else now - timedelta(seconds=float(v.measured))
        assert v.project_id is not None
        reap.add([(v.project_id, v.action is Action.PARK, 1, expiry, expiry)])
    run = LeaseReapRun(now, 0, None, Dispatch.POLLING, recorded)
    listing = LeaseListing(reap, run, ListedMoves(verdicts))  # type: ignore[arg-type]
    asyncio.run(listing.read_sample())
    return LeaseReapOutcome(listing=listing, expired=reap.moved)


def every_move(listing: LeaseListing) -> list[RecordedVerdict]:
    """Every move of ``listing``, read back whole (as ``-o wide`` reads it)."""

    async def read() -> list[RecordedVerdict]:
        return [r async for r in listing]

    return asyncio.run(read())


async def every_verdict(result: PassResult) -> list[RecordedVerdict]:
    """Every verdict of a pass whose store is still open: its lease moves read back (as
    ``--json`` lists them), then the rest."""
    return [r async for r in result.leases.listing] + list(result.verdicts)
