"""A dead letter is a dispatch pointer only when its whole body is exactly a valid
``vibey.job.dispatch/1`` object (ADR-0044 §3): anything else is an ordinary dead letter."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reaper.core.dead_letters import (
    DISPATCH_SCHEMA,
    DispatchPointer,
    decode,
    dispatch_pointer,
)
from reaper.core.domain import DeadLetter
from tests.support.dispatch import dispatch_body

POINTER = DispatchPointer(
    uuid.uuid4(), uuid.uuid4(), 3, "build.implement", datetime(2026, 9, 22, 12, tzinfo=UTC)
)


def letter(body: object, *, cut: bool = False) -> DeadLetter:
    text = body if isinstance(body, str) else json.dumps(body)
    size = len(text.encode()) + (10 if cut else 0)
    return decode(
        {"payload": text, "payload_encoding": "string", "payload_bytes": size, "properties": {}},
        queue="vibey.jobs.dead",
    )


def test_a_dispatch_body_is_its_pointer() -> None:
    assert dispatch_pointer(letter(dispatch_body(POINTER))) == POINTER


@pytest.mark.parametrize(
    "change",
    [
        {"schema": "vibey.job.dispatch/2"},
        {"dispatch_seq": 0},
        {"dispatch_seq": "3"},
        {"dispatch_seq": True},
        {"job_id": "not-a-uuid"},
        {"kind": ""},
        {"not_before": "2026-09-22T12:00:00"},  # no offset: a time nobody can place
        {"not_before": "tomorrow"},
        {"extra": 1},
    ],
)
def test_a_body_that_is_not_exactly_a_pointer_is_not_one(change: dict[str, object]) -> None:
    assert dispatch_pointer(letter({**dispatch_body(POINTER), **change})) is None


def test_a_missing_field_a_cut_body_or_no_object_is_no_pointer() -> None:
    body = dispatch_body(POINTER)
    del body["kind"]
    assert dispatch_pointer(letter(body)) is None
    assert dispatch_pointer(letter(dispatch_body(POINTER), cut=True)) is None
    assert dispatch_pointer(letter("[1, 2]")) is None
    assert dispatch_pointer(letter("not json")) is None


@given(st.dictionaries(st.text(max_size=12), st.none() | st.integers() | st.text(max_size=20)))
def test_any_other_body_is_an_ordinary_dead_letter(body: dict[str, object]) -> None:
    if body.get("schema") != DISPATCH_SCHEMA:
        assert dispatch_pointer(letter(body)) is None
