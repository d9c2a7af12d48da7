"""Dead letters, the pure half: decode, identity, quoting, gate, replay, the read-safety proof."""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, replace
from typing import Any
from uuid import UUID

import pytest

from reaper.core.dead_letters.decode import decode, decoded_body
from reaper.core.dead_letters.parking import (
    EVENT_TRUSTED,
    GATE_CHOICES,
    gate_prompt,
    park_fields,
    park_verdict,
    replay_decision,
)
from reaper.core.dead_letters.reading import (
    READ_PAST_PARKED_CAP,
    read_plan,
    select_new,
    unread_count,
)
from reaper.core.dead_letters.untrusted import CUT_MARKER, quote_untrusted
from reaper.core.domain import BrokerFacts, DeadLetter, QueueStats
from tests.support.brokers import LAVINMQ, RABBITMQ_40, RABBITMQ_310
from tests.support.queues import queue_stats

DLQ = "vibey.jobs.dead"
OWNED = r"^vibey\."
ORIGIN = "vibey.jobs.p1"


def death_headers(
    queue: str = ORIGIN, reason: str = "rejected", time: int = 1_760_000_000
) -> dict[str, Any]:
    return {
        "x-death": [
            {
                "queue": queue,
                "reason": reason,
                "count": 1,
                "exchange": "vibey.jobs",
                "routing-keys": [queue],
                "time": time,
            }
        ],
        "x-first-death-queue": queue,
        "x-first-death-reason": reason,
        "x-first-death-exchange": "vibey.jobs",
    }


def message(
    body: str = '{"job": 1}',
    *,
    message_id: object = None,
    headers: dict[str, Any] | None = None,
    encoding: str = "string",
    payload_bytes: object = "exact",
    redelivered: bool = False,
) -> dict[str, Any]:
    if payload_bytes == "exact":
        payload_bytes = (
            len(base64.b64decode(body)) if encoding == "base64" else len(body.encode("utf-8"))
        )
    properties: dict[str, Any] = {
        "headers": death_headers() if headers is None else headers,
        "delivery_mode": 2,
        "content_type": "application/json",
    }
    if message_id is not None:
        properties["message_id"] = message_id
    return {
        "payload": body,
        "payload_encoding": encoding,
        "payload_bytes": payload_bytes,
        "redelivered": redelivered,
        "exchange": "vibey.jobs.dlx",
        "routing_key": ORIGIN,
        "message_count": 4,
        "properties": properties,
    }


def letter(**kwargs: Any) -> DeadLetter:
    return decode(message(**kwargs), queue=DLQ)


# --------------------------------------------------------------------------- decode


def test_decode_reads_every_field() -> None:
    got = letter(message_id="job-42")
    assert got == DeadLetter(
        queue=DLQ,
        identity="msg:job-42",
        message_id="job-42",
        origin_queue=ORIGIN,
        reason="rejected",
        body='{"job": 1}',
        body_encoding="string",
        body_bytes=10,
        body_truncated=False,
        is_json_object=True,
        delivery_count=None,
        redelivered=False,
        envelope=got.envelope,
    )
    assert got.envelope is not None and got.envelope.startswith("env-sha256:")


def test_origin_and_reason_fall_back_to_the_first_x_death_entry() -> None:
    headers = death_headers(queue="vibey.runs.e1", reason="delivery_limit")
    del headers["x-first-death-queue"], headers["x-first-death-reason"]
    got = letter(headers=headers)
    assert (got.origin_queue, got.reason) == ("vibey.runs.e1", "delivery_limit")


def test_no_death_headers_leaves_origin_unknown() -> None:
    got = letter(headers={})
    assert got.origin_queue is None and got.reason is None
    assert got.identity.startswith("sha256:")


def test_the_management_apis_empty_table_is_an_empty_list() -> None:
    raw = message()
    raw["properties"]["headers"] = []
    assert decode(raw, queue=DLQ).origin_queue is None


def test_truncated_body_is_marked_and_never_a_json_object() -> None:
    got = letter(body='{"job": 1}', payload_bytes=80_000)
    assert got.body_truncated and not got.is_json_object
    assert got.body_bytes == 80_000


@pytest.mark.parametrize("stated", [None, "10", True, -1, 9, 11, 10.5])
def test_a_size_not_stated_exactly_is_not_provably_whole(stated: object) -> None:
    got = letter(body='{"job": 1}', payload_bytes=stated)
    assert got.body_truncated and not got.is_json_object


def test_a_size_sent_as_a_float_still_counts() -> None:
    assert letter(body='{"job": 1}', payload_bytes=10.0).is_json_object


def test_binary_body_is_base64_and_not_json() -> None:
    raw = base64.b64encode(b"\xff\x00\x01\xfe").decode()
    got = letter(body=raw, encoding="base64")
    assert got.body_encoding == "base64"
    assert got.body_bytes == 4 and not got.body_truncated and not got.is_json_object
    assert decoded_body(got) == b"\xff\x00\x01\xfe"


def test_a_base64_json_object_in_utf8_is_a_json_object() -> None:
    raw = base64.b64encode('{"name": "ünïcode"}'.encode()).decode()
    assert letter(body=raw, encoding="base64").is_json_object


def test_undecodable_base64_is_not_whole() -> None:
    got = letter(body="not base64 !!", encoding="base64", payload_bytes=9)
    assert got.body_truncated and not got.is_json_object


@pytest.mark.parametrize(
    "body",
    ["[1, 2]", '"text"', "42", '{"a": NaN}', '{"a": 1', "", "\ufeff{}", '{"a": "\\ud800"} x'],
)
def test_only_a_whole_object_is_a_json_object(body: str) -> None:
    assert not letter(body=body).is_json_object


def test_a_lone_surrogate_body_decodes_without_error() -> None:
    got = letter(body='{"a": "\udc80"}', payload_bytes=12)
    assert not got.is_json_object  # not valid UTF-8
    assert got.identity.startswith("sha256:")


@pytest.mark.parametrize(
    ("value", "expected"), [(3, 3), (3.0, 3), ("3", None), (True, None), (-1, None), (None, None)]
)
def test_delivery_count_only_from_a_whole_number(value: object, expected: int | None) -> None:
    headers = death_headers()
    if value is not None:
        headers["x-delivery-count"] = value
    assert letter(headers=headers).delivery_count == expected


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"payload": 5, "payload_encoding": 5, "payload_bytes": "x", "properties": "no"},
        {"payload": None, "properties": {"headers": {"x-death": "no"}, "message_id": 7}},
        {"properties": {"headers": {"x-death": [1, None, {"queue": 5, "time": [1]}]}}},
        {"properties": {"headers": {"x-first-death-queue": {"a": 1}, "x-death": [{}]}}},
        {"redelivered": "yes", "payload": "x" * 10, "payload_encoding": "base64"},
    ],
)
def test_decode_survives_wrong_types_everywhere(raw: dict[str, Any]) -> None:
    got = decode(raw, queue=DLQ)
    assert got.queue == DLQ and got.redelivered is False
    assert got.body_truncated and not got.is_json_object


def test_decode_of_something_not_a_mapping() -> None:
    got = decode(["not", "a", "dict"], queue=DLQ)  # type: ignore[arg-type]
    assert got.identity.startswith("sha256:")


# --------------------------------------------------------------------------- identity


def test_message_id_is_the_identity() -> None:
    assert letter(message_id="abc").identity == "msg:abc"


def test_same_message_id_different_body_is_one_identity() -> None:
    assert letter(message_id="abc", body="{}").identity == letter(message_id="abc").identity


@pytest.mark.parametrize("message_id", ["x" * 201, "a\nb", "a\x00b", "\u202eevil", "a\udc80"])
def test_long_or_unprintable_message_ids_are_hashed(message_id: str) -> None:
    got = letter(message_id=message_id)
    assert got.identity.startswith("msg-sha256:") and len(got.identity) == 11 + 64
    assert got.message_id == message_id  # kept, quoted wherever it is shown
    assert got.identity == letter(message_id=message_id).identity


@pytest.mark.parametrize("message_id", ["", 42, None, ["a"]])
def test_no_usable_message_id_gives_a_digest(message_id: object) -> None:
    got = letter(message_id=message_id)
    assert got.message_id is None
    assert got.identity.startswith("sha256:") and len(got.identity) == 7 + 64


def test_a_message_id_that_looks_like_a_digest_cannot_collide() -> None:
    digest = letter().identity
    assert letter(message_id=digest).identity == "msg:" + digest


def test_digest_is_stable_across_a_re_read() -> None:
    first = letter()
    headers = death_headers()
    headers["x-delivery-count"] = 3  # quorum queues add it on re-reads
    headers["x-acquired-count"] = 4
    headers["x-death"][0]["count"] = 2
    again = decode({**message(headers=headers, redelivered=True), "message_count": 99}, queue=DLQ)
    assert again.identity == first.identity
    assert again.delivery_count == 3 and again.redelivered


def test_same_body_same_death_is_one_identity() -> None:
    """Documented consequence: two identical bodies that died in the same instant are one."""
    assert letter().identity == letter().identity


@pytest.mark.parametrize(
    "other",
    [
        {"body": '{"job": 2}'},
        {"headers": death_headers(queue="vibey.jobs.p2")},
        {"headers": death_headers(reason="expired")},
        {"headers": death_headers(time=1_760_000_001)},
    ],
)
def test_digest_separates_body_origin_reason_and_time(other: dict[str, Any]) -> None:
    assert letter(**other).identity != letter().identity


def test_digest_takes_the_time_of_the_first_death_entry() -> None:
    headers = death_headers(queue="vibey.jobs.p1", reason="rejected", time=100)
    later = {"queue": "vibey.jobs.wait.5s", "reason": "expired", "count": 1, "time": 200}
    headers["x-death"] = [later, *headers["x-death"]]  # most recent first, as RabbitMQ orders
    base = letter(headers=headers).identity
    moved_later = json.loads(json.dumps(headers))
    moved_later["x-death"][0]["time"] = 300
    moved_first = json.loads(json.dumps(headers))
    moved_first["x-death"][1]["time"] = 101
    assert letter(headers=moved_later).identity == base
    assert letter(headers=moved_first).identity != base


def test_digest_does_not_depend_on_how_the_body_was_encoded() -> None:
    text = letter(body='{"job": 1}')
    b64 = letter(body=base64.b64encode(b'{"job": 1}').decode(), encoding="base64")
    assert text.identity == b64.identity


def test_digest_of_a_truncated_body_is_stable() -> None:
    body = "x" * 50_000
    assert (
        letter(body=body, payload_bytes=70_000).identity
        == letter(body=body, payload_bytes=70_000).identity
    )
    assert (
        letter(body=body, payload_bytes=70_000).identity
        != letter(body=body, payload_bytes=70_001).identity
    )


# --------------------------------------------------------------------------- quoting


def test_quote_plain_text() -> None:
    assert quote_untrusted("vibey.jobs.p1") == '"vibey.jobs.p1"'


def test_quote_escapes_quotes_and_backslashes() -> None:
    assert quote_untrusted('a"b\\c') == '"a\\"b\\\\c"'


def test_quote_escapes_control_and_bidi_characters() -> None:
    got = quote_untrusted("a\nb\r\tc\x1b[31m\x00\u202e\u2028\x7f\x85\udc80")
    assert got == '"a\\nb\\r\\tc\\x1b[31m\\x00\\u202e\\u2028\\x7f\\x85\\udc80"'
    assert got.isprintable()


def test_quote_keeps_printable_unicode() -> None:
    assert quote_untrusted("очередь") == '"очередь"'


def test_quote_cuts_to_the_limit_with_a_marker() -> None:
    got = quote_untrusted("x" * 300)
    assert got == '"' + "x" * 200 + '"' + CUT_MARKER


def test_quote_never_cuts_inside_an_escape() -> None:
    got = quote_untrusted("\x1b" * 100, limit=10)
    assert got == '"\\x1b\\x1b"' + CUT_MARKER


def test_quote_of_exactly_the_limit_is_not_cut() -> None:
    assert quote_untrusted("x" * 200) == '"' + "x" * 200 + '"'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "(none)"),
        (5, "5"),
        (True, "true"),
        (1.5, "1.5"),
        (["a", {"b": 1}], '["a",{"b":1}]'),
        (b"\x00", "b'\\x00'"),
    ],
)
def test_quote_of_values_that_are_not_text(value: object, expected: str) -> None:
    assert quote_untrusted(value) == expected


def test_quote_of_a_huge_integer_does_not_raise() -> None:
    assert "integer" in quote_untrusted(10**10_000)


# --------------------------------------------------------------------------- replay


def test_replay_allowed_for_a_whole_object_to_an_owned_queue() -> None:
    allowed, why = replay_decision(letter(), OWNED)
    assert allowed, why
    assert '"vibey.jobs.p1"' in why


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"payload_bytes": 900}, "not whole"),
        ({"body": "[1]"}, "not a JSON object"),
        ({"body": base64.b64encode(b"\xff").decode(), "encoding": "base64"}, "not a JSON"),
        ({"headers": {}}, "unknown"),
        ({"headers": death_headers(queue="celery")}, "not a queue we own"),
        ({"headers": death_headers(queue="vibey.jobs.dlq")}, "is a dead-letter queue"),
        ({"headers": death_headers(queue=DLQ)}, "read from"),
        ({"headers": death_headers(queue="vibey.a\nb")}, "not a valid queue name"),
        ({"headers": death_headers(queue="vibey." + "x" * 300)}, "not a valid queue name"),
    ],
)
def test_replay_refused(kwargs: dict[str, Any], fragment: str) -> None:
    allowed, why = replay_decision(letter(**kwargs), OWNED)
    assert not allowed
    assert fragment in why
    assert "\n" not in why


def test_replay_refused_to_a_reserved_name_even_if_a_pattern_matches() -> None:
    assert not replay_decision(letter(headers=death_headers(queue="amq.gen-x")), r"^amq")[0]


def test_replay_refused_with_a_broken_pattern() -> None:
    allowed, why = replay_decision(letter(), "(")
    assert not allowed and "regular expression" in why


def test_replay_decision_reads_parked_fields() -> None:
    kept = park_fields(letter())
    assert replay_decision(kept, OWNED)[0]
    assert not replay_decision(replace(kept, body_truncated=True), OWNED)[0]
    assert not replay_decision(replace(kept, is_json_object=False), OWNED)[0]
    assert not replay_decision(replace(kept, origin_queue=None), OWNED)[0]


# --------------------------------------------------------------------------- gate and event


def test_gate_prompt_names_everything_a_person_needs() -> None:
    prompt = gate_prompt(letter(message_id="job-42"), owned_queue_pattern=OWNED)
    assert '"vibey.jobs.dead"' in prompt  # ours
    assert '"vibey.jobs.p1"' in prompt and '"rejected"' in prompt
    assert "unverified" in prompt
    assert "10 bytes" in prompt and "whole JSON object" in prompt
    assert "replay: publish the body back" in prompt
    assert "copy stays" in prompt
    assert "replay or dismiss" in prompt
    assert GATE_CHOICES == ("replay", "dismiss")


def test_gate_prompt_says_why_replay_is_not_possible() -> None:
    prompt = gate_prompt(letter(headers=death_headers(queue="celery")), owned_queue_pattern=OWNED)
    assert "replay: not possible" in prompt and "not a queue we own" in prompt
    assert "copy stays" in prompt


def test_gate_prompt_for_a_truncated_body() -> None:
    prompt = gate_prompt(letter(payload_bytes=90_000), owned_queue_pattern=OWNED)
    assert "10 of 90000 bytes came back" in prompt
    assert "replay: not possible" in prompt


def test_gate_prompt_for_a_binary_body() -> None:
    raw = base64.b64encode(b"\x00\xff").decode()
    prompt = gate_prompt(letter(body=raw, encoding="base64"), owned_queue_pattern=OWNED)
    assert "binary" in prompt and raw not in prompt


def test_gate_prompt_quotes_and_cuts_hostile_headers() -> None:
    evil = "vibey.\x1b[2J" + "A" * 500
    headers = death_headers(queue=evil, reason="\u202e" + "r" * 300)
    prompt = gate_prompt(letter(headers=headers, message_id="m" * 250), owned_queue_pattern=OWNED)
    assert evil not in prompt and "\x1b" not in prompt and "\u202e" not in prompt
    assert "A" * 201 not in prompt and "r" * 201 not in prompt and "m" * 201 not in prompt
    assert all(line.isprintable() for line in prompt.split("\n"))


def test_event_payload_of_a_park() -> None:
    job = UUID("12345678-1234-5678-1234-567812345678")
    got = park_verdict(letter(), depth=7, min_depth=1, job_id=job).payload()
    assert got == {
        "object": str(job),
        "queue": DLQ,
        "source": "broker",
        "condition": "dead_letter",
        "measured": 7,
        "threshold": 1,
        "unit": "messages",
        "action": "park",
        "detail": got["detail"],
    }
    assert '"vibey.jobs.p1"' in got["detail"] and '"rejected"' in got["detail"]
    assert "unverified" in got["detail"]


def test_event_object_is_the_identity_without_a_job_id() -> None:
    got = letter(message_id="m1")
    assert park_verdict(got, depth=1, min_depth=1).payload()["object"] == "msg:m1"


def test_park_verdict_is_untrusted() -> None:
    verdict = park_verdict(letter(), depth=1, min_depth=1)
    assert verdict.trusted is False and EVENT_TRUSTED is False
    assert verdict.sighting_key.scope == DLQ


def test_park_fields_are_jsonb_safe_and_round_trip_the_body() -> None:
    nul = letter(body="a\x00b", headers=death_headers(queue="vibey.a\x00"))
    kept = park_fields(nul)
    assert kept.body_encoding == "base64" and kept.origin_queue is None
    assert decoded_body(kept) == b"a\x00b"
    text = json.dumps(asdict(kept))
    assert "\\u0000" not in text
    plain = park_fields(letter())
    assert plain.body == '{"job": 1}' and plain.body_encoding == "string"


# --------------------------------------------------------------------------- read plan


def queue(
    kind: str | None = "quorum",
    *,
    ready: int = 5,
    unacked: int = 0,
    policy: dict[str, Any] | None = None,
    arguments: dict[str, Any] | None = None,
    name: str = DLQ,
    counts_known: bool = True,
) -> QueueStats:
    return queue_stats(
        name,
        kind,
        ready=ready,
        unacked=unacked,
        counts_known=counts_known,
        effective_policy=policy,
        arguments=arguments,
    )


@pytest.mark.parametrize("facts", [RABBITMQ_310, RABBITMQ_40])
def test_classic_queue_is_safe(facts: BrokerFacts) -> None:
    plan = read_plan(queue("classic", policy={"delivery-limit": 20}), facts, 100)
    assert plan.blocked is None and plan.count == 5 and plan.budget is None
    assert "classic" in plan.basis


def test_quorum_on_310_without_a_limit_is_safe() -> None:
    plan = read_plan(queue(), RABBITMQ_310, 100)
    assert plan.blocked is None and plan.count == 5


def test_quorum_on_40_has_the_default_limit_and_is_blocked() -> None:
    plan = read_plan(queue(), RABBITMQ_40, 100)
    assert plan.count == 0 and plan.budget == 20
    assert plan.blocked is not None
    assert "delivery limit of 20" in plan.blocked and "default" in plan.blocked
    assert "requeueing read counts as a delivery" in plan.blocked
    assert "could drop a dead letter" in plan.blocked
    assert "delivery-limit -1" in plan.blocked


@pytest.mark.parametrize("limit", [-1, -1.0])
def test_quorum_on_40_with_the_dead_letter_policy_is_safe(limit: float) -> None:
    plan = read_plan(queue(policy={"delivery-limit": limit}), RABBITMQ_40, 100)
    assert plan.blocked is None and plan.count == 5


def test_a_queues_own_argument_outranks_an_unlimited_policy() -> None:
    q = queue(policy={"delivery-limit": -1}, arguments={"x-delivery-limit": 5})
    plan = read_plan(q, RABBITMQ_40, 100)
    assert plan.blocked is not None and plan.budget == 5


def test_quorum_on_310_under_a_finite_policy_is_blocked_with_the_310_remedy() -> None:
    plan = read_plan(queue(policy={"delivery-limit": 20}), RABBITMQ_310, 100)
    assert plan.blocked is not None and plan.budget == 20
    assert "refuses delivery-limit -1" in plan.blocked


def test_finite_limit_with_a_dead_letter_exchange_would_move_the_letter() -> None:
    q = queue(policy={"delivery-limit": 20, "dead-letter-exchange": "vibey.dlx2"})
    plan = read_plan(q, RABBITMQ_40, 100)
    assert plan.blocked is not None
    assert "dead-letter a message onward" in plan.blocked and '"vibey.dlx2"' in plan.blocked


def test_lavinmq_queue_without_type_is_classic() -> None:
    assert read_plan(queue(None), LAVINMQ, 100).blocked is None


def test_lavinmq_queue_with_a_delivery_limit_is_blocked() -> None:
    plan = read_plan(queue(None, arguments={"x-delivery-limit": 3}), LAVINMQ, 100)
    assert plan.blocked is not None and plan.budget == 3


def test_untyped_queue_declared_quorum_follows_quorum_rules() -> None:
    q = queue(None, arguments={"x-queue-type": "quorum"})
    assert read_plan(q, RABBITMQ_40, 100).blocked is not None
    assert read_plan(q, RABBITMQ_310, 100).blocked is None


@pytest.mark.parametrize("kind", ["stream", "x-custom", ""])
def test_stream_and_unknown_types_are_blocked(kind: str) -> None:
    plan = read_plan(queue(kind), RABBITMQ_40, 100)
    assert plan.blocked is not None and plan.count == 0


def test_blocked_reason_quotes_the_queue_name() -> None:
    plan = read_plan(queue(name="vibey.\x1b.dead"), RABBITMQ_40, 100)
    assert plan.blocked is not None and "\x1b" not in plan.blocked


@pytest.mark.parametrize(
    ("ready", "peek", "parked", "expected"),
    [
        (5000, 100, 0, 100),
        (5000, 100, 50, 150),
        (5000, 100, 5000, 100 + READ_PAST_PARKED_CAP),
        (30, 100, 50, 30),
        (0, 100, 0, 0),
        (10, 0, 0, 0),
        (-3, 100, 0, 0),
    ],
)
def test_read_count_reads_past_the_parked(
    ready: int, peek: int, parked: int, expected: int
) -> None:
    assert read_plan(queue("classic", ready=ready), RABBITMQ_310, peek, parked).count == expected


def test_read_count_includes_letters_a_stale_sample_shows_unacknowledged() -> None:
    # A sample taken mid-read by an earlier pass: 3 ready, 2 checked out and since returned.
    stale = queue("classic", ready=3, unacked=2)
    assert read_plan(stale, RABBITMQ_310, 100).count == 5


def test_counts_not_yet_known_read_nothing() -> None:
    assert read_plan(queue("classic", counts_known=False), RABBITMQ_310, 100).count == 0


# --------------------------------------------------------------------------- select new


def body_letter(n: int) -> DeadLetter:
    return letter(body=json.dumps({"job": n}))


def test_select_reads_past_the_parked_by_identity_not_position() -> None:
    a, b, c, d, e = (body_letter(n) for n in range(5))
    new, already = select_new([a, b, c, d], {a.identity, b.identity}, peek_limit=2)
    assert new == [c, d] and already == 2

    # 3.x: the requeueing read moved every read message to the back
    parked = {a.identity, b.identity, c.identity, d.identity}
    new, already = select_new([e, c, d, a, b], parked, peek_limit=2)
    assert new == [e] and already == 4


def test_select_collapses_duplicates_within_one_read() -> None:
    a, b = body_letter(1), body_letter(2)
    new, already = select_new([a, a, b, b, a], {b.identity}, peek_limit=10)
    assert new == [a] and already == 1


def test_select_stops_at_the_peek_limit_and_the_rest_is_unread() -> None:
    letters = [body_letter(n) for n in range(6)]
    parked = {letters[0].identity}
    new, already = select_new(letters, parked, peek_limit=3)
    assert new == letters[1:4] and already == 1
    assert unread_count(10, letters, parked, new) == 10 - 4


def test_unread_count_counts_duplicates_of_parked_as_accounted() -> None:
    a = body_letter(1)
    assert unread_count(3, [a, a], {a.identity}, []) == 1
    assert unread_count(1, [a, a], {a.identity}, []) == 0
