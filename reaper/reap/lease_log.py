"""Every lease verdict of a pass, kept without holding them (SPEC §5, §8 memory).

A pass can move tens of thousands of leases. Their verdicts all stay available to the report
(``--json`` lists every one), but holding each as an object until the report is printed would
make a pass's memory grow with the size of the work. The lease reap's batches hand the log
what PostgreSQL recorded, one text a batch (each move's stream and event payload, between
U+001E separators), never a lease at a time; the log appends it to a temporary file and keeps
only the batches' counts. Iterating the log reads the batches back one at a time and builds each
verdict from its payload then.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import IO, overload
from uuid import UUID

from reaper.core.domain import Action, Condition, Source, Unit, Verdict
from reaper.core.judge_leases import RULING_KINDS
from reaper.jobqueue.port import LeaseReap
from reaper.reap.progress import RecordedVerdict

__all__ = ["LeaseLog", "VerdictLog"]

#: The tally's key: condition, action, project, recorded.
TallyKey = tuple[Condition, Action, UUID, bool]

#: A stream's id, as its text: the first characters of each kept move.
_STREAM = 36


class LeaseLog:
    """The lease verdicts of one pass, in the order their batches ended, spooled to disk."""

    def __init__(self) -> None:
        self._spool: IO[bytes] | None = None
        self.tally: Counter[TallyKey] = Counter()

    def __len__(self) -> int:
        return sum(self.tally.values())

    def count(self, reap: LeaseReap, recorded: bool) -> None:
        """A lease reap's moves (a dry run's: its rulings), counted."""
        for (project, poison), n in reap.moves.items():
            condition, action = RULING_KINDS[poison]
            self.tally[(condition, action, project, recorded)] += n

    def keep(self, moves: str, recorded: bool) -> None:
        """One batch's moves as the store hands them (:data:`~reaper.jobqueue.port.KeepMoves`)."""
        if self._spool is None:
            # the log's own: closed by close(), or removed with the log by the collector
            self._spool = tempfile.TemporaryFile(prefix="reaper-leases-")  # noqa: SIM115
        blob = moves.encode()
        self._spool.seek(0, 2)
        self._spool.write(bytes([recorded]) + len(blob).to_bytes(8, "little") + blob)

    def __iter__(self) -> Iterator[RecordedVerdict]:
        spool = self._spool
        if spool is None:
            return
        spool.seek(0)
        while head := spool.read(9):
            blob = spool.read(int.from_bytes(head[1:], "little")).decode()
            position = spool.tell()
            for kept in blob.split("\x1e"):
                yield RecordedVerdict(_verdict(kept), bool(head[0]))
            spool.seek(position)  # another iteration may have moved the file meanwhile

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


def _verdict(kept: str) -> Verdict:
    """A kept move as the verdict its event records."""
    payload = json.loads(kept[_STREAM:])
    return Verdict(
        source=Source(payload["source"]),
        object=payload["object"],
        condition=Condition(payload["condition"]),
        measured=payload["measured"],
        threshold=payload["threshold"],
        unit=Unit(payload["unit"]),
        action=Action(payload["action"]),
        project_id=UUID(kept[:_STREAM]),
        detail=payload["detail"],
    )


class VerdictLog(Sequence[RecordedVerdict]):
    """A pass's verdicts: its lease verdicts (from a :class:`LeaseLog`, spooled) then the rest
    (``others``, the only ones that can surface a finding), read as one sequence. Iterating
    streams; indexing builds the whole list (for tests and small passes)."""

    def __init__(
        self, leases: LeaseLog | None = None, others: Sequence[RecordedVerdict] = ()
    ) -> None:
        self.leases = LeaseLog() if leases is None else leases
        self.others = tuple(others)

    def __len__(self) -> int:
        return len(self.leases) + len(self.others)

    def __iter__(self) -> Iterator[RecordedVerdict]:
        yield from self.leases
        yield from self.others

    @overload
    def __getitem__(self, index: int) -> RecordedVerdict: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[RecordedVerdict]: ...
    def __getitem__(self, index: int | slice) -> RecordedVerdict | Sequence[RecordedVerdict]:
        return tuple(self)[index]

    def __repr__(self) -> str:
        return f"VerdictLog({len(self.leases)} lease verdict(s), {len(self.others)} other(s))"
