"""A validation error as an operator reads it: the key, the value (never a secret), and why.

The reasons for a bound come from the field that declares it
(:func:`reaper.config.model.bound_reasons`); a type error names the type a file gave; an
unknown key suggests the closest known one.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Final

from pydantic import SecretStr
from pydantic_core import ErrorDetails

from reaper.config.model import bound_reasons
from reaper.config.provenance import LEAVES, SECRET_KEYS, TABLES, URL_KEYS, Origins
from reaper.config.sources import ENV_DELIMITER, ENV_PREFIX, KeyPath

__all__ = ["describe", "unknown_variables"]

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

_LEAF_KEYS: Final = frozenset(".".join(path) for path in LEAVES)


def _variable(path: KeyPath) -> str:
    return (ENV_PREFIX + ENV_DELIMITER.join(path)).upper()


#: Every ``REAPER_`` name that sets something: each key, each table (as one JSON value).
_VARIABLES: Final = frozenset(
    [_variable(path) for path in LEAVES] + [_variable(tuple(t.split("."))) for t in TABLES]
) | {_variable(("queue",))}


def unknown_variables(environ: Mapping[str, str], others: frozenset[str]) -> list[str]:
    """Every ``REAPER_`` variable of ``environ`` that names no key, no table and none of
    ``others`` (the variables that are not keys, such as ``REAPER_CONFIG_DIR``), each with
    the nearest real name. One ignored in silence would leave a default in force: a
    ``REAPER_DATABASE_DSN`` would point every command at the default database. Names under
    a table (``REAPER_BUS__...``) are left to the validation, which names the table's keys."""
    known = _VARIABLES | others
    tables = tuple(v + ENV_DELIMITER for v in _VARIABLES if v.count(ENV_DELIMITER) < 2)
    problems = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known or upper.startswith(tables):
            continue
        bare = {k.removeprefix(ENV_PREFIX): k for k in known}
        close = difflib.get_close_matches(upper.removeprefix(ENV_PREFIX), sorted(bare), n=1)
        hint = (
            f"did you mean {bare[close[0]]}?"
            if close
            else "a table's keys join with '__': REAPER_DATABASE__DSN"
        )
        problems.append(f"{name} names no key, so it would be ignored ({hint})")
    return problems


def describe(error: ErrorDetails, origins: Origins) -> str:
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
    declared = LEAVES.get(path)
    why_low, why_high = bound_reasons(*declared) if declared else ("", "")
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


def _unknown_key(path: KeyPath) -> str:
    key = ".".join(path)
    table = ".".join(path[:-1])
    if not table:
        tables = ", ".join(f"[{t}]" for t in TABLES)
        return f"[{key}] is not a known table (the tables are {tables})"
    known = sorted(p[-1] for p in LEAVES if ".".join(p[:-1]) == table)
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
    if key not in _LEAF_KEYS or key in SECRET_KEYS:
        return None
    if isinstance(value, Mapping | SecretStr):
        return None
    if key in URL_KEYS:
        urls = value if isinstance(value, list) else [value]
        if not all(isinstance(u, str) and "@" not in u and "pass" not in u.lower() for u in urls):
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
