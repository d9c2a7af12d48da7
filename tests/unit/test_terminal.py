"""Text for a terminal (SPEC §11): a value put into a line of the reaper's text stays on it."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from uuid import uuid4

from reaper.core.records import LedgerEvent
from reaper.core.terminal import first_few, for_terminal, one_line
from reaper.edges.events import event_line
from reaper.edges.logs import TextFormatter
from reaper.edges.status_queues import escape
from reaper.edges.wording import where
from tests.support.verdicts import stale_queue

FORGED = "NOT OK: forged"


def test_one_line_shows_each_newline_and_for_terminal_the_carriage_return() -> None:
    assert one_line(f"celery\n{FORGED}") == f"celery\\n{FORGED}"
    assert for_terminal(one_line(f"crlf\r\n{FORGED}")) == f"crlf\\x0d\\n{FORGED}"
    assert one_line("plain.queue") == "plain.queue"
    assert for_terminal("two\nlines") == "two\nlines"  # the reaper's own lines are kept


def test_a_name_with_a_newline_is_one_line_where_a_finding_names_it() -> None:
    name = f"lavin\n{FORGED}"
    verdict = stale_queue(name)
    assert where(verdict) == f"queue lavin\\n{FORGED}"
    assert verdict.queue == name  # what is stored and shown in JSON stays exact


def test_an_answer_by_a_name_with_a_newline_is_one_event_line() -> None:
    event = LedgerEvent(
        project_id=uuid4(),
        seq=1,
        kind="GateAnswered",
        created_at=datetime(2026, 12, 6, tzinfo=UTC),
        trusted=True,
        digest="d",
        payload={"gate": str(uuid4()), "choice": "retry", "by": f"bo\n{FORGED}", "job": None},
    )
    line = event_line(event)
    assert "\n" not in line and f"by bo\\n{FORGED}" in line, line


def test_a_serve_log_message_carrying_a_newline_is_one_line() -> None:
    record = logging.LogRecord(
        "reaper.serve", logging.WARNING, __file__, 1, "pass not ok: %s", (f"q\n{FORGED}",), None
    )
    shown = TextFormatter().format(record)
    assert "\n" not in shown and shown.endswith(f"pass not ok: q\\n{FORGED}"), shown


def test_the_status_page_shows_a_newline_in_a_name_escaped() -> None:
    assert escape(f"<q>\n{FORGED}") == f"&lt;q&gt;\\n{FORGED}"


def test_first_few_names_five_and_counts_the_rest() -> None:
    assert first_few([]) == ""
    assert first_few(["a", "b"]) == "a, b"
    assert first_few([str(i) for i in range(5)]) == "0, 1, 2, 3, 4"
    assert (
        first_few([str(i) for i in range(1_006)], repr) == "'0', '1', '2', '3', '4' and 1,001 more"
    )
