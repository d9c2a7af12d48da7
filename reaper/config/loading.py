"""Loading the configuration: the layers overlaid and validated, every problem at once.

Loading the configuration: find the drop-ins, overlay the environment, validate every key,
and report every problem at once (SPEC §2).

Precedence, lowest first: the code defaults, the drop-ins in lexical order (a later file
overrides an earlier one key by key), then the environment. No password ever appears in a
message, a ``repr`` or :func:`show`: passwords are ``SecretStr``, a URL or DSN carrying one is
refused without being echoed, every problem is scrubbed of the passwords found in the input,
and a successful load registers the configured passwords with
:func:`reaper.errors.register_secret` so that every later error is scrubbed too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError, create_model
from pydantic_settings import SettingsError

from reaper.config.model import Settings
from reaper.config.problems import describe, unknown_variables
from reaper.config.provenance import (
    LEAVES,
    SECRET_KEYS,
    URL_KEYS,
    ConfigValue,
    LoadedConfig,
    Origins,
)
from reaper.config.secrets import (
    SECRET_PATHS,
    SECRETS_DIR_VARIABLE,
    SecretsDir,
    read_secrets_dir,
)
from reaper.config.sources import EnvironSource, KeyPath, overlay, read_drop_ins, walk
from reaper.errors import ConfigError, register_secret, scrub

__all__ = [
    "CONFIG_DIR_VARIABLE",
    "DEFAULT_CONFIG_DIRS",
    "load_config",
    "resolve_config_dir",
    "show",
]

#: Names the directory of drop-ins; not itself a setting.
CONFIG_DIR_VARIABLE: Final = "REAPER_CONFIG_DIR"
#: Where drop-ins are looked for when neither ``--config-dir`` nor ``REAPER_CONFIG_DIR`` says.
DEFAULT_CONFIG_DIRS: Final = (Path("conf.d"), Path("/etc/queue-reaper/conf.d"))


def resolve_config_dir(
    explicit: Path | None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """Where the drop-ins are: ``--config-dir`` (must exist), else ``REAPER_CONFIG_DIR``
    (must exist), else ``./conf.d`` or ``/etc/queue-reaper/conf.d`` if present, else None:
    the environment alone configures everything."""
    environ = os.environ if environ is None else environ
    if explicit is not None:
        return _named_dir(Path(explicit), "--config-dir")
    if environ.get(CONFIG_DIR_VARIABLE):
        return _named_dir(Path(environ[CONFIG_DIR_VARIABLE]), CONFIG_DIR_VARIABLE)
    return next((path for path in DEFAULT_CONFIG_DIRS if path.is_dir()), None)


def _named_dir(path: Path, how: str) -> Path:
    # A directory someone named and that is not there is a mistake, not environment-only mode.
    if not path.is_dir():
        why = "is not a directory" if path.exists() else "does not exist"
        raise ConfigError([f"{how} {path} {why}"])
    return path


def load_config(
    config_dir: Path | None = None, environ: Mapping[str, str] | None = None
) -> LoadedConfig:
    """Read the drop-ins under the environment, validate everything, and return the settings
    with each value's origin.

    ``config_dir`` is ``--config-dir``: when None, the directory is found as
    :func:`resolve_config_dir` says, and with none found the environment alone configures
    everything. ``environ`` defaults to the process environment.

    Raises :class:`ConfigError` carrying every problem found, never only the first.
    """
    environ = dict(os.environ if environ is None else environ)
    problems: list[str] = []
    try:
        config_dir = resolve_config_dir(config_dir, environ)
    except ConfigError as exc:
        problems.extend(exc.problems)
        config_dir = None

    drop_ins = read_drop_ins(config_dir)
    problems.extend(drop_ins.problems)
    secrets = _secrets_in(drop_ins.merged)
    try:
        env_data = EnvironSource(Settings, environ)()
    except (SettingsError, ValueError) as exc:
        problems.append(f"the REAPER_ environment cannot be read: {exc}")
        env_data = {}
    secrets |= _secrets_in(env_data)
    problems.extend(
        unknown_variables(environ, frozenset({CONFIG_DIR_VARIABLE, SECRETS_DIR_VARIABLE}))
    )
    origins = Origins(env_data, environ, drop_ins.merged, drop_ins.origins)
    secrets_dir = read_secrets_dir(environ, _secrets_taken(env_data, drop_ins.merged))
    problems.extend(secrets_dir.problems)
    secrets |= _secrets_in(secrets_dir.values)

    settings: Settings | None = None
    try:
        settings = _validated(drop_ins.merged, secrets_dir.values, env_data)
    except ValidationError as exc:
        problems.extend(describe(error, origins) for error in exc.errors(include_url=False))
    except (SettingsError, ValueError) as exc:
        problems.append(f"the configuration cannot be assembled: {exc}")

    if problems or settings is None:
        unique = list(dict.fromkeys(scrub(p, secrets) for p in problems))
        raise ConfigError(unique or ["the configuration cannot be assembled"])

    register_secret(settings.bus.password.get_secret_value())
    if settings.database.password is not None:
        register_secret(settings.database.password.get_secret_value())
    values = tuple(
        ConfigValue(
            ".".join(path),
            _value_at(settings, path),
            _secret_origin(settings, path, secrets_dir) or origins.of(path),
        )
        for path in LEAVES
    )
    return LoadedConfig(
        settings=settings, config_dir=config_dir, files=drop_ins.files, values=values
    )


_SECTIONS: Final[dict[str, Any]] = {
    name: (info.annotation, info) for name, info in Settings.model_fields.items()
}

#: ``Settings`` as a plain model, its sections as strict and closed, validated from the layers
#: a load read and from nothing else: not the process environment, and no drop-in's top-level
#: key taken for one of pydantic-settings' ``_``-options, as a keyword argument would be.
#: ``Settings`` keeps no rule of its own beyond these: every check lives in a section.
_Layers: Final[type[BaseModel]] = create_model(
    "Settings", __config__=ConfigDict(extra="forbid", frozen=True), **_SECTIONS
)


def _validated(*layers: Mapping[str, Any]) -> Settings:
    """The layers, lowest first (drop-ins, secrets directory, environment), validated as one:
    a table merges key by key, any other value replaces."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = overlay(merged, layer)
    checked = _Layers.model_validate(merged)
    fields = {name: getattr(checked, name) for name in Settings.model_fields}
    return Settings.model_construct(checked.model_fields_set, **fields)


def show(loaded: LoadedConfig, *, masked: bool = True) -> list[ConfigValue]:
    """Every leaf key with its effective value and origin; passwords ``***`` unless
    ``masked=False``."""
    shown = []
    for item in loaded.values:
        value = item.value
        if isinstance(value, SecretStr):
            value = "***" if masked else value.get_secret_value()
        shown.append(ConfigValue(item.key, value, item.origin))
    return shown


def _secrets_taken(env: Mapping[str, Any], files: Mapping[str, Any]) -> dict[KeyPath, bool]:
    """The secret keys the environment or a ``password_file`` already sets: the secrets
    directory is not read for them (a password set twice would be refused as ambiguous)."""
    taken: dict[KeyPath, bool] = {}
    for section in ("bus", "database"):
        env_section = env.get(section)
        file_section = files.get(section)
        given = [s for s in (env_section, file_section) if isinstance(s, Mapping)]
        taken[(section, "password")] = any(
            s.get("password") is not None or s.get("password_file") is not None for s in given
        )
    return taken


def _secret_origin(settings: Settings, path: KeyPath, secrets_dir: SecretsDir) -> str | None:
    """Where a password read from a file came from: ``file:<path>`` named by
    ``password_file``, or ``secret:<path>`` in the secrets directory."""
    if path not in SECRET_PATHS:
        return None
    section = getattr(settings, path[0])
    if section.password_file is not None:
        return f"file:{section.password_file} (named by {path[0]}.password_file)"
    return secrets_dir.origins.get(path)


def _value_at(settings: Settings, path: KeyPath) -> object:
    value: Any = settings
    for name in path:
        value = getattr(value, name)
    return list(value) if isinstance(value, list) else value


def _secrets_in(data: Mapping[str, Any]) -> set[str]:
    """Every password an input holds, so that no problem can echo one."""
    found: set[str] = set()
    for path, value in walk(data):
        key = ".".join(path)
        if key in SECRET_KEYS and value is not None and not isinstance(value, Mapping):
            text = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
            found.add(text)
        elif key in URL_KEYS:
            for url in value if isinstance(value, list) else [value]:
                if not isinstance(url, str):
                    continue
                try:
                    parts = urlsplit(url)
                    found.add(parts.password or "")
                    for k, vs in parse_qs(parts.query).items():
                        if k.lower() == "password":
                            found.update(vs)
                except ValueError:
                    pass
    found.discard("")
    return found
