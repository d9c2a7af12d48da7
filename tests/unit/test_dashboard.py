"""The dashboard and the alert rules name only metrics the code exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from prometheus_client import CollectorRegistry

from reaper.broker.port import ManagementEndpoint
from reaper.core.domain import (
    Action,
    BrokerFacts,
    BrokerNode,
    ClaimableHead,
    Condition,
    Source,
    Unit,
    Verdict,
)
from reaper.edges.metrics import ReaperMetrics
from reaper.gates.board import GateBoard
from reaper.jobqueue.port import GateCount
from reaper.policies.reconcile import PolicyOutcome
from reaper.reap.dead_letters import DeadLetterOutcome, DeadLettersOutcome
from reaper.reap.policies import PoliciesOutcome
from reaper.reap.progress import RecordedVerdict, Unreadable
from reaper.reap.result import PassResult

METRICS_DIR = Path(__file__).resolve().parents[2] / "metrics"
DASHBOARD = METRICS_DIR / "dashboard.json"
ALERTS = METRICS_DIR / "alerts.yml"
ALERTS_TEST = METRICS_DIR / "alerts_test.yml"

#: A metric name inside PromQL or prose (not part of a longer identifier).
METRIC_NAME = re.compile(r"(?<![A-Za-z0-9_:])reaper_[A-Za-z0-9_]+")

#: Exported on purpose but not worth a panel.
NOT_ON_DASHBOARD = {"reaper_last_pass_dry_run"}


def every_series_pass() -> PassResult:
    """A pass in which every series the reaper exports has at least one sample."""
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    project = uuid4()

    def rv(action: Action, condition: Condition, source: Source = Source.JOB_QUEUE) -> Any:
        return RecordedVerdict(
            Verdict(source, "object", condition, 1, 0, Unit.SECONDS, action, project_id=project),
            True,
        )

    return PassResult(
        dry_run=False,
        started_at=now,
        finished_at=now + timedelta(seconds=2),
        broker=BrokerFacts(
            "RabbitMQ",
            "4.3.6",
            True,
            True,
            True,
            20,
            nodes=(BrokerNode("qr1@h", True), BrokerNode("qr2@h", False)),
        ),
        verdicts=(
            (
                rv(Action.REQUEUE, Condition.LEASE_EXPIRED),
                rv(Action.PARK, Condition.POISON),
                rv(Action.SURFACE, Condition.STALE_READY),
            )
        ),
        policies=PoliciesOutcome(
            (PolicyOutcome("vibey-quorum", "updated", False, 2, ("vibey.a",), "drift"),)
        ),
        dead_letters=DeadLettersOutcome((DeadLetterOutcome("vibey.work.dlq", 3, 2, 0, 1, None),)),
        unreadable=(
            Unreadable("broker", "timed out"),
            Unreadable("broker", "listed 'down' on node qr2@h", "work.on-qr2"),
        ),
        management=(
            ManagementEndpoint("http://qr2:15672", False, "refused"),
            ManagementEndpoint("http://qr1:15672", True),
        ),
        claimable=(ClaimableHead(project, uuid4(), "build", now - timedelta(seconds=60)),),
    )


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """Every sample name the reaper exports (with _total, _bucket, _sum, _count, _created)."""
    registry = CollectorRegistry()
    metrics = ReaperMetrics(registry)
    metrics.observe(every_series_pass())
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    metrics.observe_gates(GateBoard(now, (GateCount("delivery_exhausted", 1, now),)))
    families = list(registry.collect())
    empty = sorted(f.name for f in families if not f.samples)
    assert not empty, f"the pass leaves these families without a sample: {empty}"
    return {s.name for f in families for s in f.samples}


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL the dashboard runs: panel targets and template variable queries."""
    found: list[str] = []
    for panel in dashboard["panels"]:
        found.extend(t["expr"] for t in panel.get("targets", []))
    for variable in dashboard["templating"]["list"]:
        found.extend(s for s in strings(variable.get("query")) if "reaper_" in s)
        found.extend(s for s in strings(variable.get("definition")) if "reaper_" in s)
    return found


def test_the_dashboard_is_valid_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "queue-reaper"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert METRIC_NAME.search(target["expr"]), f"{panel['title']!r}: {target['expr']}"


def test_every_dashboard_query_names_only_exported_metrics(exported: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    named = {m for q in queries(dashboard) for m in METRIC_NAME.findall(q)}
    assert named, "the dashboard queries no reaper metric"
    assert named <= exported, f"not exported: {sorted(named - exported)}"


def test_the_dashboard_shows_every_exported_metric(exported: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    text = " ".join(queries(dashboard))
    bases = {
        re.sub(r"_(total|bucket|sum|count)$", "", name)
        for name in exported
        if not name.endswith("_created")
    }
    missing = {base for base in bases - NOT_ON_DASHBOARD if base not in text}
    assert not missing, f"exported but on no panel: {sorted(missing)}"


@pytest.mark.parametrize("path", [ALERTS, ALERTS_TEST], ids=lambda p: p.name)
def test_alert_rules_and_their_tests_name_only_exported_metrics(
    path: Path, exported: set[str]
) -> None:
    named = set(METRIC_NAME.findall(path.read_text()))
    assert named, f"{path.name} names no reaper metric"
    assert named <= exported, f"{path.name} names metrics not exported: {sorted(named - exported)}"
