"""The quorum queues' tick on the test nodes.

A quorum queue reports its figures (depth, consumers, the policy in force) on its own tick,
every 5 s by default. ``scripts/services`` sets every test node's ``quorum_tick_interval`` to
1 s in its ``advanced.config``, so tests wait less for those figures. A queue keeps the tick in
force when it was declared: :func:`default_tick` declares under RabbitMQ's default, for a test
that measures what the default tick costs the reaper.
"""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.holders import rabbitmqctl
from tests.support.services import BrokerUnderTest

#: The test nodes' tick (``TEST_QUORUM_TICK_MS`` in ``scripts/services``).
TEST_QUORUM_TICK_MS = 1000
#: RabbitMQ's own default (``?TICK_TIMEOUT`` in ``rabbit_quorum_queue``), what production runs.
DEFAULT_QUORUM_TICK_MS = 5000
#: If the test process dies inside a window, the node restores the test tick itself this much
#: later.
WINDOW_SAFETY_MS = 10_000


def tick_in_force(broker: BrokerUnderTest) -> str:
    return rabbitmqctl(broker, "eval", "application:get_env(rabbit, quorum_tick_interval).")


@contextlib.contextmanager
def default_tick(broker: BrokerUnderTest) -> Iterator[None]:
    """Quorum queues declared inside the block tick every 5 s, as in production, for as long as
    they live. Keep the block to declaring: any quorum queue declared meanwhile on the node
    takes the default too (it only reports more slowly)."""
    test_tick = f"{{ok,{TEST_QUORUM_TICK_MS}}}"
    port = broker.management_url.rsplit(":", 1)[-1].strip("/")
    path = Path(tempfile.gettempdir()) / f"queue-reaper-quorum-tick-{port}.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            assert tick_in_force(broker) == test_tick, "the node does not hold the test tick"
            try:
                rabbitmqctl(
                    broker,
                    "eval",
                    f"application:set_env(rabbit, quorum_tick_interval, "
                    f"{DEFAULT_QUORUM_TICK_MS}), "
                    f"timer:apply_after({WINDOW_SAFETY_MS}, application, set_env, "
                    f"[rabbit, quorum_tick_interval, {TEST_QUORUM_TICK_MS}]).",
                )
                yield
            finally:
                rabbitmqctl(
                    broker,
                    "eval",
                    f"application:set_env(rabbit, quorum_tick_interval, {TEST_QUORUM_TICK_MS}).",
                )
            assert tick_in_force(broker) == test_tick
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
