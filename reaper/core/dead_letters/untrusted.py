"""Untrusted text shown to a person: quoted, escaped and cut.

Untrusted text shown to a person: a dead letter's headers and body, a broker's queue
names. Quoted, escaped, cut: no value a publisher wrote can forge a line of a report, move a
terminal's cursor or run past its allowance. Pure.
"""

from __future__ import annotations

import json

__all__ = ["CUT_MARKER", "UNTRUSTED_LIMIT", "quote_untrusted"]

#: Untrusted values are shown cut to this many characters (after escaping).
UNTRUSTED_LIMIT = 200

#: Appended (outside the quotes) to a value that was cut.
CUT_MARKER = "…"


def quote_untrusted(value: object, limit: int = UNTRUSTED_LIMIT) -> str:
    """A value from a message, safe for a terminal and a log line.

    A string is shown in double quotes with backslash escapes; any other value (a number, a
    list, a table) bare, as compact JSON, escaped the same way; None as ``(none)``. Every
    character that is not printable (controls, format and bidirectional marks, separators
    other than the space, surrogates, unassigned code points) is escaped (``\\n``, ``\\x1b``,
    ``\\u202e``). The escaped text is cut to ``limit`` characters, never inside an escape,
    and ``…`` after it says it was cut: the result is at most ``limit + 3`` characters.
    """
    if value is None:
        return "(none)"
    limit = max(0, limit)
    quoted = isinstance(value, str)
    text = value if isinstance(value, str) else _plain_text(value)
    pieces: list[str] = []
    used = 0
    cut = False
    for char in text:
        piece = _escape(char, quoted)
        if used + len(piece) > limit:
            cut = True
            break
        pieces.append(piece)
        used += len(piece)
    shown = "".join(pieces)
    if quoted:
        shown = f'"{shown}"'
    return shown + CUT_MARKER if cut else shown


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str, quoted: bool) -> str:
    if quoted and char in '"\\':
        return "\\" + char
    if char.isprintable():
        return char
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _plain_text(value: object) -> str:
    """A non-string header value as text. Never raises: what cannot be rendered is named."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        try:
            return repr(value)
        except ValueError:  # an integer past the interpreter's digit limit
            return f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else "?"
    if isinstance(value, bytes | bytearray):
        return repr(bytes(value))
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_unrenderable)
    except (ValueError, TypeError, RecursionError):
        return f"<{type(value).__name__}>"


def _unrenderable(value: object) -> str:
    return f"<{type(value).__name__}>"
