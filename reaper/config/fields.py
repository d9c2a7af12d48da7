"""The pieces every section of the configuration's model is built from.

The pieces every section of the configuration's model is built from: a bounded key with the
reasons for its bounds beside it, a refusal, a problem spanning keys, and the strictness every
section shares."""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

__all__ = [
    "MAX_COUNT",
    "SECTION",
    "YEAR",
    "bound_reasons",
    "bounded",
    "cross_field",
    "refused",
    "split_url",
]

#: Longest period accepted where the SPEC names no maximum: a year is already a typo.
YEAR: Final = 365 * 24 * 3600
#: Largest count accepted: the broker's and PostgreSQL's integer.
MAX_COUNT: Final = 2**31 - 1

#: Every section: strict, no unknown key, immutable; defaults validated too, so that a
#: cross-field rule holds when one side of it is left at its default.
SECTION = ConfigDict(extra="forbid", strict=True, frozen=True, validate_default=True)


def bounded(
    default: Any,
    *,
    description: str,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    below: str = "",
    above: str = "",
    finite: bool = False,
) -> Any:
    """A bounded key: its default, its bounds, and why each bound exists (``below``: why a
    smaller value is refused; ``above``: why a larger one is)."""
    return Field(
        default=default,
        ge=ge,
        gt=gt,
        le=le,
        description=description,
        allow_inf_nan=False if finite else None,
        json_schema_extra={"below": below, "above": above},
    )


def bound_reasons(model: type[BaseModel], name: str) -> tuple[str, str]:
    """Why the key ``name`` of ``model`` refuses a value below, and above, its bounds."""
    extra = model.model_fields[name].json_schema_extra
    if not isinstance(extra, dict):
        return "", ""
    return str(extra.get("below") or ""), str(extra.get("above") or "")


def refused(reason: str) -> PydanticCustomError:
    """A value refused for ``reason`` (the problem text names the key and the value)."""
    return PydanticCustomError("reaper_refused", "{reason}", {"reason": reason})


def cross_field(template: str, **values: object) -> PydanticCustomError:
    """A problem spanning keys, reported as written: ``template`` names the keys itself, its
    ``{name}`` fields filled from ``values``."""
    return PydanticCustomError("reaper_cross_field", template, values)


def split_url(url: str) -> SplitResult | None:
    """The URL's parts, or None when it cannot be parsed (a bad port, a broken IPv6 host)."""
    try:
        parts = urlsplit(url)
        if parts.port is not None and parts.port < 1:
            return None
    except ValueError:
        return None
    return parts
