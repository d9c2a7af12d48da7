"""What PostgreSQL can store: the one escaping rule for untrusted strings, and its inverse.

Pure (SPEC §11). ``text`` holds no NUL, ``jsonb`` no ``\\u0000``, neither a lone surrogate;
RabbitMQ accepts all three in a name or a header. Each is stored as the escape a terminal shows
(``\\x00``, ``\\udc80``, as :func:`reaper.core.terminal.for_terminal`), the same every pass
(sightings, observations and quiet marks match across passes), and unambiguously: a backslash
that would begin such an escape (followed by a backslash, ``x00``, ``ud`` and a surrogate's hex,
or an escaped character) is doubled, so :func:`from_storage` gives back the exact value. Any
other string, ``C:\\jobs`` among them, is stored as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Final

__all__ = [
    "for_storage",
    "from_storage",
    "is_storable",
    "payload_for_storage",
    "payload_from_storage",
    "stored_escaped",
]

#: What needs escaping: NUL, a lone surrogate, and a backslash that would read as an escape.
_TO_ESCAPE: Final = re.compile(
    "\x00|[\ud800-\udfff]|\\\\(?=[\\\\\x00\ud800-\udfff]|x00|ud[89a-f][0-9a-f]{2})"
)
#: What :func:`for_storage` writes, read back.
_ESCAPED: Final = re.compile(r"\\(\\|x00|ud[89a-f][0-9a-f]{2})")
#: Any character that may need escaping: the fast test of a string that needs none.
_SUSPECT: Final = re.compile("[\x00\\\\\ud800-\udfff]")


def is_storable(text: str) -> bool:
    """Whether ``text`` is stored exactly as it is (:func:`for_storage` leaves it unchanged)."""
    return _SUSPECT.search(text) is None or _TO_ESCAPE.search(text) is None


def for_storage(text: str) -> str:
    """``text`` as PostgreSQL stores it: NUL as ``\\x00``, a lone surrogate as ``\\udXXX``, and
    a backslash that would begin such an escape doubled; anything else unchanged."""
    if _SUSPECT.search(text) is None:
        return text
    return _TO_ESCAPE.sub(_escape, text)


def from_storage(text: str) -> str:
    """The exact value :func:`for_storage` stored as ``text``."""
    if "\\" not in text:
        return text
    return _ESCAPED.sub(_unescape, text)


def payload_for_storage(payload: Mapping[str, object]) -> dict[str, object]:
    """A JSON payload with every string in it, keys as well, as :func:`for_storage` stores it."""
    return {for_storage(k): _each(v, for_storage) for k, v in payload.items()}


def payload_from_storage(payload: Mapping[str, object]) -> dict[str, object]:
    """The exact payload :func:`payload_for_storage` stored."""
    return {from_storage(k): _each(v, from_storage) for k, v in payload.items()}


def stored_escaped(names: Iterable[str]) -> list[str]:
    """What a report says of each name (once, in order) that a pass wrote escaped."""
    escaped = [n for n in dict.fromkeys(names) if not is_storable(n)]
    return [
        f"queue {n}: its name holds what PostgreSQL text cannot (NUL, a lone surrogate), so "
        "it is stored escaped, as a terminal shows it; nothing to do (--json shows the exact "
        "name)"
        for n in escaped
    ]


def _each(value: object, rule: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return rule(value)
    if isinstance(value, Mapping):
        return {rule(str(k)): _each(v, rule) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_each(v, rule) for v in value]
    return value


def _escape(match: re.Match[str]) -> str:
    found = match.group()
    if found == "\\":
        return "\\\\"
    code = ord(found)
    return f"\\x{code:02x}" if code == 0 else f"\\u{code:04x}"


def _unescape(match: re.Match[str]) -> str:
    escape = match.group(1)
    if escape == "\\":
        return "\\"
    return chr(int(escape[1:], 16))
