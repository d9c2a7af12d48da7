"""The order the suite's tests are handed to pytest-xdist's workers in: the long tests first.

``--dist worksteal`` (the Makefile's) gives each of the N workers a contiguous share of the
collection, in order, and an idle worker steals the tail of the longest queue. A long test
collected late starts late, and the suite then waits for it alone: measured on two cores, the
three 70 s consumer-timeout tests of one broker version, collected side by side, ran one after
the other on one worker and ended the suite 50 s after every other worker had finished.
Here every test marked ``slow`` goes to the head of a share, round robin, so the long ones
start at once, side by side, and the short ones fill in around them.

Every worker computes the same order from the same collection (xdist refuses to run otherwise).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def share_sizes(total: int, workers: int) -> list[int]:
    """How many tests each worker's share holds, as worksteal cuts them (each takes what is
    left divided by the workers still to be served)."""
    sizes = []
    left = total
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def long_first(items: Sequence[T], is_long: Sequence[bool], workers: int) -> list[T]:
    """``items`` reordered so that the long ones head the workers' shares, round robin, each
    share then filled with the others in their collection order."""
    long = [item for item, flag in zip(items, is_long, strict=True) if flag]
    short = iter(item for item, flag in zip(items, is_long, strict=True) if not flag)
    shares: list[list[T]] = [[] for _ in range(workers)]
    for k, item in enumerate(long):
        shares[k % workers].append(item)
    for share, size in zip(shares, share_sizes(len(items), workers), strict=True):
        share.extend(itertools.islice(short, max(0, size - len(share))))
    ordered = [item for share in shares for item in share]
    ordered.extend(short)  # only when a share holds more long tests than its size
    return ordered
