"""Where configuration comes from: ``conf.d/*.toml`` drop-ins and the ``REAPER_`` environment.

The environment is pydantic-settings' :class:`EnvSettingsSource` (prefix ``REAPER_``, nested
delimiter ``__``) through its documented hooks, given the mapping to read in place of
``os.environ`` so that a load is reproducible. Files are typed strictly (``"600"`` is not a
number, ``true`` is not one either); the environment is all strings, so its values are
converted to the declared type before the same strict validation (``=600`` is a number,
``=true`` is not; a list is a JSON array: ``REAPER_QUEUE__REAP__KNOWN_PHASES='["a","b"]'``).
The layers meet in :func:`overlay`, lowest first.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource

__all__ = [
    "ENV_DELIMITER",
    "ENV_PREFIX",
    "DropIns",
    "EnvironSource",
    "KeyPath",
    "overlay",
    "read_drop_ins",
    "walk",
]

ENV_PREFIX: Final = "REAPER_"
ENV_DELIMITER: Final = "__"

#: A key's path through the tables: ``("queue", "reap", "stale_ready_seconds")``.
KeyPath = tuple[str, ...]


class EnvironSource(EnvSettingsSource):
    """pydantic-settings' environment source reading ``environ`` rather than ``os.environ``,
    each string turned into the declared type before strict validation. Only its documented
    hooks are overridden: where a field's value is found, and how it is prepared."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        # as pydantic-settings keys the environment: lowercased unless case-sensitive
        self._environ: dict[str, str | None] = {
            (k if self.case_sensitive else k.lower()): v
            for k, v in environ.items()
            if not (self.env_ignore_empty and v == "")
        }

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = self.env_prefix + field_name
        return self._environ.get(name if self.case_sensitive else name.lower()), field_name, False

    def prepare_field_value(
        self, field_name: str, field: FieldInfo, value: Any, value_is_complex: bool
    ) -> Any:
        # A section (every field of Settings) is a JSON object, under its nested variables.
        if not (value_is_complex or self.field_is_complex(field)):
            return value
        nested = self.explode_env_vars(field_name, field, self._environ)
        if value is None:
            return nested or None
        decoded = self.decode_complex_value(field_name, field, value)
        return overlay(decoded, nested) if isinstance(decoded, dict) else decoded

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        # A value that is not JSON stays a string; validation then names the key and the type.
        try:
            return super().decode_complex_value(field_name, field, value)
        except ValueError:
            return value

    def __call__(self) -> dict[str, Any]:
        return _typed(self.settings_cls, super().__call__())


def _typed(model: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    """The environment's strings turned into the declared types, key by key."""
    typed: dict[str, Any] = {}
    for key, value in data.items():
        info = model.model_fields.get(key)
        annotation = info.annotation if info is not None else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            typed[key] = _typed(annotation, value) if isinstance(value, Mapping) else value
        elif isinstance(value, str) and annotation is not None:
            typed[key] = _from_env_string(annotation, value)
        else:
            typed[key] = value
    return typed


def _from_env_string(annotation: Any, value: str) -> Any:
    """The lax conversion pydantic itself makes ("600" -> 600, "false" -> False). What does not
    convert stays a string, and the strict validation names the key and the expected type."""
    try:
        converted = _adapter(annotation).validate_python(value)
    except (ValidationError, TypeError, ValueError):
        return value
    if isinstance(converted, bool) and annotation is not bool:
        return value
    return converted


@functools.cache
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def overlay(lower: Mapping[str, Any], higher: Mapping[str, Any]) -> dict[str, Any]:
    """``higher`` over ``lower``: a table merges key by key, anything else replaces."""
    merged = {key: _copy(value) for key, value in lower.items()}
    for key, value in higher.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, dict):
            merged[key] = overlay(below, value)
        else:
            merged[key] = _copy(value)
    return merged


# --------------------------------------------------------------------------- the drop-ins


@dataclass
class DropIns:
    """The drop-ins of one directory: the files read, in the order applied; their tables
    merged (a later key replaces an earlier one, a table merges key by key); which file set
    each key path; and every problem met reading them."""

    files: tuple[Path, ...] = ()
    merged: dict[str, Any] = field(default_factory=dict)
    origins: dict[KeyPath, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_drop_ins(config_dir: Path | None) -> DropIns:
    """Read every ``*.toml`` of ``config_dir`` in lexical order (dotfiles are editors' and
    tools' leftovers, never declarations). Never raises: a file that cannot be read or parsed
    is a problem, and the others are still read."""
    found = DropIns()
    if config_dir is None:
        return found
    try:
        names = sorted(p.name for p in config_dir.iterdir())
    except OSError as exc:
        found.problems.append(
            f"{config_dir}: cannot be listed: {exc.strerror or type(exc).__name__}"
        )
        return found
    files = []
    for name in names:
        path = config_dir / name
        if not name.endswith(".toml") or name.startswith(".") or not path.is_file():
            continue
        files.append(path)
        data = _parse(path, found.problems)
        if data is not None:
            _merge(found.merged, data, f"file:{path}", found.origins)
    found.files = tuple(files)
    return found


def _parse(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        problems.append(f"{path}: cannot be read: {exc.strerror or type(exc).__name__}")
    except UnicodeDecodeError as exc:
        problems.append(f"{path}: not UTF-8 (byte {exc.start}), so not TOML")
    except tomllib.TOMLDecodeError as exc:
        problems.append(f"{path}: not valid TOML: {exc}")
    except (ValueError, RecursionError) as exc:
        problems.append(f"{path}: not valid TOML: {type(exc).__name__}")
    return None


def walk(data: Mapping[str, Any], prefix: KeyPath = ()) -> Iterator[tuple[KeyPath, Any]]:
    """Every key path of a nested mapping, tables included, with its value."""
    for key, value in data.items():
        path = (*prefix, str(key))
        yield path, value
        if isinstance(value, Mapping):
            yield from walk(value, path)


def _merge(
    into: dict[str, Any], new: Mapping[str, Any], origin: str, origins: dict[KeyPath, str]
) -> None:
    """Deep-merge one drop-in into the merged data: a later key replaces an earlier one, a
    table is merged key by key. ``origins`` records which file set each path."""

    def merge(target: dict[str, Any], source: Mapping[str, Any], prefix: KeyPath) -> None:
        for key, value in source.items():
            path = (*prefix, key)
            if isinstance(value, Mapping) and isinstance(target.get(key), dict):
                origins.setdefault(path, origin)
                merge(target[key], value, path)
                continue
            for stale in [p for p in origins if p[: len(path)] == path]:
                del origins[stale]
            target[key] = _copy(value)
            origins[path] = origin
            if isinstance(value, Mapping):
                for sub, _ in walk(value, path):
                    origins[sub] = origin

    merge(into, new, ())


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
