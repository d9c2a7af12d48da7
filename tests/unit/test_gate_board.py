"""Which dead-letter queues a person may clear: every letter on it parked (none new, none
unread, read safely) and none of them waiting for an answer."""

from __future__ import annotations

from reaper.edges.gate_board import purge_command, safe_to_clear
from reaper.reap.dead_letters import DeadLetterOutcome


def outcome(
    queue: str,
    depth: int,
    new: int = 0,
    parked: int | None = None,
    unread: int = 0,
    blocked: str | None = None,
) -> DeadLetterOutcome:
    return DeadLetterOutcome(
        queue, depth, new, depth - new if parked is None else parked, unread, blocked
    )


def test_only_queues_whose_every_letter_is_parked_and_answered_are_safe() -> None:
    outcomes = [
        outcome("all.answered.dead", 3),
        outcome("one.waiting.dead", 2),
        outcome("new.parked.dead", 2, new=1),
        outcome("unread.dead", 5, parked=3, unread=2),
        outcome("blocked.dead", 2, parked=0, blocked="would drop"),
        outcome("empty.dead", 0),
    ]
    waiting = {"one.waiting.dead": 1}

    safe = safe_to_clear(outcomes, waiting, "prod")

    assert [(s.queue, s.letters) for s in safe] == [("all.answered.dead", 3)]
    assert safe[0].command == "rabbitmqctl purge_queue all.answered.dead -p prod"


def test_the_purge_command_quotes_what_a_shell_would_split() -> None:
    assert purge_command("jobs dead", "/") == "rabbitmqctl purge_queue 'jobs dead' -p /"
