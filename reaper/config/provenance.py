"""Where each effective value came from: a default, a drop-in, or the environment.

Where each effective value came from: a default, a drop-in, or the environment
(``reaper config show``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

from reaper.config.model import Settings
from reaper.config.sources import ENV_DELIMITER, ENV_PREFIX, KeyPath, walk

__all__ = [
    "LEAVES",
    "SECRET_KEYS",
    "TABLES",
    "URL_KEYS",
    "ConfigValue",
    "LoadedConfig",
    "Origins",
]


@dataclass(frozen=True)
class ConfigValue:
    """One leaf key, its effective value and where it came from.

    ``origin`` is ``"default"``, ``"file:<path>"`` or ``"env:REAPER_..."``. A password's
    ``value`` is a ``SecretStr`` (or None) in :class:`LoadedConfig`, and ``"***"`` from
    :func:`reaper.config.show` unless asked unmasked.
    """

    key: str
    value: object
    origin: str


@dataclass(frozen=True)
class LoadedConfig:
    settings: Settings
    config_dir: Path | None
    #: The drop-ins read, in the order they were applied.
    files: tuple[Path, ...]
    #: Every leaf key, in declaration order, with its origin.
    values: tuple[ConfigValue, ...]

    def origin(self, key: str) -> str:
        return next(v.origin for v in self.values if v.key == key)


def _leaf_fields(
    model: type[BaseModel], prefix: KeyPath = ()
) -> Iterator[tuple[KeyPath, tuple[type[BaseModel], str]]]:
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaf_fields(annotation, (*prefix, name))
        else:
            yield (*prefix, name), (model, name)


#: Every leaf key's path, with the section model that declares it and its field name.
LEAVES: Final = dict(_leaf_fields(Settings))
SECRET_KEYS: Final = frozenset({"bus.password", "database.password"})
URL_KEYS: Final = frozenset({"bus.management_url", "bus.management_urls", "database.dsn"})
TABLES: Final = ("queue.reap", "bus", "database")


def _env_var(path: KeyPath, environ: Mapping[str, str]) -> str:
    """The variable that set ``path``: the longest ``REAPER_A__B`` prefix present."""
    present = {k.lower(): k for k in environ}
    for end in range(len(path), 0, -1):
        name = ENV_PREFIX + ENV_DELIMITER.join(path[:end])
        if name.lower() in present:
            return present[name.lower()]
    return (ENV_PREFIX + ENV_DELIMITER.join(path)).upper()


class Origins:
    """Where each key path came from: the environment over the files over the defaults."""

    def __init__(
        self,
        env: Mapping[str, Any],
        environ: Mapping[str, str],
        merged: Mapping[str, Any],
        files: Mapping[KeyPath, str],
    ) -> None:
        self._env = [path for path, value in walk(env) if not isinstance(value, Mapping)]
        self._environ = environ
        self._files = files
        self._tables = {path for path, value in walk(merged) if isinstance(value, Mapping)}

    def of(self, path: KeyPath) -> str:
        for leaf in self._env:
            if path[: len(leaf)] == leaf or leaf[: len(path)] == path:
                return f"env:{_env_var(leaf, self._environ)}"
        if path in self._files:
            return self._files[path]
        # A value set where a table was expected (``queue = 5``) is where its keys came from.
        for end in range(len(path) - 1, 0, -1):
            if path[:end] in self._files and path[:end] not in self._tables:
                return self._files[path[:end]]
        return "default"
