"""A reaper pointed at a vhost that holds none of our queues, on every broker version: the
pass says "OK, 1 finding", never a bare OK, and the finding names the vhosts that do hold
them with the fix; ``reaper doctor`` warns the same; pointed at the right vhost, neither says
a word of it. A finding, not a failure: a vhost whose queues are not declared yet is a
deployment's first day."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.cli import reaper_env, run_cli, validate_report
from tests.support.services import BrokerUnderTest, open_vhost

pytestmark = [pytest.mark.broker, pytest.mark.postgres]


@pytest.fixture
def elsewhere(broker: BrokerUnderTest) -> Iterator[tuple[BrokerUnderTest, str]]:
    """A second vhost holding two queues of a pattern no other test uses, and that pattern;
    the test's own vhost holds a foreign queue only."""
    other = replace(broker, vhost=f"{broker.vhost}-other")
    with broker.admin() as admin:
        open_vhost(admin, other.vhost_path)
    prefix = f"qrtarget{uuid.uuid4().hex[:8]}"
    try:
        other.declare_queue(f"{prefix}.jobs.a")
        other.declare_queue(f"{prefix}.jobs.b")
        broker.declare_queue("celery")
        yield other, f"^{prefix}\\."
    finally:
        with broker.admin() as admin:
            admin.delete(f"/api/vhosts/{quote(other.vhost, safe='')}")


async def test_a_vhost_without_our_queues_is_a_finding_naming_the_vhost_that_holds_them(
    pg_dsn: str,
    broker: BrokerUnderTest,
    elsewhere: tuple[BrokerUnderTest, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other, pattern = elsewhere
    env = reaper_env(
        pg_dsn, broker.management_url, broker.vhost, REAPER_QUEUE__REAP__OWNED_QUEUE_PATTERN=pattern
    )
    assert await run_cli(monkeypatch, tmp_path, env, "reap", "--dry-run") == 0
    text = capsys.readouterr().out.splitlines()
    assert "): OK, 1 finding   " in text[0]
    assert "0 owned queues, 1 foreign" in text[2]
    assert text[4] == "Findings (1), worst first:"
    finding = (
        f"  no_owned_queue vhost {broker.vhost!r}: no queue matches the owned pattern "
        f"'{pattern}'; vhost {other.vhost!r} holds 2"
    )
    # a shared test broker holds other tests' vhosts: the count may stop at its bound, and then
    # says so
    assert text[5] in (finding, f"{finding} (a count cut short: not every vhost was counted)")
    assert text[6].strip() == (
        f"if the reaper is meant for them, point it there: REAPER_BUS__VHOST={other.vhost} "
        f'(or [bus] vhost = "{other.vhost}"), then run reaper doctor'
    )
    assert await run_cli(monkeypatch, tmp_path, env, "reap", "--dry-run", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    validate_report(report)
    assert report["status"] == "OK, 1 finding"
    [found] = [f for f in report["findings"] if f["condition"] == "no_owned_queue"]
    assert found["subject"] == f"vhost {broker.vhost!r}" and other.vhost in found["next_step"]
    assert found["recorded"] is False  # no verdict: nothing of it is on the ledger

    assert await run_cli(monkeypatch, tmp_path, env, "doctor", "--json") == 0  # a warning
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    queues = checks[f"broker {broker.management_url} queues"]
    assert queues["status"] == "warn"
    assert f"{other.vhost!r} (2) hold such queues" in queues["detail"]
    assert queues["fix"].startswith(f"if the reaper is meant for them, point it there: "
                                    f"REAPER_BUS__VHOST={other.vhost} ")  # fmt: skip

    # pointed at the vhost that holds them, neither says a word of it
    right = {**env, "REAPER_BUS__VHOST": other.vhost}
    await run_cli(monkeypatch, tmp_path, right, "reap", "--dry-run", "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["inventory"]["queues_owned"] == 2
    assert [f for f in report["findings"] if f["condition"] == "no_owned_queue"] == []
    assert await run_cli(monkeypatch, tmp_path, right, "doctor", "--json") in (0, 1)
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    queues = checks[f"broker {broker.management_url} queues"]
    assert queues["status"] == "ok"
    assert queues["detail"] == f"2 queue(s) on {other.vhost!r} match the owned pattern '{pattern}'"
