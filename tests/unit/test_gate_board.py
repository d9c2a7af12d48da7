"""Which dead-letter queues a person may clear: every letter on it parked (none new, none
unread, read safely) and none of them waiting for an answer."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from reaper.core.records import LedgerEvent
from reaper.edges.events import event_line
from reaper.gates.board import purge_command, safe_to_clear
from reaper.reap.dead_letters import DeadLetterOutcome


def outcome(
    queue: str,
    depth: int,
    new: int = 0,
    parked: int | None = None,
    unread: int = 0,
    blocked: str | None = None,
    here: int | None = None,
) -> DeadLetterOutcome:
    already = depth - new if parked is None else parked
    held = already + new if here is None else here
    return DeadLetterOutcome(queue, depth, new, already, unread, blocked, parked_here=held)


def test_only_queues_whose_every_letter_is_parked_and_answered_are_safe() -> None:
    outcomes = [
        outcome("all.answered.dead", 3),
        outcome("one.waiting.dead", 2),
        outcome("new.parked.dead", 2, new=1),
        outcome("unread.dead", 5, parked=3, unread=2),
        outcome("blocked.dead", 2, parked=0, blocked="would drop"),
        outcome("empty.dead", 0),
        # its one letter is parked from the queue a fanout also dead-lettered it into
        outcome("copy.elsewhere.dead", 1, here=0),
        DeadLetterOutcome("not.known.dead", 1, 0, 1, 0, None, parked_here=None),
    ]
    waiting = {"one.waiting.dead": 1}

    safe = safe_to_clear(outcomes, waiting, "prod")

    assert [(s.queue, s.letters) for s in safe] == [("all.answered.dead", 3)]
    assert safe[0].command == "rabbitmqctl purge_queue all.answered.dead -p prod"


def test_the_purge_command_quotes_what_a_shell_would_split() -> None:
    assert purge_command("jobs dead", "/") == "rabbitmqctl purge_queue 'jobs dead' -p /"


def test_an_event_line_gives_a_verdicts_figure_but_not_a_parked_letters_queue_depth() -> None:
    def line(**payload: object) -> str:
        at = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)
        return event_line(LedgerEvent(uuid.UUID(int=1), 7, "QueueReaped", payload, "", True, at))

    stale = line(
        source="job_queue", condition="stale_ready", action="surface", object="job 1",
        measured=1000, threshold=900, unit="seconds",
    )  # fmt: skip
    assert stale.endswith("job_queue/stale_ready surface  job 1  1000/900 seconds")
    park = line(
        source="broker", condition="dead_letter", action="park", object="msg:dl-1",
        measured=4, threshold=1, unit="messages",
    )  # fmt: skip
    assert park.endswith("broker/dead_letter park  msg:dl-1"), park
