"""How a value the broker sent is read: the one home of those rules (SPEC §4).

The management API answers with JSON rendered from Erlang terms. Integers often come back as
floats (``20.0``), an empty table as ``[]`` rather than ``{}``, a limit as the word
``"unlimited"``, and a header or argument may hold whatever its publisher wrote. The judge, the
broker client, the policy verifier and the dead-letter decoder all read such values through
these functions, so a value means the same thing wherever it is read. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = [
    "LONG",
    "count",
    "display_number",
    "finite",
    "is_unlimited",
    "limit",
    "mapping",
    "normalized",
    "positive",
    "scalar",
    "size",
    "whole",
]

#: Broker numbers are AMQP longs (signed 64-bit): anything outside is not a broker's value.
LONG = 2**63


def finite(value: object) -> float | int | None:
    """A number the broker could have sent: not a bool, finite, within a signed 64-bit long."""
    if type(value) is int:  # most of what an answer holds: asked first
        return value if -LONG < value < LONG else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if -LONG < value < LONG else None


def whole(value: object) -> int | None:
    """A whole number as the broker means it (``20.0`` is 20); None for anything else."""
    number = finite(value)
    if number is None or (isinstance(number, float) and not number.is_integer()):
        return None
    return int(number)


def positive(value: object) -> int | None:
    """A whole number above zero, else None: a bound of 0 or less bounds nothing."""
    number = whole(value)
    return number if number is not None and number > 0 else None


def count(value: object) -> int:
    """A count: a whole number at or above zero; anything else counts as 0."""
    number = whole(value)
    return number if number is not None and number > 0 else 0


def size(value: object) -> int | None:
    """A size or count the broker states: a whole number at or above zero, else None (not
    stated: unlike :func:`count`, a missing size is not a zero)."""
    number = whole(value)
    return number if number is not None and number >= 0 else None


def limit(value: object) -> int | None:
    """A delivery limit as the broker reports it: a whole number, with ``"unlimited"`` (4.x)
    read as -1; None when not reported."""
    return -1 if value == "unlimited" else whole(value)


def is_unlimited(value: object) -> bool:
    """Whether a declared limit means "unlimited" (a negative number, as RabbitMQ reads it)."""
    number = finite(value)
    return number is not None and number < 0


def scalar(value: object) -> str | int | float | None:
    """Text, or a number a broker could send (whole numbers as ints); else None. For values
    that become part of an identity."""
    if isinstance(value, str):
        return value
    number = finite(value)
    if number is None:
        return None
    return int(number) if float(number).is_integer() else number


def mapping(value: object) -> Mapping[str, object]:
    """A table as a mapping: the management API renders an empty one as ``[]``; anything that
    is not a table reads as empty."""
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def normalized(value: object) -> object:
    """``value`` with every integral float made an int, recursively: a definition read back
    from the broker (which may answer ``20.0``) compares equal to the declared one."""
    if type(value) is str or type(value) is int:  # most of what a table holds: asked first
        return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): normalized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalized(v) for v in value]
    return value


def display_number(value: float | int | None) -> float | int | None:
    """A measurement as a report shows it: ``20.0`` as 20."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
