"""queue-reaper's public face: what workers and programs import, loaded on first use.

A declarative reaper and broker-policy reconciler for job queues kept in PostgreSQL and
dispatched through RabbitMQ (the CLI is ``reaper``)::

    from reaper import QueueReaper, load_config, reap_once

    reaper = QueueReaper.from_config()      # ConfigError here, at start-up, if invalid
    run = await reaper.run_if_due()          # in a worker's idle loop; never raises
    result = await reap_once(load_config().settings, dry_run=True)  # result.problems()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from reaper.version import __version__

if TYPE_CHECKING:
    from reaper.config import LoadedConfig, Settings, load_config
    from reaper.edges.hook import HookRun, QueueReaper
    from reaper.errors import (
        BrokerRefused,
        BrokerUnavailable,
        ConfigError,
        GateError,
        ReaperError,
        SourceUnreadable,
        StoreUnavailable,
    )
    from reaper.reap.result import PassResult, Problem
    from reaper.reap.run import reap_once, run_pass

__all__ = [
    "BrokerRefused",
    "BrokerUnavailable",
    "ConfigError",
    "GateError",
    "HookRun",
    "LoadedConfig",
    "PassResult",
    "Problem",
    "QueueReaper",
    "ReaperError",
    "Settings",
    "SourceUnreadable",
    "StoreUnavailable",
    "__version__",
    "load_config",
    "reap_once",
    "run_pass",
]

#: Where each public name lives.
_HOMES = {
    "LoadedConfig": "reaper.config",
    "Settings": "reaper.config",
    "load_config": "reaper.config",
    "HookRun": "reaper.edges.hook",
    "QueueReaper": "reaper.edges.hook",
    "BrokerRefused": "reaper.errors",
    "BrokerUnavailable": "reaper.errors",
    "ConfigError": "reaper.errors",
    "GateError": "reaper.errors",
    "ReaperError": "reaper.errors",
    "SourceUnreadable": "reaper.errors",
    "StoreUnavailable": "reaper.errors",
    "PassResult": "reaper.reap.result",
    "Problem": "reaper.reap.result",
    "reap_once": "reaper.reap.run",
    "run_pass": "reaper.reap.run",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'reaper' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
