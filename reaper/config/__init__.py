"""The declared configuration: drop-ins under an environment overlay, every key validated.

The declared configuration (SPEC §2): ``conf.d/*.toml`` drop-ins under a ``REAPER_``
environment overlay, every key validated, every value traceable to where it came from.

Nothing is guessed. A typo is an unknown key, not a silent default; a wrong type, an
out-of-range number, a regex that does not compile or owns another system's queues, a URL
with a password in it: each is a problem that names the key, the value and why, and
:func:`load_config` reports all of them at once in one :class:`~reaper.errors.ConfigError`.
Its modules are named in ``docs/architecture.md``.
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
