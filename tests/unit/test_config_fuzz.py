"""Fuzzing the configuration: whatever the drop-ins and the environment hold, ``load_config``
returns or raises ``ConfigError``, nothing else, and no password placed in the input ever
comes back out in a message, a ``repr`` or ``show``."""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections.abc import Iterator, Mapping
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaper import errors
from reaper.config import FOREIGN_QUEUE_NAMES, LoadedConfig, QueueReapSettings, load_config, show
from reaper.config.model import BusSettings, DatabaseSettings
from reaper.errors import ConfigError

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

KEYS: dict[str, list[str]] = {
    "queue.reap": list(QueueReapSettings.model_fields),
    "bus": list(BusSettings.model_fields),
    "database": list(DatabaseSettings.model_fields),
}


@pytest.fixture(autouse=True)
def no_registered_secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(errors, "_known_secrets", set())
    yield


# --------------------------------------------------------------------------- TOML writing


def toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{toml_string(k)} = {toml_value(v)}" for k, v in value.items())
        return "{" + items + "}"
    raise AssertionError(type(value))


def toml_document(tables: Mapping[str, Mapping[str, Any]]) -> str:
    lines = []
    for table, keys in tables.items():
        lines.append(f"[{table}]")
        lines.extend(f"{toml_string(k)} = {toml_value(v)}" for k, v in keys.items())
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- strategies

scalars = st.one_of(
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([0, 1, -1, 60, 7200, 21600, 1000, 1001, 86400, 86401, 2**31, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1)),
)
toml_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.sampled_from(["a", "password", "x y"]), scalars, max_size=2),
)

#: Regular expressions built from pieces, valid and not. A quantifier only ever follows a
#: simple atom, never a group, so no example backtracks catastrophically on the probes.
_ATOMS = ["a", "x", ".", r"\.", r"\w", r"\d", "vibey", "dlq", "celery", "[a-z]", "[^.]", "é"]
_RAW = ["^", "$", "|", "(", ")", "(?:", "(?!", "[", "]", "\\", "{", "}", "(?P<", "(?i)", "-"]
_QUANTIFIERS = ["", "", "*", "+", "?", "{2}", "{1,3}", "{3,1}", "*?"]
regex_pieces = st.one_of(
    st.tuples(st.sampled_from(_ATOMS), st.sampled_from(_QUANTIFIERS)).map("".join),
    st.sampled_from(_RAW),
)
regexes = st.lists(regex_pieces, max_size=8).map("".join)

passwords = st.text(
    alphabet="abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=12, max_size=20
).map(lambda s: f"Pw{s}")


@st.composite
def declared_tables(draw: st.DrawFn) -> dict[str, dict[str, Any]]:
    """Tables of known keys (and a few unknown ones) with values of any TOML type."""
    tables: dict[str, dict[str, Any]] = {}
    for table, keys in KEYS.items():
        chosen = draw(st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)))
        values = {key: draw(toml_values) for key in chosen}
        values.update(draw(st.dictionaries(st.sampled_from(["typo", "x_y", "Enabled"]), scalars)))
        tables[table] = values
    return tables


def load(files: Mapping[str, str | bytes], environ: Mapping[str, str]) -> LoadedConfig:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for name, content in files.items():
            if isinstance(content, bytes):
                (root / name).write_bytes(content)
            else:
                (root / name).write_text(content, encoding="utf-8")
        return load_config(root, environ=environ)


def outcome(files: Mapping[str, str | bytes], environ: Mapping[str, str]) -> str:
    """Everything a caller could read back: the problems, or the repr and ``show``."""
    try:
        loaded = load(files, environ)
    except ConfigError as exc:
        assert exc.problems, "a ConfigError names its problems"
        return "\n".join([*exc.problems, str(exc), repr(exc), repr(exc.args)])
    return "\n".join([repr(loaded), str(loaded), repr(show(loaded)), repr(loaded.settings)])


# --------------------------------------------------------------------------- properties


@FUZZ
@given(text=st.text(max_size=300))
def test_arbitrary_text_as_a_drop_in_is_loaded_or_refused(text: str) -> None:
    outcome({"10-fuzz.toml": text}, {})


@FUZZ
@given(content=st.binary(max_size=200))
def test_arbitrary_bytes_as_a_drop_in_are_loaded_or_refused(content: bytes) -> None:
    outcome({"10-fuzz.toml": content}, {})


@FUZZ
@given(
    prefix=st.sampled_from(["", "[queue.reap]\n", "[bus]\n", "[database]\n", "[queue]\n"]),
    lines=st.lists(
        st.tuples(
            st.sampled_from([k for keys in KEYS.values() for k in keys] + ["reap", "x"]),
            st.sampled_from(
                ["1", "-1", "0", "1e999", "nan", "true", '"60"', "[]", "{}", "1979-05-27", '"'],
            )
            | st.text(max_size=12),
        ),
        max_size=6,
    ),
)
def test_toml_ish_text_is_loaded_or_refused(prefix: str, lines: list[tuple[str, str]]) -> None:
    text = prefix + "".join(f"{key} = {value}\n" for key, value in lines)
    outcome({"10-fuzz.toml": text}, {})


@FUZZ
@given(first=declared_tables(), second=declared_tables())
def test_any_values_for_any_key_are_loaded_or_refused(
    first: dict[str, dict[str, Any]], second: dict[str, dict[str, Any]]
) -> None:
    outcome({"10-a.toml": toml_document(first), "20-b.toml": toml_document(second)}, {})


@FUZZ
@given(
    environ=st.dictionaries(
        st.sampled_from(
            [
                f"REAPER_{t.replace('.', '__').upper()}__{k.upper()}"
                for t, ks in KEYS.items()
                for k in ks
            ]
            + ["REAPER_QUEUE__REAP", "REAPER_BUS", "REAPER_QUEUE", "REAPER_QUEUE__REAP__NOPE"]
        ),
        st.text(max_size=20)
        | st.sampled_from(["1", "0", "-1", "true", "nan", "inf", "1e999", "[]", '["a"]', "{}"]),
    )
)
def test_any_environment_is_loaded_or_refused(environ: dict[str, str]) -> None:
    outcome({}, environ)


@FUZZ
@given(owned=regexes, dead=regexes, consumerless=regexes)
def test_any_regular_expression_is_loaded_or_refused(
    owned: str, dead: str, consumerless: str
) -> None:
    tables = {
        "queue.reap": {
            "owned_queue_pattern": owned,
            "dead_letter_queue_pattern": dead,
            "consumerless_queue_pattern": consumerless,
        }
    }
    try:
        loaded = load({"10.toml": toml_document(tables)}, {})
    except ConfigError as exc:
        named = {p.split(" ", 1)[0] for p in exc.problems}
        assert named <= {f"queue.reap.{k}" for k in tables["queue.reap"]}
        return
    thresholds = loaded.settings.thresholds()
    for pattern in (owned, dead, consumerless):
        assert pattern
    assert thresholds.owned_queue_pattern == owned
    assert not any(re.search(owned, foreign) for foreign in FOREIGN_QUEUE_NAMES)


@FUZZ
@given(
    password=passwords,
    where=st.sampled_from(
        ["bus.password", "database.password", "bus.management_url", "database.dsn"]
    ),
    via=st.sampled_from(["file", "env"]),
    noise=declared_tables(),
)
def test_a_password_never_leaks(
    password: str, where: str, via: str, noise: dict[str, dict[str, Any]]
) -> None:
    table, key = where.rsplit(".", 1)
    value = {
        "bus.password": password,
        "database.password": password,
        "bus.management_url": f"http://reaper:{password}@rabbit:15672",
        "database.dsn": f"postgresql://reaper:{password}@db:5432/jobs",
    }[where]
    for keys in noise.values():
        keys.pop("password", None)
    files = {"10-noise.toml": toml_document(noise)}
    environ = {}
    if via == "file":
        files["20-secret.toml"] = toml_document({table: {key: value}})
    else:
        environ[f"REAPER_{table.upper()}__{key.upper()}"] = value

    assert password not in outcome(files, environ)


@FUZZ
@given(password=passwords, junk=toml_values)
def test_a_password_beside_a_broken_value_never_leaks(password: str, junk: Any) -> None:
    tables = {
        "bus": {"password": password, "timeout_seconds": junk},
        "database": {"password": password, "pool_size": junk},
    }

    assert password not in outcome({"10.toml": toml_document(tables)}, {})
