"""A dead letter parked for a person: what the park keeps, its gate, its event, its replay.

A dead letter parked for a person (SPEC §1 (e)): what the park keeps, the gate's question,
the event it records, and whether ``replay`` may publish its body back. Pure.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from uuid import UUID

from reaper.core.dead_letters.decode import decoded_body
from reaper.core.dead_letters.untrusted import quote_untrusted
from reaper.core.domain import Action, Condition, DeadLetter, Source, Thresholds, Unit, Verdict
from reaper.core.letters import Letter

__all__ = [
    "EVENT_TRUSTED",
    "GATE_CHOICES",
    "ParkedLetter",
    "gate_prompt",
    "park_fields",
    "park_verdict",
    "replay_decision",
]

#: The answers a ``bus_dead_lettered`` gate offers (SPEC §1).
GATE_CHOICES: tuple[str, str] = ("replay", "dismiss")

#: Events built from dead letters are untrusted: their queue and reason came from headers.
EVENT_TRUSTED = False

_DEFAULT_DEAD_LETTER_PATTERN = Thresholds.dead_letter_queue_pattern

#: An AMQP queue name is a shortstr: at most 255 bytes.
_QUEUE_NAME_BYTES = 255


@dataclass(frozen=True)
class ParkedLetter(Letter):
    """What a parked dead letter keeps (its ``dead_letter`` row, migration 0004)."""

    #: Its envelope when it was parked or last read (``reaper.core.dead_letters.envelope``).
    envelope: str | None = None


def replay_decision(
    letter: Letter,
    owned_queue_pattern: str,
    dead_letter_queue_pattern: str = _DEFAULT_DEAD_LETTER_PATTERN,
) -> tuple[bool, str]:
    """Whether ``replay`` may publish this dead letter's body back to the queue it died on.

    Allowed only for a whole JSON object (never a body the broker cut short, never a binary or
    non-object body), only to an origin named in its headers that is a valid queue name, that
    matches ``owned_queue_pattern``, and that is not a dead-letter queue (neither the queue it
    was read from nor any name matching ``dead_letter_queue_pattern``). The reason is for a
    person and quotes what it names.
    """
    origin = letter.origin_queue
    read_from = letter.queue
    truncated = letter.body_truncated
    whole_object = letter.is_json_object and not truncated

    if not isinstance(origin, str) or not origin:
        return False, "its origin queue is unknown: no x-first-death-queue or x-death header"
    shown = quote_untrusted(origin)
    if truncated:
        return False, "its body is not whole: the management API returned only part of it"
    if not whole_object:
        return False, "its body is not a JSON object"
    if not _valid_queue_name(origin):
        return False, f"its origin {shown} is not a valid queue name"
    if origin == read_from:
        return False, f"its origin {shown} is the dead-letter queue it was read from"
    if not owned_queue_pattern:
        return False, "no owned_queue_pattern is configured"
    try:
        dead = re.search(dead_letter_queue_pattern, origin) is not None
        owned = re.search(owned_queue_pattern, origin) is not None
    except re.error:
        return False, "a configured queue pattern is not a valid regular expression"
    if dead:
        return False, f"its origin {shown} is a dead-letter queue"
    if not owned:
        return False, f"its origin {shown} is not a queue we own"
    return True, f"its body is a whole JSON object and its origin {shown} is a queue we own"


def gate_prompt(
    letter: DeadLetter,
    *,
    owned_queue_pattern: str,
    dead_letter_queue_pattern: str = _DEFAULT_DEAD_LETTER_PATTERN,
) -> str:
    """The ``bus_dead_lettered`` gate's question, for a person.

    Names the dead-letter queue (ours), the origin queue and reason (untrusted: quoted, cut,
    and said to be unverified), the body's size and kind, whether replay is possible and why,
    and that the broker's copy stays on the queue whatever the answer.
    """
    allowed, why = replay_decision(letter, owned_queue_pattern, dead_letter_queue_pattern)
    dlq = quote_untrusted(letter.queue)
    origin = quote_untrusted(letter.origin_queue)
    lines = [
        f"A dead letter is on our dead-letter queue {dlq}.",
        f"Origin queue (from its headers): {origin}; reason: {quote_untrusted(letter.reason)}. "
        "A publisher can write those headers: they are unverified.",
    ]
    if letter.message_id is not None:
        lines.append(f"Message id (unverified): {quote_untrusted(letter.message_id)}.")
    else:
        lines.append(
            "No message id: it is known by a digest of its origin, first death and body "
            f"({letter.identity})."
        )
    lines.append(f"Body: {_body_summary(letter)}.")
    if letter.body_encoding == "string" and letter.body:
        lines.append(f"Body begins (unverified): {quote_untrusted(letter.body)}")
    if allowed:
        lines.append(
            f"replay: publish the body back to {origin}. Delivery is at least once, so its "
            "consumer must be idempotent."
        )
    else:
        lines.append(f"replay: not possible, {why}.")
    lines += [
        "dismiss: settle this gate and send nothing.",
        f"Either way the broker's copy stays on {dlq}; clearing that queue is a person's act.",
        f"Answer {' or '.join(GATE_CHOICES)}." if allowed else "Answer dismiss.",
    ]
    return "\n".join(lines)


def park_verdict(
    letter: DeadLetter, *, depth: int, min_depth: int, job_id: UUID | str | None = None
) -> Verdict:
    """The ``park`` verdict recorded when ``letter`` becomes a parked job.

    ``object`` is the parked job's id when given (the store knows it inside the park's
    transaction; pass it), else the letter's identity. ``queue`` is the dead-letter queue,
    ``measured`` its depth against ``dead_letter_min_depth``. Untrusted (``trusted`` False):
    the detail quotes the origin and reason the headers claim.
    """
    return Verdict(
        source=Source.BROKER,
        object=str(job_id) if job_id is not None else letter.identity,
        condition=Condition.DEAD_LETTER,
        measured=depth,
        threshold=min_depth,
        unit=Unit.MESSAGES,
        action=Action.PARK,
        queue=letter.queue,
        detail=_park_detail(letter),
        trusted=EVENT_TRUSTED,
    )


def park_fields(letter: DeadLetter) -> ParkedLetter:
    """What the parked ``bus.dead_letter`` job keeps of ``letter``: values PostgreSQL's
    ``text`` accepts, and what ``replay_decision`` and ``decoded_body`` read back.

    A text body holding NUL or a lone surrogate (which PostgreSQL refuses) is kept as base64 of
    the same bytes; a header value holding one is dropped (None): it could never have been a
    queue name to replay to, and the identity already covers it.
    """
    body, encoding = letter.body, letter.body_encoding
    if not _storable(body):
        body, encoding = base64.b64encode(decoded_body(letter)).decode("ascii"), "base64"
    return ParkedLetter(
        queue=letter.queue,
        identity=letter.identity,
        message_id=_storable_or_none(letter.message_id),
        origin_queue=_storable_or_none(letter.origin_queue),
        reason=_storable_or_none(letter.reason),
        body=body,
        body_encoding=encoding,
        body_bytes=letter.body_bytes,
        body_truncated=letter.body_truncated,
        is_json_object=letter.is_json_object,
        envelope=letter.envelope,
    )


def _body_summary(letter: DeadLetter) -> str:
    held = len(decoded_body(letter))
    kind = "binary, shown base64" if letter.body_encoding == "base64" else "text"
    if letter.cut is not None:
        return f"{letter.body_bytes} bytes, {kind}, not whole: cut on reading ({letter.cut})"
    if letter.body_truncated:
        whole = f"not whole: {held} of {letter.body_bytes} bytes came back"
        return f"{letter.body_bytes} bytes, {kind}, {whole}"
    shape = "a whole JSON object" if letter.is_json_object else "not a JSON object"
    return f"{letter.body_bytes} bytes, {kind}, {shape}"


def _park_detail(letter: DeadLetter) -> str:
    return (
        f"dead letter {quote_untrusted(letter.identity)} parked from "
        f"{quote_untrusted(letter.queue)}: "
        f"died on {quote_untrusted(letter.origin_queue)} "
        f"({quote_untrusted(letter.reason)}; unverified headers), {_body_summary(letter)}"
    )


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _storable_or_none(text: str | None) -> str | None:
    return text if text is not None and _storable(text) else None


def _valid_queue_name(name: str) -> bool:
    return (
        name.isprintable()
        and not name.startswith("amq.")
        and len(name.encode("utf-8", "surrogatepass")) <= _QUEUE_NAME_BYTES
    )
