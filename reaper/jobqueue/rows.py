"""Rows read back as the values the port speaks, each field from the column of its name.

A ``human_gate`` row is a :class:`Gate`, a parked ``dead_letter`` row with its job's state a
:class:`ParkedDeadLetter`; the store's reads and its answers read them the same way, and the
store's other reads (a quiet mark) take their values from their rows by the same rule."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import TYPE_CHECKING, TypeVar

from reaper.core.dead_letters import ParkedLetter
from reaper.core.records import Gate
from reaper.core.storable import from_storage
from reaper.jobqueue.database import Record
from reaper.jobqueue.port import ParkedDeadLetter

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["gate_of", "parked_of", "value_of"]

V = TypeVar("V", bound="DataclassInstance")


def value_of(kind: type[V], row: Record, **given: object) -> V:
    """A ``kind`` read from ``row``: each field from ``given`` or else from the column of its
    name; a field the row has no column for keeps its default (one without a default is a
    ``TypeError``: the query does not read it)."""
    columns = set(row.keys())
    return kind(
        **{
            f.name: given[f.name] if f.name in given else row[f.name]
            for f in fields(kind)
            if f.name in given or f.name in columns
        }
    )


def gate_of(row: Record) -> Gate:
    """A ``human_gate`` row as a :class:`Gate` (its choices stored as a JSON array)."""
    choices = json.loads(row["choices"]) if row["choices"] else []
    listed = tuple(str(c) for c in choices) if isinstance(choices, list) else ()
    return value_of(Gate, row, choices=listed)


def parked_of(row: Record) -> ParkedDeadLetter:
    """A parked ``dead_letter`` row, with its job's state, as a :class:`ParkedDeadLetter`."""
    letter = value_of(ParkedLetter, row, queue=from_storage(row["queue"]))
    return value_of(ParkedDeadLetter, row, letter=letter)
