"""Items split by what a finder finds in each: those it finds something in, and the rest.

Such as the queues a verification cannot read now (each with why) and those it can."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["split_found"]

T = TypeVar("T")
F = TypeVar("F")


def split_found(
    items: Iterable[T], find: Callable[[T], F | None]
) -> tuple[list[tuple[T, F]], list[T]]:
    """Each item ``find`` finds something in, with what it found; then each item it finds
    nothing in (None). Both in the items' order."""
    found: list[tuple[T, F]] = []
    rest: list[T] = []
    for item in items:
        what = find(item)
        if what is None:
            rest.append(item)
        else:
            found.append((item, what))
    return found, rest
