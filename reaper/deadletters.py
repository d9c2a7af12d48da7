"""Dead letters, the pure half: decoding, identity, untrusted text, the gate, replay, and the
proof that reading a dead-letter queue cannot drop a message (SPEC §1, §4).

No I/O, no clock, no logging. ``broker.ManagementClient.get_messages`` returns the management
API's raw message dicts; ``decode`` turns each into a ``DeadLetter`` whatever it holds, and the
pass asks this module what to read (``read_plan``), which letters are new (``select_new``), what
the gate says (``gate_prompt``), what the event says (``event_payload``) and, when a person
answers, whether replay is allowed (``replay_decision``).

Everything a message carries is untrusted: its publisher wrote the body, the message id and
the ``x-death``/``x-first-death-*`` headers. Such values reach a person or a log line only
through ``quote_untrusted``: quoted, escaped, cut to 200 characters.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from reaper.domain import (
    Action,
    BrokerFacts,
    Condition,
    DeadLetter,
    QueueStats,
    Source,
    Thresholds,
    Unit,
    Verdict,
)
from reaper.judge import dead_letter_exchange_in_force, delivery_limit_bound

__all__ = [
    "BUDGET_MARGIN",
    "CUT_MARKER",
    "EVENT_TRUSTED",
    "GATE_CHOICES",
    "READ_PAST_PARKED_CAP",
    "UNTRUSTED_LIMIT",
    "ReadPlan",
    "decode",
    "decoded_body",
    "event_payload",
    "gate_prompt",
    "park_fields",
    "park_verdict",
    "quote_untrusted",
    "read_plan",
    "replay_decision",
    "select_new",
    "unread_count",
    "within_budget",
]

#: The answers a ``bus_dead_lettered`` gate offers (SPEC §1).
GATE_CHOICES: tuple[str, str] = ("replay", "dismiss")

#: Untrusted values are shown cut to this many characters (after escaping).
UNTRUSTED_LIMIT = 200

#: Appended (outside the quotes) to a value that was cut.
CUT_MARKER = "…"

#: A ``message_id`` longer than this is hashed into the identity rather than kept verbatim,
#: so an identity stays a short key whatever a publisher wrote.
MESSAGE_ID_LIMIT = 200

#: At most this many body bytes go into a digest identity (with the body's full size). The
#: management API's default ``truncate`` is 50,000: any read that returns at least this much
#: of a body gives the same identity.
DIGEST_BODY_LIMIT = 50_000

#: How many already-parked dead letters one pass reads past, at most. The read is bounded by
#: ``peek_limit`` plus this; new letters beyond it stay unread and are surfaced as unread.
READ_PAST_PARKED_CAP = 1_000

#: Deliveries kept in reserve after the next read of a letter (see ``within_budget``).
BUDGET_MARGIN = 2

#: Events built from dead letters are untrusted: their queue and reason came from headers.
EVENT_TRUSTED = False

#: Version tag of the digest identity's layout; changing the layout must change the tag.
_DIGEST_LAYOUT = "dead-letter/1"

_DEFAULT_DEAD_LETTER_PATTERN = Thresholds.dead_letter_queue_pattern

#: An AMQP queue name is a shortstr: at most 255 bytes.
_QUEUE_NAME_BYTES = 255

#: Numbers a broker could have sent (AMQP longs); others are not part of an identity.
_LONG = 2**63


# --------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class _FirstDeath:
    queue: str | None
    reason: str | None
    exchange: str | None
    time: str | int | float | None


def decode(raw: Mapping[str, Any], *, queue: str) -> DeadLetter:
    """One message dict from ``POST /api/queues/{vhost}/{queue}/get`` as a ``DeadLetter``.

    Total: any value of any shape gives a ``DeadLetter`` and never raises. ``queue`` is the
    dead-letter queue that was read (ours). A body is whole only when ``payload_bytes`` states
    exactly the size of what came back; otherwise ``body_truncated`` is True and the body is
    never replayable.
    """
    message: Mapping[Any, Any] = raw if isinstance(raw, Mapping) else {}
    properties = _mapping(message.get("properties"))
    headers = _mapping(properties.get("headers"))

    body, encoding, data, usable = _payload(message)
    stated = _size(message.get("payload_bytes"))
    truncated = not usable or stated != len(data)
    size = stated if stated is not None else len(data)
    death = _first_death(headers)
    message_id = _nonempty_text(properties.get("message_id"))

    return DeadLetter(
        queue=queue,
        identity=_identity(message_id, death, data, size),
        message_id=message_id,
        origin_queue=death.queue,
        reason=death.reason,
        body=body,
        body_encoding=encoding,
        body_bytes=size,
        body_truncated=truncated,
        is_json_object=not truncated and _is_json_object(data),
        delivery_count=_size(headers.get("x-delivery-count")),
        redelivered=message.get("redelivered") is True,
    )


def decoded_body(letter: DeadLetter | Mapping[str, Any]) -> bytes:
    """The body's bytes as far as they are held: base64 decoded, or the text as UTF-8.

    Takes a ``DeadLetter`` or the fields ``park_fields`` stored. A base64 body that does not
    decode gives its text's bytes (such a body is never replayable).
    """
    body: object = letter.body if isinstance(letter, DeadLetter) else letter.get("body")
    encoding: object = (
        letter.body_encoding if isinstance(letter, DeadLetter) else letter.get("body_encoding")
    )
    if not isinstance(body, str):
        return b""
    if encoding == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            pass
    return _utf8(body)


def _payload(message: Mapping[Any, Any]) -> tuple[str, str, bytes, bool]:
    """(body as given, its encoding, its bytes, whether those bytes are the body as sent)."""
    payload = message.get("payload")
    encoding = message.get("payload_encoding")
    if not isinstance(payload, str):
        return "", "string", b"", False
    if encoding == "base64":
        try:
            return payload, "base64", base64.b64decode(payload, validate=True), True
        except (binascii.Error, ValueError):
            return payload, "base64", _utf8(payload), False
    # Only an explicit "string" is the body as sent; anything else is a guess.
    return payload, "string", _utf8(payload), encoding == "string"


def _first_death(headers: Mapping[Any, Any]) -> _FirstDeath:
    """The first death as the headers tell it: ``x-first-death-*``, else ``x-death``.

    ``x-death`` holds one entry per (queue, reason); the one matching the first death gives its
    time. Without ``x-first-death-*`` headers, the list's first entry stands in.
    """
    queue = _nonempty_text(headers.get("x-first-death-queue"))
    reason = _nonempty_text(headers.get("x-first-death-reason"))
    exchange = _text(headers.get("x-first-death-exchange"))
    deaths = headers.get("x-death")
    entries = deaths if isinstance(deaths, list | tuple) else ()
    entry: Mapping[Any, Any] = {}
    for candidate in entries:
        if not isinstance(candidate, Mapping):
            continue
        if not entry:
            entry = candidate
        if queue is None or reason is None:
            break
        if candidate.get("queue") == queue and candidate.get("reason") == reason:
            entry = candidate
            break
    return _FirstDeath(
        queue=queue if queue is not None else _nonempty_text(entry.get("queue")),
        reason=reason if reason is not None else _nonempty_text(entry.get("reason")),
        exchange=exchange if exchange is not None else _text(entry.get("exchange")),
        time=_scalar(entry.get("time")),
    )


def _is_json_object(data: bytes) -> bool:
    """A valid JSON object (``{...}``) in strict UTF-8; NaN and Infinity are not JSON."""
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_not_json)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


# --------------------------------------------------------------------------- identity


def _identity(message_id: str | None, death: _FirstDeath, data: bytes, size: int) -> str:
    """The key a dead letter is parked under, once, across projects and passes (SPEC §1).

    - ``msg:<message_id>`` for a message id of at most 200 printable characters;
    - ``msg-sha256:<hex>`` for any other message id (too long, or holding characters a key
      or a terminal should not carry);
    - ``sha256:<hex>`` with no message id: a digest of the origin queue, the first death's
      reason, exchange and time, the body's full size and (at most) its first 50,000 bytes.
      Two identical bodies that died on the same queue, for the same reason, in the same
      instant, are one identity and are parked once.

    Never part of it: ``x-delivery-count``, ``redelivered``, ``x-death`` counts, the queue that
    was read and its depth -- all change when the same message is read again. The prefixes
    differ, so no message id can collide with a digest.
    """
    if message_id is not None:
        if len(message_id) <= MESSAGE_ID_LIMIT and message_id.isprintable():
            return f"msg:{message_id}"
        return "msg-sha256:" + hashlib.sha256(_utf8(message_id)).hexdigest()
    fields = [_DIGEST_LAYOUT, death.queue, death.reason, death.exchange, death.time, size]
    head = json.dumps(fields, ensure_ascii=True, separators=(",", ":"))
    digest = hashlib.sha256(head.encode("ascii"))
    digest.update(b"\n")  # the JSON head holds no raw newline: the framing is unambiguous
    digest.update(data[:DIGEST_BODY_LIMIT])
    return "sha256:" + digest.hexdigest()


# --------------------------------------------------------------------------- untrusted text


def quote_untrusted(value: object, limit: int = UNTRUSTED_LIMIT) -> str:
    """A value from a message, safe for a terminal and a log line.

    A string is shown in double quotes with backslash escapes; any other value (a number, a
    list, a table) bare, as compact JSON, escaped the same way; None as ``(none)``. Every
    character that is not printable (controls, format and bidirectional marks, separators
    other than the space, surrogates, unassigned code points) is escaped (``\\n``, ``\\x1b``,
    ``\\u202e``). The escaped text is cut to ``limit`` characters, never inside an escape,
    and ``…`` after it says it was cut: the result is at most ``limit + 3`` characters.
    """
    if value is None:
        return "(none)"
    limit = max(0, limit)
    quoted = isinstance(value, str)
    text = value if isinstance(value, str) else _plain_text(value)
    pieces: list[str] = []
    used = 0
    cut = False
    for char in text:
        piece = _escape(char, quoted)
        if used + len(piece) > limit:
            cut = True
            break
        pieces.append(piece)
        used += len(piece)
    shown = "".join(pieces)
    if quoted:
        shown = f'"{shown}"'
    return shown + CUT_MARKER if cut else shown


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str, quoted: bool) -> str:
    if quoted and char in '"\\':
        return "\\" + char
    if char.isprintable():
        return char
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _plain_text(value: object) -> str:
    """A non-string header value as text. Never raises: what cannot be rendered is named."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        try:
            return repr(value)
        except ValueError:  # an integer past the interpreter's digit limit
            return f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else "?"
    if isinstance(value, bytes | bytearray):
        return repr(bytes(value))
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_unrenderable)
    except (ValueError, TypeError, RecursionError):
        return f"<{type(value).__name__}>"


def _unrenderable(value: object) -> str:
    return f"<{type(value).__name__}>"


# --------------------------------------------------------------------------- gate and event


def replay_decision(
    letter: DeadLetter | Mapping[str, Any],
    owned_queue_pattern: str,
    dead_letter_queue_pattern: str = _DEFAULT_DEAD_LETTER_PATTERN,
) -> tuple[bool, str]:
    """Whether ``replay`` may publish this dead letter's body back to the queue it died on.

    Allowed only for a whole JSON object (never a body the broker cut short, never a binary or
    non-object body), only to an origin named in its headers that is a valid queue name, that
    matches ``owned_queue_pattern``, and that is not a dead-letter queue (neither the queue it
    was read from nor any name matching ``dead_letter_queue_pattern``). Takes a ``DeadLetter``
    or the fields ``park_fields`` stored (``origin_queue``, ``queue``, ``is_json_object``,
    ``body_truncated``). The reason is for a person and quotes what it names.
    """
    if isinstance(letter, DeadLetter):
        origin: object = letter.origin_queue
        read_from: object = letter.queue
        whole_object = letter.is_json_object and not letter.body_truncated
        truncated = letter.body_truncated
    else:
        origin = letter.get("origin_queue")
        read_from = letter.get("queue")
        truncated = letter.get("body_truncated") is not False
        whole_object = letter.get("is_json_object") is True and not truncated

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
        f"Answer {' or '.join(GATE_CHOICES)}.",
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


def event_payload(
    letter: DeadLetter, *, depth: int, min_depth: int, job_id: UUID | str | None = None
) -> dict[str, Any]:
    """The ``QueueReaped`` payload of a park (SPEC §3); record it with ``trusted`` False."""
    return park_verdict(letter, depth=depth, min_depth=min_depth, job_id=job_id).payload()


def park_fields(letter: DeadLetter) -> dict[str, Any]:
    """What the parked ``bus.dead_letter`` job keeps of ``letter``: JSON that PostgreSQL's
    ``jsonb`` accepts, and what ``replay_decision`` and ``decoded_body`` read back.

    A text body holding NUL or a lone surrogate (which ``jsonb`` refuses) is kept as base64 of
    the same bytes; a header value holding one is dropped (None): it could never have been a
    queue name to replay to, and the identity already covers it.
    """
    body, encoding = letter.body, letter.body_encoding
    if not _storable(body):
        body, encoding = base64.b64encode(decoded_body(letter)).decode("ascii"), "base64"
    return {
        "queue": letter.queue,
        "identity": letter.identity,
        "message_id": _storable_or_none(letter.message_id),
        "origin_queue": _storable_or_none(letter.origin_queue),
        "reason": _storable_or_none(letter.reason),
        "body": body,
        "body_encoding": encoding,
        "body_bytes": letter.body_bytes,
        "body_truncated": letter.body_truncated,
        "is_json_object": letter.is_json_object,
        "delivery_count": letter.delivery_count,
        "redelivered": letter.redelivered,
    }


def _body_summary(letter: DeadLetter) -> str:
    held = len(decoded_body(letter))
    kind = "binary, shown base64" if letter.body_encoding == "base64" else "text"
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


# --------------------------------------------------------------------------- reading safely


@dataclass(frozen=True)
class ReadPlan:
    """What one pass may read from a dead-letter queue.

    ``count`` is how many messages to ``get`` (0 when blocked). ``blocked`` is None when the
    read is proven safe, else why it is not (for ``dead_letters[].read_blocked``). ``budget``
    is the finite delivery limit in force when reads spend deliveries, else None. ``basis``
    says what the proof rests on.
    """

    count: int
    blocked: str | None
    budget: int | None
    basis: str = ""


def read_plan(
    queue: QueueStats, facts: BrokerFacts, peek_limit: int, already_parked_hint: int = 0
) -> ReadPlan:
    """Whether and how much of an owned dead-letter queue a pass may read (SPEC §1, §4).

    The read is ``get`` with ``ackmode=reject_requeue_true``, which returns each message to
    the queue. It must not cost a message:

    - classic queue (RabbitMQ): a requeueing read counts nothing. Safe.
    - quorum queue with no finite delivery limit in force (the reconciled dead-letter policy's
      ``delivery-limit: -1`` on 4.x; no policy, argument or default on 3.x): safe.
    - quorum queue with a finite limit in force (policy, ``x-delivery-limit``, or 4.x's default
      of 20): every requeueing read counts as a delivery (measured on 3.10 and 4.0). With no
      dead-letter exchange the broker drops a message once the limit is spent; with one, it
      dead-letters it onward, off this queue. Either way the letter would no longer be where it
      was, so the plan is blocked. Each message's delivery count is unknown until it is read,
      so no read is proven safe up front; ``budget`` carries the limit for ``within_budget``.
    - a queue with no type (LavinMQ) is classic unless its ``x-queue-type`` says otherwise, but
      a delivery limit set on it by policy or argument blocks it too (LavinMQ enforces
      delivery limits on its ordinary queues).
    - a stream or an unknown type: blocked (``get`` cannot read a stream; an unknown type
      proves nothing).

    ``count``: the pass reads past what is already parked (by identity, not position), so it
    needs up to ``already_parked_hint + peek_limit`` messages, the parked part capped at
    ``READ_PAST_PARKED_CAP``, and never more than the messages listed. Listed, not ready: a
    statistics sample taken while an earlier read had the letters checked out shows them
    unacknowledged for seconds after they are back (measured on 3.10 quorum queues), and
    asking ``get`` for more than is ready costs nothing: it stops at an empty queue.
    """
    name = quote_untrusted(queue.name)
    kind = _queue_kind(queue)
    if kind == "stream":
        return ReadPlan(0, f"{name} is a stream: a requeueing get cannot read it", None)
    if kind not in ("classic", "quorum"):
        reason = f"{name} has queue type {quote_untrusted(kind)}: reading it is not proven safe"
        return ReadPlan(0, reason, None)

    count = _read_count(queue, peek_limit, already_parked_hint)
    policy = _mapping(queue.effective_policy)
    arguments = _mapping(queue.arguments)
    limit_set = "delivery-limit" in policy or "x-delivery-limit" in arguments
    lavinmq = queue.type is None or facts.product.lower() == "lavinmq"
    if kind == "classic" and not (lavinmq and limit_set):
        return ReadPlan(count, None, None, "classic queue: a requeueing read counts no delivery")

    bound = delivery_limit_bound(queue, facts)
    label = "quorum queue" if kind == "quorum" else "queue"
    if not bound.known:
        return ReadPlan(0, f"{label} {name}: the delivery limit in force is unknown", None)
    if bound.value is None:
        return ReadPlan(
            count, None, None, f"{label} with no delivery limit in force: {bound.source}"
        )

    exchange = dead_letter_exchange_in_force(queue)
    consequence = (
        f"reading could dead-letter a message onward through exchange "
        f"{quote_untrusted(exchange)}, off this queue"
        if exchange is not None
        else "reading could drop a dead letter"
    )
    if facts.unlimited_delivery_limit:
        remedy = "the reconciled dead-letter policy (delivery-limit -1) is not in force"
    else:
        remedy = (
            "the reconciled dead-letter policy, which sets no delivery limit here "
            f"({facts.product} {facts.version} refuses delivery-limit -1), is not the one in force"
        )
    blocked = (
        f"{label} {name} has a delivery limit of {bound.value} in force ({bound.source}) and a "
        f"requeueing read counts as a delivery: {consequence}; {remedy}"
    )
    return ReadPlan(0, blocked, bound.value)


def within_budget(letters: Sequence[DeadLetter], limit: int, margin: int = BUDGET_MARGIN) -> bool:
    """After a read (a probe), whether reading these letters once more stays inside ``limit``.

    A letter's ``delivery_count`` (``x-delivery-count``) counts the deliveries before the read
    that showed it; absent means none (the broker writes it over any value a publisher set from
    the second delivery on). That read spent one more, the next read another: ``count + 2``.
    Reading again is inside the budget when at least ``margin`` deliveries remain after it:
    ``count + 2 + margin <= limit``. ``margin`` is at least 1, so no letter is ever read at its
    last permitted delivery; the default 2 also covers one off-by-one between broker versions
    (whether the limit counts the first delivery) or one concurrent reader. A negative limit is
    unlimited.

    This sees only the letters read. It is sound for the queue only when the caller also stops
    probing once it has answered False (every probe spends a delivery on the head); without
    that state across passes, do not probe: ``read_plan`` blocks such queues.
    """
    if limit < 0:
        return True
    reserve = max(1, margin)
    return all((letter.delivery_count or 0) + 2 + reserve <= limit for letter in letters)


def select_new(
    letters: Iterable[DeadLetter], parked_identities: set[str], peek_limit: int
) -> tuple[list[DeadLetter], int]:
    """The letters to park now, and how many distinct letters read were already parked.

    By identity, never by position: on 3.x a requeueing read moves a quorum message to the
    back, so the order changes from read to read. A letter read twice in one read (same
    identity) counts once. At most ``peek_limit`` new letters, in the order read; new letters
    past that are left for ``unread_count``.
    """
    limit = max(0, peek_limit)
    new: list[DeadLetter] = []
    seen: set[str] = set()
    already = 0
    for letter in letters:
        if letter.identity in seen:
            continue
        seen.add(letter.identity)
        if letter.identity in parked_identities:
            already += 1
        elif len(new) < limit:
            new.append(letter)
    return new, already


def unread_count(
    depth: int,
    letters: Iterable[DeadLetter],
    parked_identities: set[str],
    new: Iterable[DeadLetter],
) -> int:
    """How many of the queue's ``depth`` messages are neither parked nor being parked now:
    never read, or read but past ``peek_limit``. Measured and surfaced, never assumed parked."""
    accounted = set(parked_identities) | {letter.identity for letter in new}
    covered = sum(1 for letter in letters if letter.identity in accounted)
    return max(0, depth - covered)


def _queue_kind(queue: QueueStats) -> str:
    if isinstance(queue.type, str):
        return queue.type
    declared = _mapping(queue.arguments).get("x-queue-type")
    return declared if isinstance(declared, str) and declared else "classic"


def _read_count(queue: QueueStats, peek_limit: int, already_parked_hint: int) -> int:
    listed = max(0, queue.messages) if queue.counts_known else 0
    past = min(max(0, already_parked_hint), READ_PAST_PARKED_CAP)
    return min(listed, max(0, peek_limit) + past)


# --------------------------------------------------------------------------- small parts


def _mapping(value: object) -> Mapping[Any, Any]:
    # The management API renders an empty table as [] rather than {}.
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _nonempty_text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _size(value: object) -> int | None:
    """A count or size the broker states: a whole number >= 0 (possibly sent as a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (value.is_integer() and 0 <= value < _LONG):
        return None
    return int(value) if 0 <= value < _LONG else None


def _scalar(value: object) -> str | int | float | None:
    """A value fit for an identity: text, or a number a broker could send; else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return value if abs(value) < _LONG else None
    return int(value) if -_LONG < value < _LONG else None


def _utf8(text: str) -> bytes:
    # JSON can carry lone surrogates ("\udc80"); they are kept, byte for byte, not refused.
    return text.encode("utf-8", "surrogatepass")


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
