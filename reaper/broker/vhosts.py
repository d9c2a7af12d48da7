"""Which vhosts hold queues a pattern matches, asked when the pass's own vhost holds none.

``GET /api/vhosts`` (the vhosts the user may read), then each vhost's queues filtered by the
broker (``use_regex``, one page of names): its ``filtered_count`` where every name on the page
matches here too, else the names that do (a broker that ignores the filter, or reads the
pattern otherwise, counts no queue the pattern does not match). A few vhosts at once, for
:data:`VHOST_COUNT_SECONDS` in all: a vhost of many thousand queues on a busy node answers in
seconds (measured: 3.5 s for 30,000 on a loaded 4.0 node) and holds up no other. A side
question: a node slow to answer it is not skipped for the pass's own requests, and what was
counted in time is returned, marked not complete.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from typing import Final

from reaper.broker.http import ManagementApi, api_path
from reaper.broker.port import QueuesByVhost
from reaper.core.values import whole
from reaper.errors import BrokerUnavailable

__all__ = ["VHOSTS_COUNTED", "VHOST_COUNT_SECONDS", "queues_by_vhost"]

#: The vhosts counted at most (a request each).
VHOSTS_COUNTED: Final = 200
#: How long the count may take in all.
VHOST_COUNT_SECONDS: Final = 5.0
#: Vhosts counted at once.
_AT_ONCE: Final = 4


async def queues_by_vhost(api: ManagementApi, pattern: str) -> QueuesByVhost:
    """How many queues whose names ``pattern`` matches each vhost the user may read holds."""
    skipped = dict(api.skipped)
    try:
        async with asyncio.timeout(VHOST_COUNT_SECONDS):
            listed = await api.request("GET", "/api/vhosts", params={"columns": "name"})
    except (TimeoutError, BrokerUnavailable):
        _restore(api, skipped)
        return QueuesByVhost({}, complete=False)
    rows = listed if isinstance(listed, list) else []
    vhosts = [v.get("name") for v in rows if isinstance(v, Mapping)]
    names = [v for v in vhosts if isinstance(v, str)]
    at_once = asyncio.Semaphore(_AT_ONCE)
    matches = re.compile(pattern).search

    async def count(vhost: str) -> tuple[int, bool]:
        async with at_once:
            return await _count_in(api, vhost, matches, pattern)

    tasks = {asyncio.ensure_future(count(v)): v for v in names[:VHOSTS_COUNTED]}
    done, pending = (
        await asyncio.wait(tasks, timeout=VHOST_COUNT_SECONDS) if tasks else (set(), set())
    )
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    _restore(api, skipped)
    complete = not pending and len(names) <= VHOSTS_COUNTED
    counts: dict[str, int] = {}
    for task in done:
        if task.exception() is not None:
            complete = False
            continue
        found, whole_page = task.result()
        complete = complete and whole_page
        if found:
            counts[tasks[task]] = found
    return QueuesByVhost(counts, complete)


def _restore(api: ManagementApi, skipped: Mapping[str, str]) -> None:
    api.skipped.clear()
    api.skipped.update(skipped)


async def _count_in(
    api: ManagementApi, vhost: str, matches: Callable[[str], object], pattern: str
) -> tuple[int, bool]:
    """The queues of ``vhost`` whose names match, and whether every one was counted."""
    path = api_path("queues", vhost)
    params: dict[str, str | int] = {
        "page": 1,
        "page_size": 100,  # the count is the broker's filtered_count: names to check
        "columns": "name",
        "name": pattern,
        "use_regex": "true",
    }
    try:
        answer = await api.request("GET", path, params=params)
    except BrokerUnavailable as exc:
        if exc.status in (401, 403):  # a vhost the user may not read: not named
            return 0, True
        raise
    items = answer.get("items") if isinstance(answer, Mapping) else answer
    page = items if isinstance(items, list) else []
    named = [i.get("name") for i in page if isinstance(i, Mapping)]
    found = sum(isinstance(n, str) and matches(n) is not None for n in named)
    filtered = whole(answer.get("filtered_count")) if isinstance(answer, Mapping) else None
    if found == len(named) and filtered is not None:
        return filtered, True  # the broker filtered as we do: its count is every page's
    more = isinstance(answer, Mapping) and (whole(answer.get("page_count")) or 1) > 1
    return found, not more
