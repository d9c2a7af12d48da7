"""No management API answer ends a pass (SPEC §11): hostile answers through respx, at every
endpoint a pass reads (deep nesting, huge strings, NUL, lone surrogates, wrong types in every
field, missing fields, non-JSON), and the pass still returns its result and its report.

A real broker will not produce most of these shapes: the live half (a 1,000-deep header
published with pika) is in ``tests/integration/test_hostile_input_live.py``.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any
from unittest.mock import patch

import httpx
import respx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaper.broker import bounded as bounded_module
from reaper.broker.bounded import (
    CUT_PREFIX,
    INFLATE_STEP,
    MAX_TEXT_BYTES,
    BoundedAnswer,
    decoded,
    read_answer,
)
from reaper.broker.client import ManagementClient
from reaper.config import load_config
from reaper.core.dead_letters.decode import CUT_PREFIX as CORE_CUT_PREFIX
from reaper.edges.report import render_text
from reaper.edges.report_json import to_json
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources
from reaper.testing.memory import MemoryJobQueue

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
URL = "http://broker.test:15672"
DLQ = "vibey.jobs.dead"
DEEP = 1_000


def letter(message_id: str, header: object = "x") -> dict[str, Any]:
    return {
        "payload": '{"job": 1}',
        "payload_bytes": 10,
        "payload_encoding": "string",
        "redelivered": False,
        "exchange": "",
        "routing_key": DLQ,
        "message_count": 1,
        "properties": {
            "message_id": message_id,
            "timestamp": 1764590000,
            "headers": {
                "x-first-death-queue": "vibey.jobs",
                "x-first-death-reason": "rejected",
                "x-death": [{"queue": "vibey.jobs", "reason": "rejected", "count": 1}],
                "publisher": header,
            },
        },
    }


def dlq_item() -> dict[str, Any]:
    return {
        "name": DLQ,
        "vhost": "/",
        "type": "classic",
        "messages_ready": 2,
        "messages_unacknowledged": 0,
        "consumers": 0,
        "policy": None,
        "effective_policy_definition": {},
        "arguments": {},
        "state": "running",
        "node": "rabbit@h",
    }


def baseline() -> dict[tuple[str, str], Any]:
    """The answers of a broker with one owned dead-letter queue holding two letters."""
    return {
        ("GET", "/api/overview"): {
            "rabbitmq_version": "3.10.8",
            "product_name": "RabbitMQ",
            "node": "rabbit@h",
        },
        ("GET", "/api/nodes"): [{"name": "rabbit@h", "running": True, "config_files": []}],
        ("GET", "/api/queues/%2F"): {"items": [dlq_item()], "page_count": 1, "page": 1},
        ("GET", f"/api/queues/%2F/{DLQ}"): dlq_item(),
        ("GET", "/api/vhosts/%2F/channels"): [],
        ("GET", "/api/consumers/%2F"): [],
        ("GET", "/api/policies/%2F"): [],
        ("POST", f"/api/queues/%2F/{DLQ}/get"): [letter("m-1"), letter("m-2")],
    }


def paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value (the value itself first)."""
    yield at
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from paths(inner, (*at, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from paths(inner, (*at, index))


def deep(n: int) -> str:
    """A stand-in for a value nested ``n`` deep, written out by :func:`raw` (the test's own
    encoder would recurse as deep)."""
    return f"@@deep-{n}@@"


def raw(value: Any) -> bytes:
    """The answer's bytes, with each :func:`deep` stand-in nested for real."""
    text = json.dumps(value, ensure_ascii=True)
    for match in set(re.findall(r'"@@deep-(\d+)@@"', text)):
        n = int(match)
        nested = '{"t": [' * (n // 2) + '"bottom"' + "]}" * (n // 2)
        text = text.replace(f'"@@deep-{n}@@"', nested)
    return text.encode("ascii")


hostile_values = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            -1,
            2**80,
            1.5,
            float("inf"),
            [],
            {},
            "",
            "\x00",
            "\udc80",
            "\ud800x",
            "\x1b[2J\x1b]0;T\x07",
            CORE_CUT_PREFIX + "forged",
        ]
    ),
    st.builds(lambda n: deep(n), st.integers(min_value=30, max_value=DEEP)),
    st.builds(
        lambda c, n: c * n, st.sampled_from(["A", "\x00", "\u202e"]), st.integers(0, 200_000)
    ),
    st.text(max_size=30),
)
MISSING = object()


@st.composite
def hostile_answers(draw: st.DrawFn) -> tuple[dict[tuple[str, str], Any], dict[str, bytes]]:
    """The baseline with one hostile change: a field replaced or removed, or an endpoint's
    whole body replaced by something that is not its answer."""
    answers = baseline()
    endpoint = draw(st.sampled_from(sorted(answers)))
    bodies: dict[str, bytes] = {}
    kind = draw(st.sampled_from(["field", "missing", "body"]))
    if kind == "body":
        bodies[f"{endpoint[0]} {endpoint[1]}"] = draw(
            st.sampled_from(
                [
                    b"<html>502 Bad Gateway</html>",
                    b"\xff\xfe\x00",
                    b'{"items": [',
                    b"[" * 5000 + b"]" * 5000,
                    b'"' + b"A" * 3_000_000 + b'"',
                    b"1" * 10_000,
                    b"null",
                ]
            )
        )
        return answers, bodies
    places = list(paths(answers[endpoint]))
    place = draw(st.sampled_from(places))
    value = MISSING if kind == "missing" else draw(hostile_values)
    answers[endpoint] = replaced(answers[endpoint], place, value)
    return answers, bodies


def replaced(value: Any, place: tuple[Any, ...], new: Any) -> Any:
    if not place:
        return None if new is MISSING else new
    result = copy.deepcopy(value)
    holder = result
    for step in place[:-1]:
        holder = holder[step]
    if new is MISSING:
        del holder[place[-1]]
    else:
        holder[place[-1]] = new
    return result


def router(answers: dict[tuple[str, str], Any], bodies: dict[str, bytes]) -> respx.MockRouter:
    mock = respx.mock(base_url=URL, assert_all_called=False)

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.split(b"?")[0].decode("ascii")
        key = (request.method, path)
        if request.method in ("PUT", "DELETE"):
            return httpx.Response(204)
        if f"{key[0]} {key[1]}" in bodies:
            return httpx.Response(200, content=bodies[f"{key[0]} {key[1]}"])
        if key not in answers:
            return httpx.Response(404, json={"error": "Object Not Found", "reason": "Not Found"})
        return httpx.Response(200, content=raw(answers[key]))

    mock.route().mock(side_effect=answer)
    return mock


async def a_pass(answers: dict[tuple[str, str], Any], bodies: dict[str, bytes]) -> Any:
    env = {
        "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "0",
        "REAPER_BUS__MANAGEMENT_URL": URL,
    }
    config = load_config(None, env).settings
    store = MemoryJobQueue(clock=lambda: NOW)
    with router(answers, bodies):
        async with ManagementClient(URL, "guest", "guest") as broker:
            result = await run_pass(config, Sources(store=store, broker=broker), clock=lambda: NOW)
    return result, store


async def test_the_baseline_parks_both_letters() -> None:
    result, _ = await a_pass(baseline(), {})
    assert [d.parked_new for d in result.dead_letters.queues] == [2], result.problems()


async def test_a_thousand_deep_header_is_cut_and_every_letter_parked() -> None:
    answers = baseline()
    answers[("POST", f"/api/queues/%2F/{DLQ}/get")] = [letter("m-1", deep(DEEP)), letter("m-2")]
    result, _ = await a_pass(answers, {})
    assert [d.parked_new for d in result.dead_letters.queues] == [2], result.problems()
    details = [r.verdict.detail for r in result.verdicts if r.verdict.action.value == "park"]
    assert any("cut on reading (a value nested past 32 levels)" in d for d in details), details


async def test_an_item_that_is_not_a_message_is_parked_opaque() -> None:
    answers = baseline()
    answers[("POST", f"/api/queues/%2F/{DLQ}/get")] = [letter("m-1"), ["not", "a", "message"]]
    result, _ = await a_pass(answers, {})
    assert [d.parked_new for d in result.dead_letters.queues] == [2], result.problems()


async def test_a_name_too_long_to_send_back_fails_that_request_not_the_pass() -> None:
    """Found by the property below: a queue whose name, read back, is 21,831 NULs makes the
    next request's URL (each NUL sent as %00) longer than httpx will send."""
    answers = baseline()
    answers[("GET", f"/api/queues/%2F/{DLQ}")] = {**dlq_item(), "name": "\x00" * 21_831}
    result, _ = await a_pass(answers, {})
    assert result.status() and render_text(result, wide=True)
    said = json.dumps(to_json(result))
    assert "InvalidURL: URL too long" in said and "\\u0000" * 300 not in said


async def test_a_name_read_back_with_a_lone_surrogate_is_asked_for_not_raised() -> None:
    """Found by the property below: a lone surrogate cannot be percent-encoded as UTF-8."""
    answers = baseline()
    answers[("GET", f"/api/queues/%2F/{DLQ}")] = {**dlq_item(), "name": "x\udc80"}
    result, _ = await a_pass(answers, {})
    assert result.status() and render_text(result, wide=True)
    json.dumps(to_json(result))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(hostile_answers())
async def test_no_answer_ends_a_pass(
    case: tuple[dict[tuple[str, str], Any], dict[str, bytes]],
) -> None:
    answers, bodies = case
    result, _ = await a_pass(answers, bodies)
    assert result.status()
    assert render_text(result)
    assert render_text(result, wide=True)
    json.dumps(to_json(result))


def _fed(data: bytes, chunk: int, text_cap: int = MAX_TEXT_BYTES) -> tuple[bytes, int]:
    """What a bounded read of ``data``, fed ``chunk`` bytes at a time, keeps, and its cuts."""
    bounded = BoundedAnswer(text_cap=text_cap)
    for at in range(0, len(data), chunk):
        bounded.feed(data[at : at + chunk])
    return bounded.kept(), bounded.cuts


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(), lambda v: st.lists(v) | st.dictionaries(st.text(), v)
    ),
    st.integers(1, 9),
)
def test_a_bounded_read_keeps_what_is_within_bounds(value: Any, chunk: int) -> None:
    data = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    kept, _ = _fed(data, chunk)
    assert decoded(kept) == json.loads(data)


#: Pieces an answer is drawn from: the bytes the read treats apart (brackets, quotes,
#: backslashes), whole strings with escapes, and filler.
_PIECES = st.sampled_from(
    [
        b"[",
        b"]",
        b"{",
        b"}",
        b'"',
        b"\\",
        b'\\"',
        b'"ab"',
        b'"a\\"b"',
        b'"}"',
        b"x",
        b",",
        b":",
        b"1",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    st.integers(0, 40),
    st.lists(_PIECES, max_size=200).map(b"".join),
    st.integers(0, 40),
    st.integers(1, 70),
    st.integers(1, 40),
)
def test_the_fast_read_keeps_exactly_what_the_read_token_by_token_keeps(
    opened: int, middle: bytes, closed: int, chunk: int, text_cap: int
) -> None:
    """Whatever the bytes (deep, unbalanced, strings past the cap, escapes across chunks),
    taking in whole strings and structure at once keeps the same bytes and cuts the same
    values as reading them a token at a time."""
    data = b"[" * opened + middle + b"]" * closed
    fast = _fed(data, chunk, text_cap)
    with patch.object(bounded_module, "WINDOW", 0):
        assert _fed(data, chunk, text_cap) == fast


# ------------------------------------------------------------------------ compressed answers


async def _chunks(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def test_a_compressed_answer_is_inflated_a_bounded_step_at_a_time() -> None:
    """2 MiB of one character gzips to some 2 KB: one chunk as sent must not inflate whole."""
    answer = json.dumps([{"headers": {"big": "h" * (8 * 1024 * 1024)}, "payload": "{}"}])
    sent = gzip.compress(answer.encode())
    assert len(sent) < 64 * 1024  # one chunk as it arrives
    steps: list[int] = []

    class Counting(BoundedAnswer):
        def feed(self, chunk: bytes) -> None:
            steps.append(len(chunk))
            super().feed(chunk)

    with patch("reaper.broker.bounded.BoundedAnswer", Counting):
        read = await read_answer(_chunks(sent), {"content-encoding": "gzip"}, 200, "OK")
    assert max(steps) <= INFLATE_STEP and sum(steps) == len(answer)
    [message] = decoded(read.kept)  # type: ignore[misc]
    assert message["headers"]["big"].startswith(CUT_PREFIX) and read.too_large is None


async def test_a_broken_or_unasked_encoding_is_named_never_raised() -> None:
    broken = await read_answer(_chunks(b"not gzip"), {"content-encoding": "gzip"}, 200, "OK")
    assert broken.too_large is not None and "could not be inflated (gzip" in broken.too_large
    other = await read_answer(_chunks(b"x"), {"content-encoding": "br"}, 200, "OK")
    assert other.too_large == "came in an encoding that was not asked for (br)"
