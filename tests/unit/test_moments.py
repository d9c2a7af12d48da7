"""One timestamp format wherever a person reads one (SPEC §12): UTC with ``Z``. Every time an
output prints goes through ``reaper.core.moments.utc``; the only ``isoformat`` calls left are
the ones that write data in the form it was first written (a gate's identity, a dispatch
pointer's payload) or a date without a time."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from uuid import UUID

from reaper.core.domain import HeldLease
from reaper.core.moments import utc
from reaper.core.records import Gate
from reaper.gates.views import render_show, view_of
from reaper.jobqueue.rules import park_prompt

PACKAGE = Path(__file__).resolve().parents[2] / "reaper"

#: ``module: function`` pairs that may call ``isoformat``, each for a reason no output shares.
ISOFORMAT_KEPT = {
    "core/moments.py: utc",  # the one rule
    "jobqueue/rules.py: park_identity",  # a gate's identity: a new form would raise a second gate
    "testing/memory_records.py: _dispatch",  # a message body, read by fromisoformat
    "edges/manpage.py: manpage",  # a date, no time of day
}


def test_a_moment_is_utc_with_z_whatever_zone_it_came_in() -> None:
    paris = timezone(timedelta(hours=1))
    assert utc(datetime(2026, 12, 6, 21, 44, 46, 357014, tzinfo=paris)) == "2026-12-06T20:44:46Z"
    assert utc(datetime(2026, 12, 6, 20, 44, 46, 357014, UTC), "milliseconds") == (
        "2026-12-06T20:44:46.357Z"
    )


def test_no_output_formats_a_time_but_through_the_one_rule() -> None:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Attribute) and node.attr == "isoformat":
                    found.add(f"{path.relative_to(PACKAGE).as_posix()}: {func.name}")
    assert found <= ISOFORMAT_KEPT, sorted(found - ISOFORMAT_KEPT)


def test_gates_show_prints_every_time_with_z() -> None:
    raised = datetime(2026, 12, 6, 20, 44, 46, 357014, UTC)
    lease = HeldLease(
        job_id=UUID(int=7),
        project_id=UUID(int=1),
        kind="render.video",
        lease_owner="worker-1",
        lease_expires_at=raised - timedelta(minutes=20),
        attempts=7,
        max_attempts=7,
    )
    gate = Gate(
        id=UUID(int=9),
        project_id=UUID(int=1),
        job_id=UUID(int=7),
        kind="delivery_exhausted",
        prompt=park_prompt(lease),
        choices=("retry", "cancel"),
        answer="cancel",
        answered_at=raised + timedelta(minutes=5),
        identity=None,
        created_at=raised,
        answered_by="ana@ops",
    )
    view = view_of(
        gate,
        None,
        raised + timedelta(hours=1),
        owned_queue_pattern="^vibey\\.",
        dead_letter_queue_pattern="\\.dead$",
    )
    shown = render_show(view)
    assert "raised:   2026-12-06T20:44:46Z (1h00m ago)" in shown
    assert "answered 'cancel' at 2026-12-06T20:49:46Z by ana@ops" in shown
    assert "expired at 2026-12-06T20:24:46Z without" in shown
    assert "+00:00" not in shown
