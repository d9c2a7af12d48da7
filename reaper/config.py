"""The declared configuration (SPEC §2): ``conf.d/*.toml`` drop-ins under a ``REAPER_``
environment overlay, every key validated, every value traceable to where it came from.

Nothing is guessed. A typo is an unknown key, not a silent default; a wrong type, an
out-of-range number, a regex that does not compile or owns another system's queues, a URL
with a password in it: each is a problem that names the key, the value and why, and
:func:`load_config` reports all of them at once in one :class:`~reaper.errors.ConfigError`.

Precedence, lowest first: the code defaults below, the drop-ins in lexical order (a later file
overrides an earlier one key by key), then the environment. The environment overlay is
pydantic-settings' own (prefix ``REAPER_``, nested delimiter ``__``); the files reach
``Settings`` as one more settings source below it.

Files are typed strictly (``"600"`` is not a number, ``true`` is not one either); the
environment is all strings, so its values are converted to the declared type before the same
strict validation (``REAPER_QUEUE__REAP__STALE_READY_SECONDS=600`` is a number, ``=true`` is
not; a list is a JSON array: ``REAPER_QUEUE__REAP__KNOWN_PHASES='["build","test"]'``).

No password ever appears in a message, a ``repr`` or :func:`show`: passwords are
``SecretStr``, a URL or DSN carrying one is refused without being echoed, every problem is
scrubbed of the passwords found in the input, and a successful load registers the configured
passwords with :func:`reaper.errors.register_secret` so that every later error is scrubbed too.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
import tomllib
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import SplitResult, parse_qs, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from reaper.domain import Thresholds
from reaper.errors import ConfigError, register_secret, scrub

__all__ = [
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

ENV_PREFIX: Final = "REAPER_"
ENV_DELIMITER: Final = "__"
#: Names the directory of drop-ins; not itself a setting.
CONFIG_DIR_VARIABLE: Final = "REAPER_CONFIG_DIR"
#: Where drop-ins are looked for when neither ``--config-dir`` nor ``REAPER_CONFIG_DIR`` says.
DEFAULT_CONFIG_DIRS: Final = (Path("conf.d"), Path("/etc/queue-reaper/conf.d"))

#: Queues of other systems on a shared broker: Celery's default queue, a server-named queue,
#: an agent's inbox. An owned pattern matching one of them would reap what is not ours.
FOREIGN_QUEUE_NAMES: Final = ("celery", "amq.gen-JzTY20BRgKO-HjmUJj0wLg", "agent.x.inbox")

#: Varied queue names (short, so a careless pattern cannot backtrack for long). A pattern
#: matching every one of them is a catch-all. Queue names are never empty, so ``""`` is not
#: among them: ``.`` matches every real queue and is refused as a catch-all.
_PROBE_QUEUE_NAMES: Final = (
    "x",
    "Q",
    "7",
    "_",
    "-",
    ".",
    "celery",
    "zz.top",
    "amq.gen-abc",
    "agent.x.inbox",
    "vibey.jobs",
    "vibey.jobs.dlq",
    "vibey.wait.30s",
    "jobs.dead",
    "UPPER_CASE",
    "a b",
    "очередь",
    "队列",
    "ü-β.λ",
)

#: Longest period accepted where the SPEC names no maximum: a year is already a typo.
_MAX_SECONDS: Final = 365 * 24 * 3600
#: Largest count accepted: the broker's and PostgreSQL's integer.
_MAX_COUNT: Final = 2**31 - 1

# --------------------------------------------------------------------------- the sections

_SECTION = ConfigDict(extra="forbid", strict=True, frozen=True)


def _seconds(default: int, *, ge: int = 1, le: int = _MAX_SECONDS, description: str) -> Any:
    return Field(default=default, ge=ge, le=le, description=description)


class QueueReapSettings(BaseModel):
    """``[queue.reap]``: the thresholds the pass judges against and how it runs."""

    model_config = _SECTION

    enabled: bool = Field(
        default=True,
        description="run the automatic hook in workers' idle loops "
        "(on-demand passes and the lease reap always run)",
    )
    interval_seconds: int = Field(
        default=60, ge=1, le=86400, description="a pass every so often; also the consumerless slack"
    )
    lease_grace_seconds: int = Field(
        default=0, ge=0, le=86400, description="how long past its expiry a lease is left alone"
    )
    stale_ready_seconds: int = _seconds(
        900, description="a claimable job unclaimed this long (or a head message) is stale"
    )
    longest_lease_seconds: int = _seconds(7200, description="the longest lease a handler holds")
    consumer_timeout_seconds: int = _seconds(
        21600, description="the broker's consumer timeout on owned queues (by policy)"
    )
    delivery_limit: int = Field(
        default=20, ge=1, le=_MAX_COUNT, description="deliveries of a quorum message before it dies"
    )
    owned_queue_pattern: str = Field(
        default=r"^vibey\.", description="queues we own (re.search): their dead letters are parked"
    )
    dead_letter_queue_pattern: str = Field(
        default=r"(\.dlq|\.dead)$", description="dead-letter queues (re.search)"
    )
    consumerless_queue_pattern: str = Field(
        default=r"\.wait\.", description="queues that hold messages with no consumer on purpose"
    )
    dead_letter_min_depth: int = Field(
        default=1, ge=1, le=_MAX_COUNT, description="a dead-letter queue this deep is reported"
    )
    dead_letter_peek_limit: int = Field(
        default=100, ge=1, le=1000, description="new dead letters parked per queue per pass"
    )
    policy_priority: int = Field(
        default=0, ge=0, le=_MAX_COUNT, description="priority of the reconciled broker policies"
    )
    policy_verify_wait_seconds: float = Field(
        default=10.0,
        ge=0,
        le=120,
        allow_inf_nan=False,
        description="how long verification waits for the broker's statistics",
    )
    known_phases: list[str] = Field(
        default_factory=list,
        description="only jobs in these phases are claimable; empty: every phase",
    )

    @field_validator("owned_queue_pattern")
    @classmethod
    def _owned_pattern(cls, pattern: str) -> str:
        rx = _compiled(pattern)
        _refuse_catch_all(rx, "every queue would be ours, another system's included")
        for foreign in FOREIGN_QUEUE_NAMES:
            if rx.search(foreign):
                raise _refused(
                    f"matches the foreign queue '{foreign}': the reaper would treat another "
                    "system's queue as its own and park its dead letters"
                )
        return pattern

    @field_validator("dead_letter_queue_pattern")
    @classmethod
    def _dead_letter_pattern(cls, pattern: str) -> str:
        _refuse_catch_all(_compiled(pattern), "every queue would be read as a dead-letter queue")
        return pattern

    @field_validator("consumerless_queue_pattern")
    @classmethod
    def _consumerless_pattern(cls, pattern: str) -> str:
        _refuse_catch_all(
            _compiled(pattern),
            "no queue would ever be judged stale (to declare no consumerless queue, "
            "use a pattern that matches nothing, such as '(?!)')",
        )
        return pattern

    @field_validator("known_phases")
    @classmethod
    def _phases(cls, phases: list[str]) -> list[str]:
        if any(not phase.strip() for phase in phases):
            raise _refused("holds an empty phase name, which no job has")
        return phases

    @model_validator(mode="after")
    def _timeout_outlasts_lease(self) -> QueueReapSettings:
        problem = _timeout_below_lease(self.consumer_timeout_seconds, self.longest_lease_seconds)
        if problem:
            raise PydanticCustomError("reaper_cross_field", problem)
        return self


class QueueSettings(BaseModel):
    """``[queue]``: holds only ``[queue.reap]``."""

    model_config = _SECTION

    reap: QueueReapSettings = Field(default_factory=lambda: QueueReapSettings())


class BusSettings(BaseModel):
    """``[bus]``: the broker's management HTTP API."""

    model_config = _SECTION

    management_url: str = Field(
        default="http://127.0.0.1:15672", description="the management API, http(s), no credentials"
    )
    username: str = Field(default="guest", min_length=1, description="management API user")
    password: SecretStr = Field(default=SecretStr("guest"), description="management API password")
    vhost: str = Field(default="/", min_length=1, description="the virtual host the reaper judges")
    prefix: str = Field(
        default="vibey",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="prefix of the policy names the reaper owns",
    )
    timeout_seconds: float = Field(
        default=10.0, gt=0, le=600, allow_inf_nan=False, description="per-request HTTP timeout"
    )

    @field_validator("management_url")
    @classmethod
    def _management_url(cls, url: str) -> str:
        if "@" in url:
            raise _refused(
                "carries credentials (an '@' in the URL): set bus.username and bus.password "
                "(REAPER_BUS__PASSWORD) instead, so that no log line can print the password"
            )
        parts = _split_url(url)
        if parts is None:
            raise _refused("is not a valid URL")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _refused("must be an http:// or https:// URL with a host")
        return url


class DatabaseSettings(BaseModel):
    """``[database]``: the PostgreSQL that holds the job queue and the ledger."""

    model_config = _SECTION

    dsn: str = Field(
        default="postgresql://127.0.0.1:5432/postgres",
        description="a postgresql:// URL; a user is fine, a password is refused",
    )
    password: SecretStr | None = Field(
        default=None, description="the database password (else PGPASSWORD or ~/.pgpass)"
    )
    pool_size: int = Field(default=4, ge=1, le=100, description="connections in the pool")
    statement_timeout_seconds: float = Field(
        default=30.0, gt=0, le=86400, allow_inf_nan=False, description="per-statement timeout"
    )

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, dsn: str) -> str:
        parts = _split_url(dsn)
        if parts is None:
            raise _refused("is not a valid postgresql:// URL")
        if parts.password is not None or any(
            k.lower() == "password" for k in parse_qs(parts.query)
        ):
            raise _refused(
                "carries a password; put it in database.password (REAPER_DATABASE__PASSWORD), "
                "PGPASSWORD or ~/.pgpass instead, so that no log line can print it"
            )
        if parts.scheme not in ("postgresql", "postgres"):
            raise _refused("must be a postgresql:// URL")
        return dsn


# --------------------------------------------------------------------------- the settings


@dataclass(frozen=True)
class _LoadInputs:
    environ: Mapping[str, str]
    files: dict[str, Any]


#: What the load in progress reads: ``settings_customise_sources`` is a classmethod, so the
#: environment and the merged drop-ins of one :func:`load_config` call reach it through here.
_load_inputs: ContextVar[_LoadInputs | None] = ContextVar("_load_inputs", default=None)


class Settings(BaseSettings):
    """The effective configuration. ``Settings()`` alone reads only the process environment;
    :func:`load_config` adds the drop-ins and reports every problem."""

    # Each section is strict itself; the environment's strings are converted by
    # ``_EnvironSource`` before they reach it.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        case_sensitive=False,
        extra="forbid",
        frozen=True,
    )

    queue: QueueSettings = Field(default_factory=lambda: QueueSettings())
    bus: BusSettings = Field(default_factory=lambda: BusSettings())
    database: DatabaseSettings = Field(default_factory=lambda: DatabaseSettings())

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        inputs = _load_inputs.get() or _LoadInputs(os.environ, {})
        # Earlier wins: arguments, then the environment, then the merged drop-ins.
        return (
            init_settings,
            _EnvironSource(settings_cls, inputs.environ),
            _DropInSource(settings_cls, inputs.files),
        )

    def thresholds(self) -> Thresholds:
        """The judging subset, as the pure judge takes it."""
        reap = self.queue.reap
        return Thresholds(
            lease_grace_seconds=reap.lease_grace_seconds,
            stale_ready_seconds=reap.stale_ready_seconds,
            longest_lease_seconds=reap.longest_lease_seconds,
            consumer_timeout_seconds=reap.consumer_timeout_seconds,
            delivery_limit=reap.delivery_limit,
            owned_queue_pattern=reap.owned_queue_pattern,
            dead_letter_queue_pattern=reap.dead_letter_queue_pattern,
            consumerless_queue_pattern=reap.consumerless_queue_pattern,
            dead_letter_min_depth=reap.dead_letter_min_depth,
            dead_letter_peek_limit=reap.dead_letter_peek_limit,
            consumerless_slack_seconds=reap.interval_seconds,
            known_phases=frozenset(reap.known_phases),
        )


class _EnvironSource(EnvSettingsSource):
    """pydantic-settings' environment source, reading a given mapping rather than
    ``os.environ``, turning each string into the declared type before strict validation."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {
            (k if self.case_sensitive else k.lower()): v
            for k, v in self._environ.items()
            if not (self.env_ignore_empty and v == "")
        }

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


class _DropInSource(PydanticBaseSettingsSource):
    """The drop-ins, already read and merged by :func:`load_config`."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return {key: _copy(value) for key, value in self._data.items()}


# --------------------------------------------------------------------------- provenance


@dataclass(frozen=True)
class ConfigValue:
    """One leaf key, its effective value and where it came from.

    ``origin`` is ``"default"``, ``"file:<path>"`` or ``"env:REAPER_..."``. A password's
    ``value`` is a ``SecretStr`` (or None) in :class:`LoadedConfig`, and ``"***"`` from
    :func:`show` unless asked unmasked.
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


_Path = tuple[str, ...]


def _leaf_fields(model: type[BaseModel], prefix: _Path = ()) -> Iterator[tuple[_Path, FieldInfo]]:
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaf_fields(annotation, (*prefix, name))
        else:
            yield (*prefix, name), info


_LEAVES: Final = dict(_leaf_fields(Settings))
_SECRET_KEYS: Final = frozenset({"bus.password", "database.password"})
_URL_KEYS: Final = frozenset({"bus.management_url", "database.dsn"})
_TABLES: Final = ("queue.reap", "bus", "database")


def _walk(data: Mapping[str, Any], prefix: _Path = ()) -> Iterator[tuple[_Path, Any]]:
    """Every key path of a nested mapping, tables included, with its value."""
    for key, value in data.items():
        path = (*prefix, str(key))
        yield path, value
        if isinstance(value, Mapping):
            yield from _walk(value, path)


def _merge(
    into: dict[str, Any], new: Mapping[str, Any], origin: str, origins: dict[_Path, str]
) -> None:
    """Deep-merge one drop-in into the merged data: a later key replaces an earlier one, a
    table is merged key by key. ``origins`` records which file set each path."""

    def merge(target: dict[str, Any], source: Mapping[str, Any], prefix: _Path) -> None:
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
                for sub, _ in _walk(value, path):
                    origins[sub] = origin

    merge(into, new, ())


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _env_var(path: _Path, environ: Mapping[str, str]) -> str:
    """The variable that set ``path``: the longest ``REAPER_A__B`` prefix present."""
    present = {k.lower(): k for k in environ}
    for end in range(len(path), 0, -1):
        name = ENV_PREFIX + ENV_DELIMITER.join(path[:end])
        if name.lower() in present:
            return present[name.lower()]
    return (ENV_PREFIX + ENV_DELIMITER.join(path)).upper()


class _Origins:
    """Where each key path came from: the environment over the files over the defaults."""

    def __init__(
        self,
        env: Mapping[str, Any],
        environ: Mapping[str, str],
        merged: Mapping[str, Any],
        files: Mapping[_Path, str],
    ) -> None:
        self._env = [path for path, value in _walk(env) if not isinstance(value, Mapping)]
        self._environ = environ
        self._files = files
        self._tables = {path for path, value in _walk(merged) if isinstance(value, Mapping)}

    def of(self, path: _Path) -> str:
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


# --------------------------------------------------------------------------- loading


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
    secrets: set[str] = set()
    try:
        config_dir = resolve_config_dir(config_dir, environ)
    except ConfigError as exc:
        problems.extend(exc.problems)
        config_dir = None

    files, merged, file_origins = _read_drop_ins(config_dir, problems, secrets)

    try:
        env_data = _EnvironSource(Settings, environ)()
    except (SettingsError, ValueError) as exc:
        problems.append(f"the REAPER_ environment cannot be read: {exc}")
        env_data = {}
    secrets |= _secrets_in(env_data)
    origins = _Origins(env_data, environ, merged, file_origins)

    settings: Settings | None = None
    token = _load_inputs.set(_LoadInputs(environ, merged))
    try:
        settings = Settings()
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems.extend(_problem(error, origins) for error in errors)
        problems.extend(_cross_field_problems(merged, env_data, errors))
    except (SettingsError, ValueError) as exc:
        problems.append(f"the configuration cannot be assembled: {exc}")
    finally:
        _load_inputs.reset(token)

    if problems or settings is None:
        unique = list(dict.fromkeys(scrub(p, secrets) for p in problems))
        raise ConfigError(unique or ["the configuration cannot be assembled"])

    register_secret(settings.bus.password.get_secret_value())
    if settings.database.password is not None:
        register_secret(settings.database.password.get_secret_value())
    values = tuple(
        ConfigValue(".".join(path), _value_at(settings, path), origins.of(path)) for path in _LEAVES
    )
    return LoadedConfig(settings=settings, config_dir=config_dir, files=files, values=values)


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


def _read_drop_ins(
    config_dir: Path | None, problems: list[str], secrets: set[str]
) -> tuple[tuple[Path, ...], dict[str, Any], dict[_Path, str]]:
    merged: dict[str, Any] = {}
    origins: dict[_Path, str] = {}
    if config_dir is None:
        return (), merged, origins
    # Dotfiles are editors' and tools' leftovers, never declarations.
    try:
        names = sorted(p.name for p in config_dir.iterdir())
    except OSError as exc:
        problems.append(f"{config_dir}: cannot be listed: {exc.strerror or type(exc).__name__}")
        return (), merged, origins
    candidates = [
        config_dir / name for name in names if name.endswith(".toml") and not name.startswith(".")
    ]
    files = []
    for path in candidates:
        if not path.is_file():
            continue
        files.append(path)
        try:
            data = tomllib.loads(path.read_bytes().decode("utf-8"))
        except OSError as exc:
            problems.append(f"{path}: cannot be read: {exc.strerror or type(exc).__name__}")
            continue
        except UnicodeDecodeError as exc:
            problems.append(f"{path}: not UTF-8 (byte {exc.start}), so not TOML")
            continue
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"{path}: not valid TOML: {exc}")
            continue
        except (ValueError, RecursionError) as exc:
            problems.append(f"{path}: not valid TOML: {type(exc).__name__}")
            continue
        secrets |= _secrets_in(data)
        _merge(merged, data, f"file:{path}", origins)
    return tuple(files), merged, origins


def _value_at(settings: Settings, path: _Path) -> object:
    value: Any = settings
    for name in path:
        value = getattr(value, name)
    return list(value) if isinstance(value, list) else value


def _secrets_in(data: Mapping[str, Any]) -> set[str]:
    """Every password an input holds, so that no problem can echo one."""
    found: set[str] = set()
    for path, value in _walk(data):
        key = ".".join(path)
        if key in _SECRET_KEYS and value is not None and not isinstance(value, Mapping):
            text = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
            found.add(text)
        elif key in _URL_KEYS and isinstance(value, str):
            try:
                parts = urlsplit(value)
                found.add(parts.password or "")
                for k, vs in parse_qs(parts.query).items():
                    if k.lower() == "password":
                        found.update(vs)
            except ValueError:
                pass
    found.discard("")
    return found


# --------------------------------------------------------------------------- problems


def _refused(reason: str) -> PydanticCustomError:
    return PydanticCustomError("reaper_refused", "{reason}", {"reason": reason})


def _split_url(url: str) -> SplitResult | None:
    """The URL's parts, or None when it cannot be parsed (a bad port, a broken IPv6 host)."""
    try:
        parts = urlsplit(url)
        if parts.port is not None and parts.port < 1:
            return None
    except ValueError:
        return None
    return parts


def _compiled(pattern: str) -> re.Pattern[str]:
    """The compiled pattern, or a refusal naming why it is not one."""
    if pattern == "":
        raise _refused("is empty: an empty pattern matches every queue name")
    try:
        # A pattern Python warns about (a possible nested set) means something else in a
        # later Python: ambiguous, so refused rather than guessed.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return re.compile(pattern)
    except re.error as exc:
        raise _refused(f"is not a valid regular expression ({exc})") from None
    except Warning as exc:
        raise _refused(f"is an ambiguous regular expression ({exc})") from None
    except (OverflowError, RecursionError, ValueError, MemoryError) as exc:
        raise _refused(f"is not a valid regular expression ({type(exc).__name__})") from None


def _refuse_catch_all(rx: re.Pattern[str], consequence: str) -> None:
    if all(rx.search(name) for name in _PROBE_QUEUE_NAMES):
        raise _refused(f"matches every queue name: {consequence}")


def _timeout_below_lease(timeout: object, lease: object) -> str | None:
    if isinstance(timeout, int) and isinstance(lease, int) and timeout < lease:
        return (
            f"queue.reap.consumer_timeout_seconds = {timeout} is below "
            f"queue.reap.longest_lease_seconds = {lease}: the broker would cancel a consumer "
            "still inside its lease"
        )
    return None


def _cross_field_problems(
    files: Mapping[str, Any], env: Mapping[str, Any], errors: Iterable[ErrorDetails]
) -> list[str]:
    """The cross-field check pydantic skips when another key of the table is invalid: it
    runs on the raw values of the keys that are themselves valid."""
    errored = {tuple(str(part) for part in e["loc"][:3]) for e in errors}
    values: dict[str, object] = {}
    for name in ("consumer_timeout_seconds", "longest_lease_seconds"):
        path = ("queue", "reap", name)
        if path in errored or ("queue", "reap") in errored or ("queue",) in errored:
            return []
        raw = dict(_walk(env)).get(path, dict(_walk(files)).get(path))
        values[name] = QueueReapSettings.model_fields[name].default if raw is None else raw
    problem = _timeout_below_lease(
        values["consumer_timeout_seconds"], values["longest_lease_seconds"]
    )
    return [problem] if problem else []


#: Why a bound exists, by key: (below the minimum, above the maximum).
_WHY: Final[dict[str, tuple[str, str]]] = {
    "queue.reap.interval_seconds": (
        "a pass needs a period of at least a second",
        "a pass less than daily would leave stuck work unseen for days",
    ),
    "queue.reap.lease_grace_seconds": (
        "a grace cannot be negative",
        "a grace over a day leaves a dead holder's job unreaped for longer than anyone waits",
    ),
    "queue.reap.stale_ready_seconds": (
        "every claimable job would be stale the moment it became claimable",
        "a threshold over a year is a typo, not a threshold",
    ),
    "queue.reap.longest_lease_seconds": (
        "a lease lasts at least a second",
        "a lease over a year is a typo, not a lease",
    ),
    "queue.reap.consumer_timeout_seconds": (
        "the broker would cancel every consumer at once",
        "a timeout over a year is no bound at all",
    ),
    "queue.reap.delivery_limit": (
        "a message must be deliverable at least once",
        "the broker's limit is a 32-bit integer",
    ),
    "queue.reap.dead_letter_min_depth": (
        "a depth of 0 would report every empty dead-letter queue",
        "the depth is a 32-bit integer",
    ),
    "queue.reap.dead_letter_peek_limit": (
        "a pass must be able to park at least one dead letter",
        "a pass reads at most 1000 dead letters per queue, so that it stays bounded",
    ),
    "queue.reap.policy_priority": (
        "RabbitMQ policy priorities are not negative",
        "the priority is a 32-bit integer",
    ),
    "queue.reap.policy_verify_wait_seconds": (
        "a wait cannot be negative",
        "a pass waits at most two minutes for the broker's statistics",
    ),
    "bus.timeout_seconds": (
        "a request needs time to be answered",
        "a request waiting over ten minutes is a hung pass",
    ),
    "database.pool_size": (
        "the store needs at least one connection",
        "a reaper needs no more than a hundred connections",
    ),
    "database.statement_timeout_seconds": (
        "a statement needs time to run",
        "a statement running over a day is a hung pass",
    ),
}

_EXPECTED: Final = {
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list of strings",
    "model_type": "must be a table",
    "dict_type": "must be a table",
    "model_attributes_type": "must be a table",
    "finite_number": "must be a finite number",
    "string_too_short": "must not be empty",
    "string_pattern_mismatch": "must be letters, digits, '_', '.' or '-', at most 64",
}


def _problem(error: ErrorDetails, origins: _Origins) -> str:
    """One validation error as an operator reads it: the key, the value, why."""
    loc = error["loc"]
    path = tuple(str(part) for part in loc if isinstance(part, str))
    key = ".".join(path) + "".join(f"[{part}]" for part in loc if isinstance(part, int))
    kind = error["type"]
    origin = origins.of(path)
    where = "" if origin == "default" else f" (from {origin})"
    if kind == "reaper_cross_field":
        return error["msg"]
    if kind == "extra_forbidden":
        return _unknown_key(path) + where
    subject = key
    shown = _shown(".".join(path), error.get("input"))
    if shown is not None:
        subject = f"{key} = {shown}"
    ctx = error.get("ctx") or {}
    why_low, why_high = _WHY.get(".".join(path), ("", ""))
    if kind == "reaper_refused":
        reason = str(ctx.get("reason", error["msg"]))
    elif kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        word = "is below" if kind == "greater_than_equal" else "must be above"
        reason = f"{word} {bound}" + (f": {why_low}" if why_low else "")
    elif kind in ("less_than_equal", "less_than"):
        bound = ctx.get("le", ctx.get("lt"))
        reason = f"is above {bound}" + (f": {why_high}" if why_high else "")
    elif kind in _EXPECTED:
        reason = _EXPECTED[kind]
        # Every environment value is a string: only a file's type is worth naming.
        if kind.endswith("_type") and "input" in error and not origin.startswith("env:"):
            reason += f", not {_toml_type(error['input'])}"
    else:
        reason = f"is refused: {error['msg']}"
    return f"{subject} {reason}{where}"


def _unknown_key(path: _Path) -> str:
    key = ".".join(path)
    table = ".".join(path[:-1])
    if not table:
        tables = ", ".join(f"[{t}]" for t in _TABLES)
        return f"[{key}] is not a known table (the tables are {tables})"
    known = sorted(p[-1] for p in _LEAVES if ".".join(p[:-1]) == table)
    if table == "queue":
        known = ["reap"]
    if not known:
        return f"{key} is not a known key"
    close = difflib.get_close_matches(path[-1], known, n=1)
    hint = f"did you mean {close[0]}?" if close else "known: " + ", ".join(known)
    return f"{key} is not a known key of [{table}] ({hint})"


def _shown(key: str, value: object) -> str | None:
    """A value fit to print, or None: never a password, never a table (it may hold one),
    never a URL that may carry credentials, never an unknown key's value."""
    if key not in _LEAVES_BY_KEY or key in _SECRET_KEYS:
        return None
    if isinstance(value, Mapping | SecretStr):
        return None
    if key in _URL_KEYS and (not isinstance(value, str) or "@" in value or "pass" in value.lower()):
        return None
    try:
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = f"'{value}'" if value.isprintable() else repr(value)
        elif isinstance(value, float) and not math.isfinite(value):
            text = str(value)
        else:
            text = repr(value)
    except ValueError:  # an integer too long to print
        return "(a number too long to print)"
    return text if len(text) <= 120 else text[:117] + "..."


_LEAVES_BY_KEY: Final = frozenset(".".join(path) for path in _LEAVES)


def _toml_type(value: object) -> str:
    names = [
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a float"),
        (str, "a string"),
        (list, "an array"),
        (Mapping, "a table"),
    ]
    return next((name for kind, name in names if isinstance(value, kind)), "a date or time")
