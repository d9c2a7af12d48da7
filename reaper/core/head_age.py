"""What the pass says of a queue whose head message's age the broker does not report.

What the pass says of a queue whose head message's age the broker does not report (SPEC
§1 (d): "say so in the pass's notes, never guess"), and how names and numbers are written in
the judge's words."""

from __future__ import annotations

import re
from collections.abc import Iterable

from reaper.core.domain import BrokerFacts, QueueStats
from reaper.core.found import split_found
from reaper.core.observation import Stalled

__all__ = [
    "group_head_age_notes",
    "head_age_reported",
    "head_age_unreported",
    "num",
    "num_value",
    "quote",
]

#: Quoted names and values are cut here: a broker's queue names are not our words.
_QUOTE_LIMIT = 200


def head_age_reported(queue: QueueStats, broker: BrokerFacts | None) -> bool:
    """Whether the broker can report ``queue``'s head-message timestamp at all: a RabbitMQ
    classic queue can; a quorum queue and any LavinMQ queue (no type listed) never do."""
    lavinmq = broker is not None and broker.product == "LavinMQ"
    return not (queue.kind == "quorum" or lavinmq or queue.type is None)


def head_age_unreported(
    queue: QueueStats, broker: BrokerFacts | None, stalled: Stalled | None, observed: bool
) -> str | None:
    """The note for a queue with ready messages, no consumer and no head timestamp, where the
    broker cannot report one (a quorum queue; any LavinMQ queue); None for a RabbitMQ classic
    queue, whose head message just carries no timestamp."""
    if head_age_reported(queue, broker):
        return None
    if broker is not None and broker.product == "LavinMQ":
        why = f" ({broker.name} reports no head_message_timestamp)"
    elif queue.type is None:
        why = " (no queue type listed, as on LavinMQ)"
    else:
        why = ""
    if stalled is not None:
        seconds = int(stalled.seconds)
        since = f"at least {seconds} s so far" if seconds else "from this pass on"
        tail = f"; observed across passes ({since})"
    elif observed:
        tail = (
            ", and the broker lists no delivery counter for it, so nothing is observed across "
            "passes; stale-ready not measured"
        )
    else:
        tail = ", and nothing was observed across passes this time; stale-ready not measured"
    what = "quorum queue" if queue.kind == "quorum" else "queue"
    return f"head-message age of {what} {quote(queue.name)}{_UNREPORTED}{why}{tail}"


_UNREPORTED = " is not reported by the broker"
_HEAD_AGE_NOTE = re.compile(
    r"^head-message age of (quorum queue|queue) ('(?:[^'\\]|\\.)*')"
    + re.escape(_UNREPORTED)
    + r"(.*)$"
)


def group_head_age_notes(notes: Iterable[str]) -> list[str]:
    """The head-age notes that give one reason for several queues, as one note naming them all
    (a report says a reason once); every other note as it is."""
    grouped: dict[tuple[str, str], list[str]] = {}
    matched, others = split_found(notes, _HEAD_AGE_NOTE.match)
    for _, found in matched:
        grouped.setdefault((found[1], found[3]), []).append(found[2])
    for (what, reason), listed_names in grouped.items():
        names = sorted(set(listed_names))
        if len(names) == 1:
            others.append(f"head-message age of {what} {names[0]}{_UNREPORTED}{reason}")
        else:
            listed = ", ".join(names)
            others.append(f"head-message age of {what}s {listed}{_UNREPORTED}{reason}")
    return others


def num_value(value: float) -> float | int:
    return int(value) if value.is_integer() else value


def num(value: float | int) -> str:
    return str(num_value(float(value))) if isinstance(value, float) else str(value)


def quote(text: str) -> str:
    cut = text[:_QUOTE_LIMIT]
    return repr(cut) + ("…" if len(text) > _QUOTE_LIMIT else "")
