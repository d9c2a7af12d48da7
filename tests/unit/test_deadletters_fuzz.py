"""Dead letters are untrusted input: decoding and showing them is total and bounded."""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaper.core.dead_letters.decode import decode
from reaper.core.dead_letters.parking import (
    gate_prompt,
    park_fields,
    park_verdict,
    replay_decision,
)
from reaper.core.dead_letters.untrusted import CUT_MARKER, quote_untrusted
from reaper.core.domain import DeadLetter

DLQ = "vibey.jobs.dead"
SLOW = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50)
json_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)

#: Long, hostile strings: control characters, bidi overrides, lone surrogates, up to ~100 KB.
hostile_text = st.one_of(
    st.text(max_size=300),
    st.text(
        alphabet=st.characters(categories=["Cc", "Cf", "Zl", "Zp", "Zs", "Co", "Cn", "Lu", "Po"]),
        max_size=300,
    ),
    st.builds(
        lambda chunk, n: chunk * n,
        st.sampled_from(["\x00", "\x1b[2J", "\u202e", "\udc80", "\ud800", "A", "vibey.", "\n\r"]),
        st.integers(min_value=0, max_value=50_000),
    ),
)
maybe = st.one_of(hostile_text, json_like)


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["bytes", "invalid-utf8", "text", "json", "wrong"]))
    if kind == "bytes":
        data = draw(st.binary(max_size=2000))
        payload: object = base64.b64encode(data).decode()
        encoding: object = "base64"
        size: object = draw(st.sampled_from([len(data), len(data) + 7, None]))
    elif kind == "invalid-utf8":
        data = draw(st.binary(max_size=500))
        payload = data.decode("utf-8", "surrogateescape")
        encoding = "string"
        size = len(data)
    elif kind == "text":
        payload = draw(hostile_text)
        encoding = draw(st.sampled_from(["string", "base64", None, 3]))
        size = draw(st.one_of(st.integers(), st.just(len(str(payload).encode("utf-8", "replace")))))
    elif kind == "json":
        payload = '{"a": ' + draw(st.sampled_from(["1", '"x"', "[1, {}]", "NaN"])) + "}"
        encoding = "string"
        size = draw(st.sampled_from([len(payload), 50_000]))
    else:
        payload, encoding, size = draw(json_like), draw(json_like), draw(json_like)
    return {"payload": payload, "payload_encoding": encoding, "payload_bytes": size}


death_entry = st.fixed_dictionaries(
    {},
    optional={
        "queue": maybe,
        "reason": maybe,
        "count": json_like,
        "exchange": maybe,
        "routing-keys": json_like,
        "time": json_like,
    },
)
headers = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "x-death": st.one_of(
                st.lists(st.one_of(death_entry, json_like), max_size=4), json_like
            ),
            "x-first-death-queue": maybe,
            "x-first-death-reason": maybe,
            "x-first-death-exchange": maybe,
            "x-delivery-count": json_like,
            "x-big": hostile_text,
        },
    ),
    json_like,
)
properties = st.one_of(
    st.fixed_dictionaries(
        {"headers": headers},
        optional={"message_id": maybe, "timestamp": json_like, "content_type": maybe},
    ),
    json_like,
)
envelope = st.fixed_dictionaries(
    {
        "properties": properties,
        "redelivered": json_like,
        "exchange": maybe,
        "routing_key": maybe,
        "message_count": json_like,
    }
)
messages = st.builds(lambda body, rest: {**body, **rest}, payloads(), envelope)


def untrusted_values(letter: DeadLetter) -> list[str]:
    return [v for v in (letter.origin_queue, letter.reason, letter.message_id, letter.body) if v]


def check_letter(letter: DeadLetter) -> None:
    assert letter.queue == DLQ
    assert letter.identity.startswith(("msg:", "msg-sha256:", "sha256:"))
    assert len(letter.identity) <= 4 + 200
    assert isinstance(letter.body, str) and letter.body_encoding in ("string", "base64")
    assert isinstance(letter.body_bytes, int) and letter.body_bytes >= 0
    assert not (letter.is_json_object and letter.body_truncated)
    assert letter.delivery_count is None or letter.delivery_count >= 0
    assert isinstance(letter.redelivered, bool)


@SLOW
@given(json_like)
def test_decode_is_total_over_anything(raw: Any) -> None:
    check_letter(decode(raw, queue=DLQ))


@SLOW
@given(
    st.dictionaries(
        st.sampled_from(
            ["payload", "payload_encoding", "payload_bytes", "properties", "redelivered"]
        ),
        json_like,
    )
)
def test_decode_is_total_over_known_keys_holding_anything(raw: dict[str, Any]) -> None:
    check_letter(decode(raw, queue=DLQ))


@SLOW
@given(messages)
def test_decode_is_total_and_identity_deterministic(raw: dict[str, Any]) -> None:
    first = decode(raw, queue=DLQ)
    check_letter(first)
    assert decode(raw, queue=DLQ) == first


@SLOW
@given(messages, st.integers(min_value=0, max_value=10_000), st.booleans())
def test_identity_survives_a_re_read(raw: dict[str, Any], count: int, redelivered: bool) -> None:
    first = decode(raw, queue=DLQ)
    properties = raw.get("properties")
    if isinstance(properties, dict) and isinstance(properties.get("headers"), dict):
        headers = {**properties["headers"], "x-delivery-count": count}
        raw = {**raw, "properties": {**properties, "headers": headers}}
    again = decode({**raw, "redelivered": redelivered, "message_count": count}, queue=DLQ)
    assert again.identity == first.identity


@SLOW
@given(maybe, st.integers(min_value=-5, max_value=400))
def test_quote_is_bounded_and_printable(value: Any, limit: int) -> None:
    shown = quote_untrusted(value, limit)
    assert len(shown) <= max(0, limit) + 2 + len(CUT_MARKER) or shown == "(none)"
    assert shown.isprintable()


@SLOW
@given(messages)
def test_gate_and_event_never_carry_a_long_raw_untrusted_value(raw: dict[str, Any]) -> None:
    letter = decode(raw, queue=DLQ)
    prompt = gate_prompt(letter, owned_queue_pattern=r"^vibey\.")
    detail = park_verdict(letter, depth=1, min_depth=1).payload()["detail"]
    for value in untrusted_values(letter):
        if len(value) > 200:
            assert value not in prompt and value not in detail
    assert all(line.isprintable() for line in prompt.split("\n"))
    assert detail.isprintable()
    allowed, why = replay_decision(letter, r"^vibey\.")
    assert why.isprintable()
    if allowed:
        assert letter.is_json_object and not letter.body_truncated
    assert replay_decision(park_fields(letter), r"^vibey\.")[0] == allowed
