"""Dead letters as the management API returns them: decoding and identity (SPEC §1 (e)).

``reaper.broker`` returns each message a requeueing ``get`` read as the API's raw object;
:func:`decode` turns it into a :class:`~reaper.core.domain.DeadLetter` whatever it holds, and
gives it the identity it is parked under, once, across projects and passes. Pure: no I/O.

Everything a message carries is untrusted: its publisher wrote the body, the message id and
the ``x-death``/``x-first-death-*`` headers (:mod:`reaper.core.dead_letters.untrusted` shows
such values to a person).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from reaper.core.domain import DeadLetter
from reaper.core.values import mapping, scalar, size

__all__ = [
    "CUT_PREFIX",
    "DIGEST_BODY_LIMIT",
    "MESSAGE_ID_LIMIT",
    "TWIN_SEPARATOR",
    "VOLATILE_HEADERS",
    "HeldBody",
    "cut_words",
    "decode",
    "decode_read",
    "decoded_body",
    "envelope",
    "header_identity",
    "utf8",
]

#: Starts the marker a bounded read leaves where it cut a value (the broker adapter's
#: ``CUT_PREFIX``, kept equal by a test): a private-use character no broker field begins with.
CUT_PREFIX = "\ue000cut: "

#: A ``message_id`` longer than this is hashed into the identity rather than kept verbatim,
#: so an identity stays a short key whatever a publisher wrote.
MESSAGE_ID_LIMIT = 200

#: At most this many body bytes go into a digest identity (with the body's full size). The
#: management API's default ``truncate`` is 50,000: any read that returns at least this much
#: of a body gives the same identity.
DIGEST_BODY_LIMIT = 50_000

#: Version tag of the digest identity's layout; changing the layout must change the tag.
_DIGEST_LAYOUT = "dead-letter/1"

#: Version tag of the envelope's layout; changing the layout must change the tag.
_ENVELOPE_LAYOUT = "envelope/1"

#: Headers a requeueing read itself changes, so never part of an envelope. Measured on
#: RabbitMQ 3.10, 4.0 and 4.3: quorum queues write ``x-delivery-count`` on every read (3.10
#: and 4.0 count from 0 and 1), and 4.3 also ``x-acquired-count``. ``redelivered`` and
#: ``message_count`` (fields of the answer, not properties) change too and are left out.
VOLATILE_HEADERS = frozenset({"x-delivery-count", "x-acquired-count"})

#: Between a digest identity and its twin number: the second of two letters read with one
#: digest identity is ``sha256:<hex>#2``.
TWIN_SEPARATOR = "#"


class HeldBody(Protocol):
    """A body as held: a letter just read, or one parked (``body_encoding``: ``string`` or
    ``base64``)."""

    @property
    def body(self) -> str: ...

    @property
    def body_encoding(self) -> str: ...


@dataclass(frozen=True)
class _FirstDeath:
    queue: str | None
    reason: str | None
    exchange: str | None
    time: str | int | float | None


def decode(raw: Mapping[str, object], *, queue: str) -> DeadLetter:
    """One message dict from ``POST /api/queues/{vhost}/{queue}/get`` as a ``DeadLetter``.

    Total: any value of any shape gives a ``DeadLetter`` and never raises. ``queue`` is the
    dead-letter queue that was read (ours). A body is whole only when ``payload_bytes`` states
    exactly the size of what came back; otherwise ``body_truncated`` is True and the body is
    never replayable.
    """
    message = mapping(raw)
    properties = mapping(message.get("properties"))
    headers = mapping(properties.get("headers"))

    body, encoding, data, usable = _payload(message)
    stated = size(message.get("payload_bytes"))
    cut = cut_words(message)
    truncated = not usable or stated != len(data) or cut is not None
    body_bytes = stated if stated is not None else len(data)
    death = _first_death(headers)
    message_id = _nonempty_text(properties.get("message_id"))

    return DeadLetter(
        envelope=envelope(message),
        queue=queue,
        identity=_identity(message_id, death, data, body_bytes),
        message_id=message_id,
        origin_queue=death.queue,
        reason=death.reason,
        body=body,
        body_encoding=encoding,
        body_bytes=body_bytes,
        body_truncated=truncated,
        is_json_object=not truncated and _is_json_object(data),
        delivery_count=size(headers.get("x-delivery-count")),
        redelivered=message.get("redelivered") is True,
        cut=cut,
    )


def cut_words(value: object) -> str | None:
    """What of a message read was cut on reading (the markers
    :mod:`reaper.broker.bounded` leaves, :data:`CUT_PREFIX`), in words; None when nothing."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and item.startswith(CUT_PREFIX):
            found.append(item.removeprefix(CUT_PREFIX))
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    if not found:
        return None
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    return f"{sorted(found)[0]}{more}"


def decode_read(raw: Iterable[Mapping[str, object]], *, queue: str) -> list[DeadLetter]:
    """Every message of one read as a ``DeadLetter``, twins told apart.

    Letters with no message id whose digest identities are equal (same origin, first death,
    size and body: a publisher sent the same body twice and both died in the same second) are
    numbered in the order read: the first keeps its identity, the n-th becomes
    ``<identity>#<n>``. They are distinct messages, so each is parked once; the numbers count
    them and name none in particular (a read may return them in any order). Letters sharing a
    message id are one letter: a publisher names its message by it (SPEC §1).
    """
    letters = [decode(message, queue=queue) for message in raw]
    seen: dict[str, int] = {}
    numbered: list[DeadLetter] = []
    for letter in letters:
        if not letter.identity.startswith("sha256:"):
            numbered.append(letter)
            continue
        n = seen[letter.identity] = seen.get(letter.identity, 0) + 1
        if n > 1:
            letter = replace(letter, identity=f"{letter.identity}{TWIN_SEPARATOR}{n}")
        numbered.append(letter)
    return numbered


def header_identity(raw: Mapping[str, object]) -> str | None:
    """The identity of a message read without its body, where its headers alone give it: a
    message id (``msg:`` or ``msg-sha256:``, exactly what :func:`decode` gives). None for a
    letter with no message id, whose identity needs its body (see :func:`envelope`)."""
    properties = mapping(mapping(raw).get("properties"))
    message_id = _nonempty_text(properties.get("message_id"))
    if message_id is None:
        return None
    return _identity(message_id, _FirstDeath(None, None, None, None), b"", 0)


def envelope(raw: Mapping[str, object]) -> str | None:
    """What tells a letter apart from what a read returns without its body (``truncate`` 0:
    measured on RabbitMQ 3.10, 4.0 and 4.3, the payload comes back empty and everything else
    whole), or None when that is not enough to go on.

    ``env-sha256:<hex>``: a digest of the body's full size (``payload_bytes``), the exchange and
    routing key it reached this queue by, every property and every header (``x-death`` whole,
    ``x-first-death-*``, ``x-last-death-*``, the publisher's own) but those a read changes
    (:data:`VOLATILE_HEADERS`), as canonical JSON. None with no size stated or no time at all (no
    ``x-death`` time, no ``timestamp``): letters published straight to the queue would share an
    envelope too easily, so they are read whole. Twins (same headers, second and size) share
    one: it is counted, never one letter's name (:func:`reaper.core.dead_letters.quiet_read`).
    """
    message = mapping(raw)
    properties = mapping(message.get("properties"))
    headers = mapping(properties.get("headers"))
    stated = size(message.get("payload_bytes"))
    if stated is None or not _carries_time(properties, headers):
        return None
    fields = {
        "layout": _ENVELOPE_LAYOUT,
        "payload_bytes": stated,
        "exchange": message.get("exchange"),
        "routing_key": message.get("routing_key"),
        "properties": {k: v for k, v in properties.items() if k != "headers"},
        "headers": {k: v for k, v in headers.items() if k not in VOLATILE_HEADERS},
    }
    try:
        text = json.dumps(fields, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return None  # not what a JSON answer holds: nothing to go on
    return "env-sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def _carries_time(properties: Mapping[str, object], headers: Mapping[str, object]) -> bool:
    if scalar(properties.get("timestamp")) is not None:
        return True
    deaths = headers.get("x-death")
    entries = deaths if isinstance(deaths, list | tuple) else ()
    return any(isinstance(e, Mapping) and scalar(e.get("time")) is not None for e in entries)


def decoded_body(letter: HeldBody) -> bytes:
    """The body's bytes as far as they are held: base64 decoded, or the text as UTF-8. A
    base64 body that does not decode gives its text's bytes (such a body is never
    replayable)."""
    body, encoding = letter.body, letter.body_encoding
    if encoding == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            pass
    return utf8(body)


def _payload(message: Mapping[str, object]) -> tuple[str, str, bytes, bool]:
    """(body as given, its encoding, its bytes, whether those bytes are the body as sent)."""
    payload = message.get("payload")
    encoding = message.get("payload_encoding")
    if not isinstance(payload, str):
        return "", "string", b"", False
    if encoding == "base64":
        try:
            return payload, "base64", base64.b64decode(payload, validate=True), True
        except (binascii.Error, ValueError):
            return payload, "base64", utf8(payload), False
    # Only an explicit "string" is the body as sent; anything else is a guess.
    return payload, "string", utf8(payload), encoding == "string"


def _first_death(headers: Mapping[str, object]) -> _FirstDeath:
    """The first death as the headers tell it: ``x-first-death-*``, else ``x-death``.

    ``x-death`` holds one entry per (queue, reason); the one matching the first death gives its
    time. Without ``x-first-death-*`` headers, the list's first entry stands in.
    """
    queue = _nonempty_text(headers.get("x-first-death-queue"))
    reason = _nonempty_text(headers.get("x-first-death-reason"))
    exchange = _text(headers.get("x-first-death-exchange"))
    deaths = headers.get("x-death")
    entries = deaths if isinstance(deaths, list | tuple) else ()
    entry: Mapping[str, object] = {}
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
        time=scalar(entry.get("time")),
    )


def _is_json_object(data: bytes) -> bool:
    """A valid JSON object (``{...}``) in strict UTF-8; NaN and Infinity are not JSON."""
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_not_json)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict)


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


def _identity(message_id: str | None, death: _FirstDeath, data: bytes, body_bytes: int) -> str:
    """The key a dead letter is parked under, once, across projects and passes (SPEC §1):
    ``msg:<message_id>`` for a message id of at most 200 printable characters, ``msg-sha256:<hex>``
    for any other; with none, ``sha256:<hex>``, a digest of the origin queue, the first death's
    reason, exchange and time, the body's full size and (at most) its first 50,000 bytes. Two
    identical bodies that died on one queue, for one reason, in one instant share a digest:
    :func:`decode_read` numbers such twins (``#2``, ``#3``, ...) so that each is parked. Never part
    of it: what changes when the same message is read again (``x-delivery-count``,
    ``redelivered``, ``x-death`` counts, the queue read and its depth). The prefixes differ, so no
    message id can collide with a digest.
    """
    if message_id is not None:
        if len(message_id) <= MESSAGE_ID_LIMIT and message_id.isprintable():
            return f"msg:{message_id}"
        return "msg-sha256:" + hashlib.sha256(utf8(message_id)).hexdigest()
    fields = [_DIGEST_LAYOUT, death.queue, death.reason, death.exchange, death.time, body_bytes]
    head = json.dumps(fields, ensure_ascii=True, separators=(",", ":"))
    digest = hashlib.sha256(head.encode("ascii"))
    digest.update(b"\n")  # the JSON head holds no raw newline: the framing is unambiguous
    digest.update(data[:DIGEST_BODY_LIMIT])
    return "sha256:" + digest.hexdigest()


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _nonempty_text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def utf8(text: str) -> bytes:
    """Text as UTF-8; JSON can carry lone surrogates (``"\\udc80"``), kept byte for byte."""
    return text.encode("utf-8", "surrogatepass")
