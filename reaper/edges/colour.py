"""Colour for a person at a terminal, and only there.

Colour for a person at a terminal, and only there: never in a pipe, a file or a test's
capture, never with ``NO_COLOR`` set (no-color.org), never on a ``dumb`` terminal. What is
coloured is the standing alone (``OK`` green, ``WARN`` yellow, ``NOT OK`` and ``FAIL`` red):
the words stay the same, so what is read without colour says everything."""

from __future__ import annotations

import os
import re
from typing import Final, TextIO

__all__ = ["enabled", "report", "standing"]

_CODES: Final = {"green": "32", "yellow": "33", "red": "31"}
_WORDS: Final = {"OK": "green", "WARN": "yellow", "FAIL": "red", "NOT OK": "red"}
#: The report's header: the standing after the colon (``OK``, ``OK, 3 findings``, ``NOT OK: ...``).
_HEADER: Final = re.compile(r"^(queue-reaper [^:]+: )(NOT OK|OK)")


def enabled(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal a person reads, and nothing asks for no colour."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _paint(word: str) -> str:
    return f"\033[{_CODES[_WORDS[word]]}m{word}\033[0m"


def standing(word: str, stream: TextIO) -> str:
    """``word`` (``OK``, ``WARN``, ``FAIL``, ``NOT OK``) in its colour where ``stream`` takes it."""
    return _paint(word) if word in _WORDS and enabled(stream) else word


def report(text: str, stream: TextIO) -> str:
    """The report with its header's standing in colour where ``stream`` takes it."""
    if not enabled(stream):
        return text
    head, sep, rest = text.partition("\n")
    return _HEADER.sub(lambda m: m.group(1) + _paint(m.group(2)), head, count=1) + sep + rest
