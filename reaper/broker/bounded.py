"""The management API's answers read with bounds, purely, whatever they hold (SPEC §11).

An answer is fed in as it arrives (:class:`BoundedAnswer`) and only a bounded copy is kept: a
string longer than :data:`MAX_TEXT_BYTES` and a value nested deeper than :data:`MAX_DEPTH` are
each replaced, before anything holds them, by a marker string (:data:`CUT_PREFIX` and what
was cut); what is kept is refused past :data:`MAX_KEPT_BYTES`, what arrives past
:data:`MAX_RECEIVED_BYTES`. The kept copy then decodes (:func:`decoded`) without recursion
errors or integers the interpreter refuses: a header nested 1,000 tables deep (7 KB) once
ended every pass with a ``RecursionError``, and a 2 MiB header took 8 MB of memory per letter.
"""

from __future__ import annotations

import json
import logging
import re
import zlib
from array import array
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

_log = logging.getLogger("reaper.broker")

__all__ = [
    "CUT_PREFIX",
    "ENCODINGS",
    "INFLATE_STEP",
    "MAX_DEPTH",
    "MAX_KEPT_BYTES",
    "MAX_RECEIVED_BYTES",
    "MAX_TEXT_BYTES",
    "Answer",
    "AnswerTooLarge",
    "BoundedAnswer",
    "decoded",
    "read_answer",
]

#: The deepest value kept. What the reaper reads nests at most 7 deep (a ``get``: the list, a
#: message, its properties, headers, ``x-death``, an entry, a table in it); deeper is cut.
MAX_DEPTH: Final = 32

#: The longest string kept, in bytes as the answer spells it (escapes included). A body comes
#: back cut by the broker at 50,000 bytes (``truncate``), as base64 at most 66,668 characters
#: (JSON escapes of a text body up to six times that): anything longer is a header value or a
#: name no rule of the reaper needs whole.
MAX_TEXT_BYTES: Final = 320 * 1024

#: The most an answer may keep once cut: a page of 500 queues is about 1 MB, a ``get`` of 1,100
#: letters cut to 50,000-byte bodies about 75 MB at worst.
MAX_KEPT_BYTES: Final = 96 * 1024 * 1024

#: The most an answer may send, cut or not (2 MiB headers on 1,100 letters are 2.3 GB): past it
#: the answer is refused rather than read on.
MAX_RECEIVED_BYTES: Final = 4 * 1024 * 1024 * 1024

#: The most a compressed answer inflates to at a time. A 2 MiB header of one repeated
#: character gzips to some 2 KB, so one chunk as sent inflated whole held 21 MB at once
#: (measured: 10 such letters in one ``get``, RabbitMQ 3.10, peak RSS 98 MB against 57).
INFLATE_STEP: Final = 256 * 1024

#: The encodings the client asks for (``Accept-Encoding``) and inflates here.
ENCODINGS: Final = "gzip, deflate"

#: The longest integer kept as a number (the interpreter refuses to parse past 4,300 digits).
_MAX_DIGITS: Final = 100

#: Starts every marker of a cut value: a private-use character no broker field begins with.
#: A publisher may write one too; its letter is then only taken as cut, never as whole.
CUT_PREFIX: Final = "\ue000cut: "

_STRUCTURE = re.compile(rb'[\[\]{}"]')
#: A string's content up to its closing quote, escapes included (a backslash that ends a chunk
#: is left to the next one).
_IN_STRING = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)

#: The most one fast step takes in (:meth:`BoundedAnswer._whole`): a string it takes in whole is
#: no longer, so none of them can pass the text cap (never above it). 0: every step token by
#: token.
WINDOW: Final = 64 * 1024
#: Whole strings and what stands between them (a backslash there is structure, as it is to
#: :meth:`BoundedAnswer._structure`): what a fast step takes in.
_WHOLE = re.compile(rb'(?:[^"]+|"[^"\\]*(?:\\.[^"\\]*)*")*', re.DOTALL)
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
#: What is not a bracket, deleted; then an opening bracket is +1 and a closing one -1 (signed).
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEPS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


@dataclass(frozen=True)
class Answer:
    """An answer as read: its status and what was kept of its body."""

    status_code: int
    reason_phrase: str
    kept: bytes
    received: int
    #: The body's size as the answer declared it (``content-length``, without compression).
    declared: int | None
    #: Why the body was not read whole (it passed a cap), else None.
    too_large: str | None = None

    def log(self, request: str, took_ms: float) -> None:
        """``-v``: the request, what came back and how long it took."""
        _log.debug(
            "broker %s: HTTP %d, %d bytes (%.1f ms)",
            request,
            self.status_code,
            self.received,
            took_ms,
        )

    def text_start(self) -> str:
        return self.kept[:60].decode("utf-8", "replace").replace("\n", " ")


class AnswerTooLarge(ValueError):
    """The answer kept or sent more than its cap; ``why`` says which, in words."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _marker(what: str) -> bytes:
    return json.dumps(CUT_PREFIX + what, ensure_ascii=True).encode("ascii")


class BoundedAnswer:
    """A JSON answer fed chunk by chunk (:meth:`feed`), kept cut to its bounds (:meth:`kept`).
    Raises :class:`AnswerTooLarge` from :meth:`feed` once past a cap. Whole strings and
    structure far from any bound are taken in a window at a time (a page of 500 queues: 2.4
    ms, against 33 ms token by token); near one, a token at a time."""

    def __init__(self, *, kept_cap: int = MAX_KEPT_BYTES, text_cap: int = MAX_TEXT_BYTES) -> None:
        self._out = bytearray()
        self._kept_cap = kept_cap
        self._text_cap = text_cap
        self.received = 0
        #: How many values were cut (strings and nested values).
        self.cuts = 0
        self._depth = 0
        self._skip_from = 0  # the depth a too-deep value opened at; 0 when none
        self._in_string = False
        self._escape = False  # a backslash ended the last chunk, inside a string
        self._string_at = 0  # where the string being read starts in the kept copy
        self._string_bytes = 0
        self._string_cut = False

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > MAX_RECEIVED_BYTES:
            raise AnswerTooLarge(f"sent more than {MAX_RECEIVED_BYTES} bytes")
        at = slow_until = 0
        while at < len(chunk):
            if self._in_string:
                at = self._string(chunk, at)
            elif self._skip_from or at < slow_until:
                at = self._structure(chunk, at)
            else:
                end, whole = self._whole(chunk, at)
                if whole:
                    at = end
                else:  # something in it nears a bound: token by token up to its end
                    slow_until = max(end, at + 1)
        if len(self._out) > self._kept_cap:
            raise AnswerTooLarge(
                f"holds more than {self._kept_cap} bytes once values past "
                f"{self._text_cap} bytes are cut"
            )

    def kept(self) -> bytes:
        return bytes(self._out)

    def _whole(self, chunk: bytes, at: int) -> tuple[int, bool]:
        """The fast step, from ``at`` outside any string: whole strings and structure within
        :data:`WINDOW`, kept as they are when no bound is near (no string can be past the
        text cap, no bracket opens past :data:`MAX_DEPTH` nor closes past the top). Returns
        where they end and whether they were kept."""
        limit = min(len(chunk), at + min(WINDOW, self._text_cap))
        brace = chunk.rfind(b"}", at, limit)  # most likely a value's end, outside any string
        end = brace + 1 if brace >= at else limit
        run = chunk[at:end]
        outside = _STRINGS.sub(b"", run)
        if b'"' in outside:  # it was not: up to the string it leaves open
            end = _WHOLE.match(chunk, at, limit).end()  # type: ignore[union-attr]
            run = chunk[at:end]
            outside = _STRINGS.sub(b"", run)
        if not run:
            return end, False
        steps = array("b", outside.translate(_DEPTH_STEPS, _NOT_BRACKETS))
        if steps:
            depths = list(accumulate(steps, initial=self._depth))
            if max(depths) > MAX_DEPTH or min(depths) < 0:
                return end, False
            self._depth = depths[-1]
        self._out += run
        return end, True

    def _keep(self, data: bytes) -> None:
        if not self._skip_from and not self._string_cut:
            self._out += data

    def _structure(self, chunk: bytes, at: int) -> int:
        found = _STRUCTURE.search(chunk, at)
        end = len(chunk) if found is None else found.start()
        self._keep(chunk[at:end])
        if found is None:
            return end
        char = chunk[end : end + 1]
        if char == b'"':
            self._in_string = True
            self._string_at = len(self._out)
            self._string_bytes = 0
            self._keep(char)
        elif char in (b"[", b"{"):
            self._depth += 1
            if not self._skip_from and self._depth > MAX_DEPTH:
                self._skip_from = self._depth
                self.cuts += 1
                self._out += _marker(f"a value nested past {MAX_DEPTH} levels")
            else:
                self._keep(char)
        else:
            if self._skip_from == self._depth:
                self._skip_from = 0
            else:
                self._keep(char)
            self._depth -= 1
        return end + 1

    def _string(self, chunk: bytes, at: int) -> int:
        if self._escape:
            self._escape = False
            self._grow(chunk[at : at + 1])
            return at + 1
        run = _IN_STRING.match(chunk, at)
        end = len(chunk) if run is None else run.end()
        self._grow(chunk[at:end])
        if end == len(chunk):
            return end
        char = chunk[end : end + 1]
        if char == b"\\":
            self._escape = True
            self._grow(char)
            return end + 1
        self._in_string = False
        if self._string_cut:
            self._string_cut = False
            if not self._skip_from:
                self._out += _marker(f"a text of {self._string_bytes} bytes")
        else:
            self._keep(char)
        return end + 1

    def _grow(self, data: bytes) -> None:
        self._string_bytes += len(data)
        if not (self._string_cut or self._skip_from) and self._string_bytes > self._text_cap:
            self._string_cut = True
            self.cuts += 1
            del self._out[self._string_at :]
        self._keep(data)


async def _inflated(raw: AsyncIterator[bytes], encoding: str) -> AsyncIterator[bytes]:
    """The answer's bytes as JSON, at most :data:`INFLATE_STEP` at a time."""
    if encoding == "identity":
        async for chunk in raw:
            yield chunk
        return
    if encoding not in ("gzip", "deflate"):
        raise AnswerTooLarge(f"came in an encoding that was not asked for ({encoding})")
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or a zlib header, either
    async for chunk in raw:
        while chunk:
            out = inflater.decompress(chunk, INFLATE_STEP)
            chunk = inflater.unconsumed_tail
            if out:
                yield out
    rest = inflater.flush()
    if rest:
        yield rest


def decoded(kept: bytes) -> object:
    """The kept copy as JSON values. Raises ``ValueError`` when it is not JSON."""
    text = kept.decode("utf-8", "replace")
    return json.loads(text, parse_int=_integer)


def _integer(digits: str) -> object:
    if len(digits.lstrip("-")) > _MAX_DIGITS:
        return CUT_PREFIX + f"an integer of {len(digits)} digits"
    return int(digits)


async def read_answer(
    raw: AsyncIterator[bytes],
    headers: Mapping[str, str],
    status: int,
    phrase: str,
    *,
    inflate: bool = True,
) -> Answer:
    """An answer read as it arrives (``raw``: as sent, still compressed unless not
    ``inflate``), inflated a bounded step at a time, only a bounded copy kept: no answer is
    ever held whole."""
    bounded = BoundedAnswer()
    too_large: str | None = None
    encoding = headers.get("content-encoding", "identity").strip().lower()
    try:
        async for chunk in _inflated(raw, encoding if inflate else "identity"):
            bounded.feed(chunk)
    except AnswerTooLarge as exc:
        too_large = exc.why
    except zlib.error as exc:
        too_large = f"could not be inflated ({encoding}: {exc})"
    size = headers.get("content-length", "")
    identity = encoding == "identity"
    declared = int(size) if size.isdigit() and identity else None
    kept, received = bounded.kept(), bounded.received
    return Answer(status, phrase, kept, received, declared, too_large)
