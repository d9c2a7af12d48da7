"""Text for a terminal: the one function every text output goes through, and its rows.

Pure (SPEC §11); rows are laid out under a header. A queue name, a header, an answer's ``--by``
reach a person's screen inside the reaper's own lines. A character that drives the terminal
instead of showing (ESC and every other C0 and C1 control, DEL, the bidirectional controls that
reorder what follows, a lone surrogate a terminal cannot encode) is shown escaped, ``\\x1b`` and
``\\u202e``: nobody who may declare a queue can clear the on-call person's screen or forge a
line of a report. JSON keeps the exact value; HTML escapes markup and these alike. The newline,
which ends the reaper's own lines, is shown as ``\\n`` by :func:`one_line` where a value is put
into one of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

__all__ = ["first_few", "for_terminal", "one_line", "table"]

#: C0 controls but the newline that ends a line, DEL and C1, the bidi embeddings, overrides
#: and isolates (U+202A to U+202E, U+2066 to U+2069), and lone surrogates.
_DRIVES_THE_TERMINAL: Final = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


T = TypeVar("T")

#: How many items a line names before it counts the rest.
_FEW: Final = 5


def first_few(items: Sequence[T], show: Callable[[T], str] = str) -> str:
    """The first five of ``items``, each as ``show`` writes it, comma-separated, then how many
    more: a line that names a few of thousands (a stopped node's queues) stays one line."""
    rest = len(items) - _FEW
    return ", ".join(show(i) for i in items[:_FEW]) + (f" and {rest:,} more" if rest > 0 else "")


def for_terminal(text: str) -> str:
    """``text`` with every character that would drive a terminal shown escaped; newlines
    kept (they end the lines the caller wrote)."""
    return _DRIVES_THE_TERMINAL.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def one_line(text: str) -> str:
    """``text`` to be put into one line: every newline shown as ``\\n`` (a carriage return is
    shown as ``\\x0d`` by :func:`for_terminal`). JSON keeps the exact value."""
    return text.replace("\n", "\\n")


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows under a header row, each column as wide as its widest cell (the last unpadded)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(r, widths, strict=False)), r[-1]])
        for r in [header, *rows]
    ]
