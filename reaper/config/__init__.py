"""The declared configuration (SPEC §2): ``conf.d/*.toml`` drop-ins under a ``REAPER_``
environment overlay, every key validated, every value traceable to where it came from.

Nothing is guessed. A typo is an unknown key, not a silent default; a wrong type, an
out-of-range number, a regex that does not compile or owns another system's queues, a URL
with a password in it: each is a problem that names the key, the value and why, and
:func:`load_config` reports all of them at once in one :class:`~reaper.errors.ConfigError`.

- :mod:`~reaper.config.model`: every key, its default, its bounds and why (``Settings``);
- :mod:`~reaper.config.sources`: the drop-ins and the environment;
- :mod:`~reaper.config.provenance`: where each value came from;
- :mod:`~reaper.config.problems`: a problem as an operator reads it;
- :mod:`~reaper.config.loading`: :func:`load_config` and :func:`show`.
"""

from reaper.config.loading import (
    CONFIG_DIR_VARIABLE,
    DEFAULT_CONFIG_DIRS,
    load_config,
    resolve_config_dir,
    show,
)
from reaper.config.model import (
    FOREIGN_QUEUE_NAMES,
    BusSettings,
    DatabaseSettings,
    QueueReapSettings,
    QueueSettings,
    Settings,
)
from reaper.config.provenance import ConfigValue, LoadedConfig

__all__ = [
    "CONFIG_DIR_VARIABLE",
    "DEFAULT_CONFIG_DIRS",
    "FOREIGN_QUEUE_NAMES",
    "BusSettings",
    "ConfigValue",
    "DatabaseSettings",
    "LoadedConfig",
    "QueueReapSettings",
    "QueueSettings",
    "Settings",
    "load_config",
    "resolve_config_dir",
    "show",
]
