"""How a finding reads for a person: ages, short ids, the measurement, the next step.

How a finding reads for a person: ages, short ids, the measurement said once, and the next
step. Shared by the text report and the JSON's ``findings``."""

from __future__ import annotations

from typing import Final

from reaper.core.domain import Condition, Verdict
from reaper.core.moments import utc
from reaper.core.terminal import one_line
from reaper.core.values import display_number
from reaper.gates.ids import project_name

__all__ = [
    "LEASE_CONDITIONS",
    "age",
    "measure",
    "next_step",
    "plural",
    "short",
    "utc",
    "where",
]

LEASE_CONDITIONS: Final = (Condition.LEASE_EXPIRED, Condition.POISON)


def age(seconds: float) -> str:
    """A duration as a person reads it: ``45 s``, ``45 m``, ``2 h 12 m``, ``3 d 4 h``."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s} s"
    m, h, d = s // 60, s // 3600, s // 86400
    if s < 3600:
        return f"{m} m"
    if s < 86400:
        return f"{h} h {m % 60} m" if m % 60 else f"{h} h"
    return f"{d} d {h % 24} h" if h % 24 else f"{d} d"


def _amount(value: float | int, unit: str) -> str:
    if unit == "seconds":
        return age(value)
    n = display_number(value)
    return f"{n} {unit[:-1] if n == 1 and unit.endswith('s') else unit}"


def measure(verdict: Verdict, *, threshold: bool = True) -> str:
    """The measurement against its threshold, said once (``threshold`` false: the threshold
    was said on a line above)."""
    unit = verdict.unit.value
    if verdict.measured is None:
        return ""
    shown = _amount(verdict.measured, unit)
    # a dead-letter remainder (bucketed) counts letters not parked: any is a finding, and a
    # threshold of 0 would say nothing a person can act on
    if verdict.threshold is None or not threshold or verdict.bucket is not None:
        return shown
    if verdict.condition in LEASE_CONDITIONS and unit == "attempts":
        return f"{display_number(verdict.measured)} of {display_number(verdict.threshold)} attempts"
    if verdict.condition is Condition.LEASE_EXPIRED:
        return f"expired {shown} ago"
    return f"{shown} (threshold {_amount(verdict.threshold, unit)})"


def short(identifier: object) -> str:
    """The first 8 hex of an id: what a person reads and types."""
    return str(identifier)[:8]


def where(verdict: Verdict, *, wide: bool = False) -> str:
    """What a verdict is about; ids cut to 8 hex unless ``wide``; a name on one line."""
    if verdict.queue and verdict.object != verdict.queue:
        thing = verdict.object if wide else short(verdict.object)
        return one_line(f"{thing} from queue {verdict.queue}")
    if verdict.queue:
        return one_line(f"queue {verdict.queue}")
    job = verdict.object if wide else short(verdict.object)
    project = project_name(verdict.project_id, wide=wide)
    return f"job {job} (project {project})"


def next_step(verdict: Verdict, *, many: bool = False) -> str:
    """What a person does about a finding, in a few words; ``many``: as the line that names
    several findings sharing it says it."""
    c = verdict.condition
    d = verdict.detail

    def say(one: str, several: str) -> str:
        return several if many else one

    if c is Condition.STALE_READY:
        if verdict.queue and d.startswith("wedged"):
            return say("its consumers", "their consumers") + (
                " take nothing: check them (a blocked channel, a full prefetch)"
            )
        if verdict.queue:
            return say(
                "no consumer takes it: start the queue's consumer",
                "no consumer takes them: start each queue's consumer",
            )
        return say(
            "no worker claims it: check the project's workers",
            "no worker claims them: check each project's workers",
        )
    if c is Condition.DEAD_LETTER:
        if "foreign" in d:
            return "foreign: never read; tell " + say("the queue's owner", "each queue's owner")
        if "not parked" in d and "past the read limit" not in d:
            # its read is blocked: no later pass parks them until the queue is made safe
            return (
                f"not read, so never parked: make reading {say('it', 'them')} safe "
                "(the fix is under NOT OK)"
            )
        return "not parked yet: the next pass parks more"
    if c is Condition.HOLDER_GONE:
        return "held with no consumer: find the channel holding them"
    if c is Condition.HUNG_HANDLER:
        return say(
            "a consumer holds deliveries without acking: restart its handler",
            "consumers hold deliveries without acking: restart their handlers",
        )
    if c is Condition.UNBOUNDED:
        if "; fix: " in d:  # only the queue's own declaration can bound it (LavinMQ)
            return d.split("; fix: ", 1)[1].split(" (", 1)[0]
        if any(w in d for w in ("cannot be in force", "enforces no consumer", "never pinned")):
            return (
                f"the broker cannot bound {say('it', 'them')} here; the reaper watches for a "
                "hung consumer"
            )
        if "poison is unbounded" in d:
            return "declare a delivery limit with a dead-letter exchange"
        if "no consumer timeout is in force" in d:
            return "ship the broker-wide consumer_timeout (conf.d/rabbitmq/20-vibey-reap.conf)"
        return say("declare the missing bound", "declare the missing bounds")
    return ""


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
