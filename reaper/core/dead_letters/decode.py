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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from reaper.core.domain import DeadLetter
from reaper.core.values import mapping, scalar, size

__all__ = ["DIGEST_BODY_LIMIT", "MESSAGE_ID_LIMIT", "HeldBody", "decode", "decoded_body", "utf8"]

#: A ``message_id`` longer than this is hashed into the identity rather than kept verbatim,
#: so an identity stays a short key whatever a publisher wrote.
MESSAGE_ID_LIMIT = 200

#: At most this many body bytes go into a digest identity (with the body's full size). The
#: management API's default ``truncate`` is 50,000: any read that returns at least this much
#: of a body gives the same identity.
DIGEST_BODY_LIMIT = 50_000

#: Version tag of the digest identity's layout; changing the layout must change the tag.
_DIGEST_LAYOUT = "dead-letter/1"


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
    truncated = not usable or stated != len(data)
    body_bytes = stated if stated is not None else len(data)
    death = _first_death(headers)
    message_id = _nonempty_text(properties.get("message_id"))

    return DeadLetter(
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
    )


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
