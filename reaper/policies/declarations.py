"""The reviewed policy declarations, and the values their placeholders are filled with.

The reviewed policy declarations (``policies/*.json``, SPEC §4): reading them, and the
values their placeholders are filled with.

A declaration names the queue type it is for, a pattern, an ``apply-to``, a priority and a
definition whose values may be placeholders (``"{delivery_limit}"``) filled from
``[queue.reap]`` and ``[bus]``. Every problem in every file is reported at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from reaper.core.domain import Thresholds
from reaper.errors import ConfigError

__all__ = [
    "DEFAULT_POLICY_DIR",
    "QUEUE_TYPE_APPLY_TO",
    "Declaration",
    "PolicyParameters",
    "fill",
    "load_declarations",
]

#: The reviewed declarations, one JSON file per policy (``policies/README.md``). In a checkout,
#: ``reaper/policies/declared`` is a link to the top-level ``policies/``; a wheel carries the
#: files themselves there.
DEFAULT_POLICY_DIR: Final = (Path(__file__).resolve().parent / "declared").resolve()

#: ``apply-to`` values that name a queue type, and the type each admits.
QUEUE_TYPE_APPLY_TO: Final = {"quorum_queues": "quorum", "classic_queues": "classic"}
_APPLY_TO: Final = frozenset({"queues", *QUEUE_TYPE_APPLY_TO})
_QUEUE_TYPES: Final = frozenset({"quorum", "classic"})

_REQUIRED_FIELDS: Final = ("name", "queue_type", "pattern", "apply-to", "priority", "definition")
_FIELDS: Final = frozenset({*_REQUIRED_FIELDS, "description", "priority_offset"})
_PLACEHOLDER: Final = re.compile(r"\{([a-z_][a-z0-9_]*)\}")

_DEFAULTS = Thresholds()


@dataclass(frozen=True)
class Declaration:
    """One reviewed file of ``policies/``, placeholders not yet filled."""

    source: str  # the file name, e.g. "quorum.json"
    name: str
    queue_type: str  # the queue type the policy is for: "quorum" or "classic"
    pattern: str
    apply_to: str
    priority: int | str  # an int, or a placeholder such as "{policy_priority}"
    definition: Mapping[str, object]
    priority_offset: int = 0
    description: str = ""


@dataclass(frozen=True)
class PolicyParameters:
    """The values the declarations' placeholders are filled with (``[queue.reap]``, ``[bus]``)."""

    prefix: str = "vibey"
    consumer_timeout_seconds: int = _DEFAULTS.consumer_timeout_seconds
    delivery_limit: int = _DEFAULTS.delivery_limit
    owned_queue_pattern: str = _DEFAULTS.owned_queue_pattern
    dead_letter_queue_pattern: str = _DEFAULTS.dead_letter_queue_pattern
    policy_priority: int = 0

    @classmethod
    def from_thresholds(
        cls, thresholds: Thresholds, *, prefix: str, policy_priority: int
    ) -> PolicyParameters:
        return cls(
            prefix=prefix,
            consumer_timeout_seconds=thresholds.consumer_timeout_seconds,
            delivery_limit=thresholds.delivery_limit,
            owned_queue_pattern=thresholds.owned_queue_pattern,
            dead_letter_queue_pattern=thresholds.dead_letter_queue_pattern,
            policy_priority=policy_priority,
        )

    @property
    def consumer_timeout_ms(self) -> int:
        return self.consumer_timeout_seconds * 1000

    def placeholders(self) -> dict[str, object]:
        """Every field by its name, and the consumer timeout in milliseconds."""
        return {**asdict(self), "consumer_timeout_ms": self.consumer_timeout_ms}


_KNOWN_PLACEHOLDERS: Final = frozenset(PolicyParameters().placeholders())


def load_declarations(directory: Path | str = DEFAULT_POLICY_DIR) -> list[Declaration]:
    """Every ``*.json`` declaration in ``directory``, in file-name order. Raises
    :class:`~reaper.errors.ConfigError` naming every problem in every file."""
    directory = Path(directory)
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ConfigError([f"no policy declarations (*.json) in {directory}"])
    problems: list[str] = []
    declarations: list[Declaration] = []
    for path in files:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: not readable JSON: {exc}")
            continue
        declaration, found = _declaration(path.name, raw)
        problems.extend(f"{path}: {p}" for p in found)
        if declaration is not None:
            declarations.append(declaration)
    names = [d.name for d in declarations]
    problems.extend(
        f"{directory}: more than one declaration is named {n!r}"
        for n in sorted({n for n in names if names.count(n) > 1})
    )
    if problems:
        raise ConfigError(problems)
    return declarations


def _declaration(source: str, raw: object) -> tuple[Declaration | None, list[str]]:
    if not isinstance(raw, dict):
        return None, ["a declaration is a JSON object"]
    problems = [f"unknown field {k!r}" for k in sorted(set(raw) - _FIELDS)]
    problems += [f"missing field {k!r}" for k in _REQUIRED_FIELDS if k not in raw]
    if problems:
        return None, problems
    for key in ("name", "pattern", "queue_type", "apply-to"):
        if not isinstance(raw[key], str) or not raw[key]:
            problems.append(f"{key!r} must be a non-empty string")
    if raw["queue_type"] not in _QUEUE_TYPES:
        problems.append(f"queue_type must be one of {sorted(_QUEUE_TYPES)}")
    apply_to = raw["apply-to"]
    if apply_to not in _APPLY_TO:
        problems.append(f"apply-to must be one of {sorted(_APPLY_TO)}")
    elif apply_to in QUEUE_TYPE_APPLY_TO and QUEUE_TYPE_APPLY_TO[apply_to] != raw["queue_type"]:
        problems.append(f"apply-to {apply_to!r} does not admit queue_type {raw['queue_type']!r}")
    definition = raw["definition"]
    if not isinstance(definition, dict) or not definition:
        problems.append("'definition' must be a non-empty object")
        definition = {}
    priority = raw["priority"]
    if isinstance(priority, bool) or not isinstance(priority, int | str):
        problems.append("'priority' must be an integer or a placeholder")
    offset = raw.get("priority_offset", 0)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        problems.append("'priority_offset' must be a non-negative integer")
    templated = [("name", raw["name"]), ("pattern", raw["pattern"]), ("priority", priority)]
    for where, value in [*templated, *definition.items()]:
        if isinstance(value, str):
            unknown = {m for m in _PLACEHOLDER.findall(value)} - _KNOWN_PLACEHOLDERS
            problems.extend(
                f"{where!r}: unknown placeholder {{{u}}} (known: {sorted(_KNOWN_PLACEHOLDERS)})"
                for u in sorted(unknown)
            )
    if problems:
        return None, problems
    return (
        Declaration(
            source=source,
            name=raw["name"],
            queue_type=raw["queue_type"],
            pattern=raw["pattern"],
            apply_to=apply_to,
            priority=priority,
            definition=dict(definition),
            priority_offset=offset,
            description=str(raw.get("description", "")),
        ),
        [],
    )


def fill(template: object, values: Mapping[str, object]) -> object:
    """A placeholder standing alone takes its value's type (``"{delivery_limit}"`` → 20);
    inside a longer string it is substituted as text, and the substituted text is not
    scanned again (a pattern's own ``{2}`` stays as it is)."""
    if not isinstance(template, str):
        return template
    alone = _PLACEHOLDER.fullmatch(template)
    if alone is not None:
        return values[alone[1]]
    return _PLACEHOLDER.sub(lambda m: str(values[m[1]]), template)
