"""The one escaping rule for what PostgreSQL cannot store (SPEC §11, ``reaper.core.storable``):
stable, unambiguous, exactly reversed, and the identity on every name without NUL, a lone
surrogate or a backslash that would read as an escape. The live half (a queue named with NUL on
every broker version) is in ``tests/integration/test_hostile_input_live.py``."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from reaper.core.canonical import canonical_json
from reaper.core.storable import (
    for_storage,
    from_storage,
    is_storable,
    payload_for_storage,
    payload_from_storage,
    stored_escaped,
)
from reaper.core.terminal import for_terminal

#: The characters that meet at the rule's edges: the escape, what it escapes and what its
#: escapes are spelt with, so that generated names collide with escapes often.
EDGES = st.text(
    alphabet=st.sampled_from(
        [
            "\\",
            "x",
            "0",
            "u",
            "d",
            "8",
            "c",
            "f",
            "a",
            "\x00",
            "\ud800",
            "\udc80",
            "\udfff",
            "D",
            ".",
        ]
    ),
    max_size=14,
)
NAMES = st.one_of(EDGES, st.text())


@settings(max_examples=1000)
@given(NAMES)
def test_every_string_is_stored_as_postgresql_text_can_hold_it_and_read_back_exactly(
    name: str,
) -> None:
    stored = for_storage(name)
    assert "\x00" not in stored
    stored.encode("utf-8")  # no lone surrogate: strict UTF-8 encodes it
    assert from_storage(stored) == name
    assert for_storage(name) == stored  # stable: every pass stores it the same
    assert (stored == name) == is_storable(name)


@settings(max_examples=1000)
@given(EDGES, EDGES)
def test_no_two_names_are_stored_alike(first: str, second: str) -> None:
    if first != second:
        assert for_storage(first) != for_storage(second)


def test_the_escapes_are_the_ones_a_terminal_shows_and_a_lone_backslash_is_kept() -> None:
    assert for_storage("foreign\x00nul") == "foreign\\x00nul" == for_terminal("foreign\x00nul")
    assert for_storage("bad\udc80") == "bad\\udc80" == for_terminal("bad\udc80")
    assert for_storage("C:\\jobs") == "C:\\jobs"  # what older passes stored stays matched
    assert for_storage("literal\\x00") == "literal\\\\x00"  # a real name that looks escaped
    assert for_storage("back\\\x00") == "back\\\\\\x00"


def test_a_payload_stored_escaped_is_valid_jsonb_and_reads_back_exactly() -> None:
    payload: dict[str, object] = {
        "queue": "foreign\x00nul",
        "object": "x\udc80",
        "measured": 3,
        "nested": {"k\x00": ["a\x00", 1, None]},
    }
    stored = canonical_json(payload_for_storage(payload))
    assert "\\u0000" not in stored  # jsonb refuses the escape of NUL
    stored.encode("utf-8")
    assert payload_from_storage(json.loads(stored)) == {
        **payload,
        "nested": {"k\x00": ["a\x00", 1, None]},
    }


def test_the_report_names_each_name_stored_escaped_once() -> None:
    notes = stored_escaped(["celery", "foreign\x00nul", "foreign\x00nul", "C:\\jobs"])
    assert len(notes) == 1 and notes[0].startswith("queue foreign\x00nul: ")
    assert "stored escaped" in notes[0] and "--json shows the exact name" in notes[0]
