"""The short ids the outputs print, read back, and the words a listing filters on checked.

The short ids the outputs print, read back: a gate, a project, or a job as an event's object,
named by its whole id, any unique prefix of it (the 8 hex characters a report shows) or, for
the fleet's own stream, ``fleet``; a prefix several share is refused, naming them.
The words each listing filters on (condition, action, source, gate kind) are checked against
the vocabulary here too, so a misspelt one is refused with the nearest name, never "0 found"."""

from __future__ import annotations

import difflib
import re
from argparse import ArgumentTypeError
from collections.abc import Callable, Iterable
from typing import Final
from uuid import UUID

from reaper.core.domain import (
    FLEET_PROJECT_ID,
    GATE_BUS_DEAD_LETTERED,
    GATE_DELIVERY_EXHAUSTED,
    Action,
    Condition,
    Source,
)
from reaper.core.moments import utc
from reaper.core.records import Gate
from reaper.errors import GateError
from reaper.jobqueue.port import JobQueue

__all__ = [
    "FLEET",
    "GATE_KINDS",
    "SHORT_ID_DIGITS",
    "argument",
    "choose",
    "find_gate",
    "gate_id_range",
    "gate_kind",
    "project_name",
    "project_text",
    "resolve_object",
    "resolve_project",
    "short_id",
]

#: How the fleet's own stream (project 00000000-...) is shown and typed.
FLEET: Final = "fleet"

#: How many hex digits of a gate's id a person is shown (and may type).
SHORT_ID_DIGITS: Final = 8

#: How many candidates an ambiguous prefix names.
_CANDIDATES: Final = 10

_HEX: Final = re.compile(r"[0-9a-f]{1,32}")

#: A gate's kind, by its own name or the condition the report calls it.
GATE_KINDS: Final = {
    GATE_DELIVERY_EXHAUSTED: GATE_DELIVERY_EXHAUSTED,
    Condition.POISON.value: GATE_DELIVERY_EXHAUSTED,
    GATE_BUS_DEAD_LETTERED: GATE_BUS_DEAD_LETTERED,
    Condition.DEAD_LETTER.value: GATE_BUS_DEAD_LETTERED,
}

VOCABULARY: Final = {
    "condition": [c.value for c in Condition],
    "action": [a.value for a in Action],
    "source": [s.value for s in Source],
}


def project_name(project_id: object, *, wide: bool = False) -> str:
    """A project as the outputs show it: ``fleet`` for the fleet's stream, else its first 8
    hex (its whole id when ``wide``)."""
    if str(project_id) == str(FLEET_PROJECT_ID):
        return FLEET
    return str(project_id) if wide else str(project_id)[:8]


def choose(what: str, value: str, known: Iterable[str]) -> str:
    """``value`` if it is one of ``known``; else a ``GateError`` naming the nearest and all."""
    names = list(known)
    if value in names:
        return value
    near = difflib.get_close_matches(value.lower(), [n.lower() for n in names], n=1)
    hint = f"did you mean {names[[n.lower() for n in names].index(near[0])]}? " if near else ""
    raise GateError(f"no {what} {value!r}: {hint}one of {', '.join(names)}")


def argument(check: Callable[[str], str]) -> Callable[[str], str]:
    """``check`` as an argparse type: its ``GateError`` a usage error (exit 2)."""

    def checked(value: str) -> str:
        try:
            return check(value)
        except GateError as exc:
            raise ArgumentTypeError(str(exc)) from None

    return checked


def gate_kind(value: str) -> str:
    """A gate kind as typed (``poison`` or ``dead_letter`` as the report says them)."""
    return GATE_KINDS[choose("gate kind", value, GATE_KINDS)]


def project_text(text: str) -> str:
    """``text`` if it can name a project (``fleet``, an id or a prefix), else ``GateError``."""
    if text.strip().lower() != FLEET and _id_range(text) is None:
        raise GateError(f"not a project id, a prefix of one, or {FLEET}: {text!r}")
    return text


async def resolve_project(store: JobQueue, text: str) -> UUID:
    """The project ``text`` names: ``fleet``, a whole id, or a unique prefix of a stream's id
    in the ledger."""
    if text.strip().lower() == FLEET:
        return FLEET_PROJECT_ID
    low, high = _id_range(project_text(text)) or (FLEET_PROJECT_ID, FLEET_PROJECT_ID)
    if low == high:
        return low
    found = await store.streams_between(low, high, _CANDIDATES + 1)
    if not found:
        raise GateError(f"no project in the ledger has an id starting {text.strip()!r}")
    return _one("project", text, found)


async def resolve_object(store: JobQueue, text: str) -> str:
    """The event object ``text`` names: a job by its whole id or a unique prefix of it, else
    ``text`` itself (a queue's name)."""
    low_high = _id_range(text)
    if low_high is None:
        return text
    low, high = low_high
    if low == high:
        return str(low)
    found = await store.jobs_between(low, high, _CANDIDATES + 1)
    return str(_one("job", text, found)) if found else text


def _one(what: str, text: str, found: list[UUID]) -> UUID:
    if len(found) == 1:
        return found[0]
    shown = ", ".join(str(f) for f in found[:_CANDIDATES])
    more = " and more" if len(found) > _CANDIDATES else ""
    raise GateError(
        f"{text.strip()!r} names more than one {what}: {shown}{more}; type more of the id"
    )


def _id_range(text: str) -> tuple[UUID, UUID] | None:
    """The ids a hex prefix (dashes anywhere) stands for, lowest and highest; None if it is
    not one."""
    digits = text.strip().lower().replace("-", "")
    if _HEX.fullmatch(digits) is None:
        return None
    return UUID(digits.ljust(32, "0")), UUID(digits.ljust(32, "f"))


def short_id(gate_id: UUID) -> str:
    """The first hex digits of a gate's id: what ``gates list`` shows and a person types."""
    return gate_id.hex[:SHORT_ID_DIGITS]


def gate_id_range(prefix: str) -> tuple[UUID, UUID]:
    """The ids a gate id or prefix of one (hex, dashes anywhere) stands for, lowest and
    highest, so a prefix is looked up on the primary key; ``GateError`` for what is not one."""
    found = _id_range(prefix)
    if found is None:
        raise GateError(
            f"not a gate id or a prefix of one (hex digits, e.g. the 8 `gates list` shows): "
            f"{prefix!r}"
        )
    return found


async def find_gate(store: JobQueue, named: UUID | str) -> Gate:
    """The gate ``named`` (its id, or any unique prefix of it), or a :class:`GateError`: no
    such gate, or a prefix several gates share (naming them)."""
    if isinstance(named, UUID):
        low = high = named
    else:
        low, high = gate_id_range(named)
    found = await store.gates_between(low, high, _CANDIDATES + 1)
    if not found:
        what = low if low == high else f"with an id starting {str(named).strip()!r}"
        raise GateError(f"gate {what} does not exist")
    if len(found) > 1:
        shown = ", ".join(f"{g.id} ({g.kind}, raised {utc(g.created_at)})" for g in found)
        more = " and more" if len(found) > _CANDIDATES else ""
        raise GateError(
            f"{str(named).strip()!r} names more than one gate: {shown}{more}; type more of the id"
        )
    return found[0]
