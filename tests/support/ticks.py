"""The quorum queues' tick on the test nodes.

A quorum queue reports its figures (depth, consumers, the policy in force) on its own tick,
every 5 s by default. ``scripts/services`` sets every test node's ``quorum_tick_interval`` to
1 s in its ``advanced.config``, so tests wait less for those figures. A queue keeps the tick in
force when it was declared: :func:`default_tick` declares under RabbitMQ's default, for a test
that measures what the default tick costs the reaper.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.support.holders import node_lock, node_setting
from tests.support.services import BrokerUnderTest

#: The test nodes' tick (``TEST_QUORUM_TICK_MS`` in ``scripts/services``).
TEST_QUORUM_TICK_MS = 1000
#: RabbitMQ's own default (``?TICK_TIMEOUT`` in ``rabbit_quorum_queue``), what production runs.
DEFAULT_QUORUM_TICK_MS = 5000


@contextlib.contextmanager
def default_tick(broker: BrokerUnderTest) -> Iterator[None]:
    """Quorum queues declared inside the block tick every 5 s, as in production, for as long as
    they live. Keep the block to declaring: any quorum queue declared meanwhile on the node
    takes the default too (it only reports more slowly)."""
    with (
        node_lock(broker, "quorum-tick", exclusive=True),
        node_setting(broker, "quorum_tick_interval", DEFAULT_QUORUM_TICK_MS, TEST_QUORUM_TICK_MS),
    ):
        yield
