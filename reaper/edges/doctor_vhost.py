"""``reaper doctor``'s word on the vhost's queues, and where ours are when it holds none.

``reaper doctor``'s word on the vhost's queues: whether it holds any the owned pattern
matches, and when it holds none, which vhosts the user may read do (a reaper pointed at the
wrong vhost reads nothing of ours, and would otherwise learn it only as a count of 0)."""

from __future__ import annotations

from typing import Literal

from reaper.broker.client import ManagementClient
from reaper.config import Settings
from reaper.core.terminal import first_few
from reaper.errors import ReaperError

__all__ = ["owned_queues"]

#: A check's status, what was seen, and the fix.
Said = tuple[Literal["ok", "warn"], str, str]


async def owned_queues(client: ManagementClient, settings: Settings) -> Said:
    """``(status, detail, fix)``: ``ok`` with the count where the vhost holds owned queues,
    ``warn`` naming the vhosts that do where it holds none."""
    vhost, pattern = settings.bus.vhost, settings.queue.reap.owned_queue_pattern
    try:
        found = await client.queues_by_vhost(pattern)
    except ReaperError as exc:
        return "warn", f"not counted: {exc.reason}", "see the broker lines above"
    here = found.counts.get(vhost, 0)
    if here:
        return "ok", f"{here} queue(s) on {vhost!r} match the owned pattern '{pattern}'", ""
    others = sorted(
        ((v, n) for v, n in found.counts.items() if v != vhost),
        key=lambda item: (-item[1], item[0]),
    )
    if not others:
        return (
            "warn",
            f"no queue on {vhost!r} (nor on any vhost this user may read) matches the owned "
            f"pattern '{pattern}': a pass watches none of the broker's queues",
            "declare the queues, or set [queue.reap] owned_queue_pattern to match their names "
            f"(rabbitmqctl list_queues -p {vhost} name)",
        )
    named = first_few(others, lambda held: f"{held[0]!r} ({held[1]})")
    best = others[0][0]
    return (
        "warn",
        f"no queue on {vhost!r} matches the owned pattern '{pattern}'; {named} hold such "
        f"queues: a pass on {vhost!r} watches none of them",
        f"if the reaper is meant for them, point it there: REAPER_BUS__VHOST={best} "
        f'(or [bus] vhost = "{best}")',
    )
