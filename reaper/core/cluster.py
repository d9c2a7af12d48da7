"""Where a queue lives in a cluster, and whether it can be measured now (SPEC §10), purely.

Measured on a three-node RabbitMQ 4.3.6 cluster with one node's app stopped: a queue whose
node is gone is listed with ``state: "down"`` (classic and quorum alike) and without its
statistics and policy fields (absent, not zero); a quorum queue that lost its majority is
``"minority"``, and its ``leader`` can name a stopped node; a quorum queue that keeps a majority
elects a new leader within a second and stays ``running``. ``/api/nodes`` lists a stopped node
with ``running: false``. A queue that cannot be measured is unreadable: nothing is concluded
from it, neither a finding nor that an earlier finding has cleared.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from reaper.core.domain import BrokerNode, QueueStats

__all__ = ["SERVING_STATES", "node_summary", "queue_unavailable", "stopped_nodes"]

#: The states in which a queue serves, as RabbitMQ lists them: ``running``, or ``flow`` for a
#: classic queue under flow control (``idle`` too, where a version lists a hibernating classic
#: queue so). Any other state (``down``, ``minority``, ``stopped``, ``crashed``, ...) is a
#: queue that cannot be measured. A queue listed with no state (LavinMQ) is judged by its
#: statistics alone.
SERVING_STATES: Final = frozenset({"running", "flow", "idle"})


def stopped_nodes(nodes: Iterable[BrokerNode] | None) -> frozenset[str]:
    """The nodes listed as not running (none when the nodes could not be read)."""
    return frozenset(n.name for n in nodes or () if not n.running)


def queue_unavailable(queue: QueueStats, nodes: Iterable[BrokerNode] | None) -> str | None:
    """Why ``queue`` cannot be measured now, or None when it can.

    A queue listed in a state that does not serve; a replicated queue (one that lists its
    members) with no majority of its members online, or whose leader is not among them; a
    queue whose node is listed as not running. A queue that merely lacks its statistics on a
    running node is not unavailable: it is new, or a quorum queue whose leader just changed,
    and its counts are unknown (``counts_known``), which concludes nothing either.
    """
    stopped = stopped_nodes(nodes)
    node = queue.node
    where = ""
    if node:
        where = f" on node {node}" + (", which is not running" if node in stopped else "")
    if queue.state is not None and queue.state not in SERVING_STATES:
        return f"listed {queue.state!r}{where}"
    if queue.members and queue.online is not None:
        members = set(queue.members)
        online = members & set(queue.online)
        if 2 * len(online) <= len(members):
            return (
                f"only {len(online)} of its {len(members)} members online: no majority"
                f"{', leader ' + node if node else ''}"
            )
        if node and node not in online:
            return f"its leader {node} is not among its members online"
    if node and node in stopped:
        return f"its node {node} is not running"
    return None


def node_summary(nodes: Iterable[BrokerNode]) -> str:
    """The nodes as a person reads them: ``qr1@h running, qr2@h NOT running``."""
    return ", ".join(f"{n.name} {'running' if n.running else 'NOT running'}" for n in nodes)
