"""Every lease verdict of a pass, kept without holding them (SPEC §5, §8 memory).

A pass can move tens of thousands of leases. Their verdicts all stay available to the report
(``--json`` lists every one), but holding each as an object until the report is printed would
make a pass's memory grow with the size of the work. So the lease reap hands the log each page
as the judge ruled on it (plain columns) and what became of each move; the log writes the page
to a temporary file and keeps only a tally (verdicts per condition, action, project, and
whether recorded). Iterating the log reads the pages back one at a time and builds each
verdict then. Measured (``bench/pass_memory.py --lease-log-only``): kept in memory, 200,000
leases' pages and rulings hold about 130 MB, past SPEC §8's 100 MB; spooled, the log holds
under 1 MB.
"""

from __future__ import annotations

import marshal
import tempfile
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import IO, Final, cast, get_args, overload
from uuid import UUID

from reaper.core.domain import Action, Condition
from reaper.core.judge_leases import RULING_KINDS, LeaseColumns, LeaseRulings
from reaper.reap.progress import RecordedVerdict

__all__ = ["LeaseLog", "VerdictLog"]

#: The tally's key: condition, action, project, recorded.
TallyKey = tuple[Condition, Action, UUID, bool]

#: A page as spooled, in values ``marshal`` takes: job and project ids (their bytes, joined),
#: kinds, owners, expiries (microseconds since the epoch, exactly), attempts, attempt limits;
#: then the rulings (grace, rows, poison, measured, details) and what was recorded.
_Spooled = tuple[
    bytes,
    bytes,
    tuple[str, ...],
    tuple[str | None, ...],
    tuple[int, ...],
    tuple[int, ...],
    tuple[int, ...],
    int,
    tuple[int, ...],
    tuple[bool, ...],
    tuple[float | int, ...],
    tuple[str, ...],
    tuple[bool, ...],
]


class LeaseLog:
    """The lease verdicts of one pass, in the order they were judged, spooled to disk."""

    def __init__(self) -> None:
        self._spool: IO[bytes] | None = None
        self._count = 0
        self.tally: Counter[TallyKey] = Counter()

    def __len__(self) -> int:
        return self._count

    def add(self, page: LeaseColumns, rulings: LeaseRulings, moved: Collection[UUID]) -> None:
        """One page's rulings; ``moved``: the jobs whose move (and event) committed."""
        if not rulings.rows:
            return
        job_ids, projects, rows = page.job_ids, page.project_ids, rulings.rows
        recorded = tuple(job_ids[i] in moved for i in rows)
        for (poison, project, was_recorded), n in Counter(
            zip(rulings.poison, (projects[i] for i in rows), recorded, strict=True)
        ).items():
            condition, action = RULING_KINDS[poison]
            self.tally[(condition, action, project, was_recorded)] += n
        if self._spool is None:
            # the log's own: closed by close(), or removed with the log by the collector
            self._spool = tempfile.TemporaryFile(prefix="reaper-leases-")  # noqa: SIM115
        self._spool.seek(0, 2)
        for column in _encode(page, rulings, recorded):  # one at a time: a page is megabytes
            blob = marshal.dumps(column)
            self._spool.write(len(blob).to_bytes(8, "little"))
            self._spool.write(blob)
        self._count += len(rulings.rows)

    def __iter__(self) -> Iterator[RecordedVerdict]:
        spool = self._spool
        if spool is None:
            return
        spool.seek(0)
        while True:
            size = spool.read(8)
            if not size:
                return
            columns = [_read_column(spool, size)]
            columns += (_read_column(spool) for _ in range(_COLUMNS - 1))
            page, rulings, recorded = _decode(cast(_Spooled, tuple(columns)))
            position = spool.tell()
            for k in range(len(rulings.rows)):
                yield RecordedVerdict(rulings.verdict(page, k), recorded[k])
            spool.seek(position)  # another iteration may have moved the file meanwhile

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


_COLUMNS: Final = len(get_args(_Spooled))


def _read_column(spool: IO[bytes], size: bytes | None = None) -> object:
    """The next column of the spool; ``size``: its length, when already read."""
    length = int.from_bytes(spool.read(8) if size is None else size, "little")
    return marshal.loads(spool.read(length))


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def _encode(page: LeaseColumns, rulings: LeaseRulings, recorded: tuple[bool, ...]) -> _Spooled:
    """A page, its rulings and what was recorded, as spooled."""
    return (
        b"".join(u.bytes for u in page.job_ids),
        b"".join(u.bytes for u in page.project_ids),
        tuple(page.kinds),
        tuple(page.owners),
        tuple((e - _EPOCH) // _MICROSECOND for e in page.expiries),
        tuple(page.attempts),
        tuple(page.max_attempts),
        rulings.grace,
        rulings.rows,
        rulings.poison,
        rulings.measured,
        rulings.details,
        recorded,
    )


def _decode(values: _Spooled) -> tuple[LeaseColumns, LeaseRulings, tuple[bool, ...]]:
    jobs, projects, kinds, owners, expiries, attempts, limits = values[:7]
    grace, rows, poison, measured, details, recorded = values[7:]
    page = LeaseColumns(
        _uuids(jobs),
        _uuids(projects),
        kinds,
        owners,
        tuple(_EPOCH + e * _MICROSECOND for e in expiries),
        attempts,
        limits,
    )
    return page, LeaseRulings(grace, rows, poison, measured, details), recorded


def _uuids(blob: bytes) -> tuple[UUID, ...]:
    return tuple(UUID(bytes=blob[n : n + 16]) for n in range(0, len(blob), 16))


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
