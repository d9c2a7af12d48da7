"""The pass as metrics: every series after a hand-built pass, on a fresh registry per test."""

from __future__ import annotations

import http.server
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from reaper.core.domain import Action, ClaimableHead, Condition, Source, Unit, Verdict
from reaper.edges.metrics import MetricsExportError, ReaperMetrics
from reaper.policies.reconcile import PolicyOutcome
from reaper.reap.dead_letters import DeadLetterOutcome, DeadLettersOutcome
from reaper.reap.policies import PoliciesOutcome
from reaper.reap.progress import RecordedVerdict, Unreadable
from reaper.reap.result import PassResult
from reaper.version import __version__
from tests.support.brokers import RABBITMQ_40
from tests.support.queues import queue_stats

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
PROJECT_A = UUID("11111111-1111-1111-1111-111111111111")
PROJECT_B = UUID("22222222-2222-2222-2222-222222222222")
JOB_IDS = [uuid4() for _ in range(4)]


def verdict(
    source: Source,
    condition: Condition,
    action: Action,
    *,
    recorded: bool = True,
    obj: str | None = None,
    queue: str | None = None,
    project_id: UUID | None = None,
) -> RecordedVerdict:
    return RecordedVerdict(
        Verdict(
            source=source,
            object=obj or queue or "x",
            condition=condition,
            measured=1,
            threshold=0,
            unit=Unit.SECONDS,
            action=action,
            queue=queue,
            project_id=project_id,
        ),
        recorded,
    )


def a_pass(**changes: object) -> PassResult:
    """A real pass that acted on every condition: two leases requeued (one taken first by
    another reaper), one job parked, two stale-ready sightings (one already open), a broker
    queue with no consumer, an owned dead-letter queue read and one blocked, three policies."""
    jq, br = Source.JOB_QUEUE, Source.BROKER
    result = PassResult(
        dry_run=False,
        started_at=NOW,
        finished_at=NOW + timedelta(seconds=1.5),
        broker=RABBITMQ_40,
        verdicts=(
            (
                verdict(
                    jq,
                    Condition.LEASE_EXPIRED,
                    Action.REQUEUE,
                    obj=str(JOB_IDS[0]),
                    project_id=PROJECT_A,
                ),
                verdict(
                    jq,
                    Condition.LEASE_EXPIRED,
                    Action.REQUEUE,
                    obj=str(JOB_IDS[1]),
                    project_id=PROJECT_A,
                    recorded=False,
                ),
                verdict(
                    jq, Condition.POISON, Action.PARK, obj=str(JOB_IDS[2]), project_id=PROJECT_B
                ),
                verdict(
                    jq,
                    Condition.STALE_READY,
                    Action.SURFACE,
                    obj=str(JOB_IDS[3]),
                    project_id=PROJECT_A,
                ),
                verdict(
                    jq, Condition.STALE_READY, Action.SURFACE, project_id=PROJECT_B, recorded=False
                ),
                verdict(br, Condition.HOLDER_GONE, Action.SURFACE, queue="vibey.work"),
                verdict(br, Condition.DEAD_LETTER, Action.CLEARED, queue="vibey.old.dlq"),
            )
        ),
        policies=PoliciesOutcome(
            (
                PolicyOutcome("vibey-quorum", "unchanged", True, 3, (), "in force"),
                PolicyOutcome(
                    "vibey-classic", "updated", False, 2, ("vibey.a", "vibey.b"), "drift"
                ),
                PolicyOutcome("vibey-dlq", "refused", None, 0, (), "401"),
            )
        ),
        dead_letters=DeadLettersOutcome(
            (
                DeadLetterOutcome("vibey.work.dlq", 130, 100, 5, 25, None),
                DeadLetterOutcome("vibey.q.dlq", 7, 0, 0, 7, "delivery limit would drop"),
            )
        ),
        queues=(queue_stats("vibey.work", unacked=3),),
        claimable=(
            ClaimableHead(PROJECT_A, JOB_IDS[3], "build", NOW - timedelta(seconds=1200)),
            ClaimableHead(PROJECT_B, uuid4(), "test", NOW - timedelta(seconds=30)),
        ),
    )
    return replace(result, **changes)  # type: ignore[arg-type]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> ReaperMetrics:
    return ReaperMetrics(registry)


def sample_names(registry: CollectorRegistry) -> set[str]:
    return {s.name for family in registry.collect() for s in family.samples}


# --------------------------------------------------------------------------- before any pass


def test_before_any_pass_counters_are_zero_and_last_pass_series_absent(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    assert registry.get_sample_value("reaper_leases_requeued_total") == 0
    assert registry.get_sample_value("reaper_jobs_parked_total") == 0
    assert registry.get_sample_value("reaper_dead_letters_parked_total") == 0
    for result in ("ok", "not_ok", "error"):
        assert registry.get_sample_value("reaper_passes_total", {"result": result}) == 0
    assert registry.get_sample_value("reaper_last_pass_timestamp_seconds") is None
    assert registry.get_sample_value("reaper_last_pass_ok") is None
    names = sample_names(registry)
    assert not {n for n in names if n.startswith(("reaper_source_up", "reaper_conditions_open"))}


def test_build_info_names_the_version(registry: CollectorRegistry, metrics: ReaperMetrics) -> None:
    assert registry.get_sample_value("reaper_build_info", {"version": __version__}) == 1
    build = [s for s in sample_names(registry) if s.startswith("reaper_build_info")]
    assert build == ["reaper_build_info"]


# --------------------------------------------------------------------------- counters


def by_verdict(
    registry: CollectorRegistry, metric: str, **labels: str
) -> Callable[[str, str, str], float | None]:
    """``metric``'s sample for one source, condition and action (with ``labels`` besides)."""

    def read(source: str, condition: str, action: str) -> float | None:
        verdict = {"source": source, "condition": condition, "action": action}
        return registry.get_sample_value(metric, {**verdict, **labels})

    return read


def test_verdicts_total_counts_every_verdict_by_source_condition_action(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe(a_pass())
    verdicts = by_verdict(registry, "reaper_verdicts_total", dry_run="false")

    assert verdicts("job_queue", "lease_expired", "requeue") == 2
    assert verdicts("job_queue", "poison", "park") == 1
    assert verdicts("job_queue", "stale_ready", "surface") == 2
    assert verdicts("broker", "holder_gone", "surface") == 1
    assert verdicts("broker", "dead_letter", "cleared") == 1

    metrics.observe(a_pass())
    assert verdicts("job_queue", "lease_expired", "requeue") == 4


def test_verdicts_recorded_counts_only_what_the_ledger_got(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe(a_pass())
    recorded = by_verdict(registry, "reaper_verdicts_recorded_total")

    assert recorded("job_queue", "lease_expired", "requeue") == 1
    assert recorded("job_queue", "stale_ready", "surface") == 1  # the other was already open
    assert recorded("broker", "dead_letter", "cleared") == 1


def test_verdicts_applied_counts_only_writes_that_committed(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe(a_pass())
    applied = by_verdict(registry, "reaper_verdicts_applied_total")

    assert applied("job_queue", "lease_expired", "requeue") == 1  # the other was not moved
    assert applied("broker", "dead_letter", "cleared") == 1
    assert applied("job_queue", "stale_ready", "surface") is None  # a surface writes no move


def test_move_counters_count_recorded_moves_and_accumulate_across_passes(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe(a_pass())
    assert registry.get_sample_value("reaper_leases_requeued_total") == 1  # one taken by another
    assert registry.get_sample_value("reaper_jobs_parked_total") == 1
    assert registry.get_sample_value("reaper_dead_letters_parked_total") == 100

    metrics.observe(a_pass())
    assert registry.get_sample_value("reaper_leases_requeued_total") == 2
    assert registry.get_sample_value("reaper_jobs_parked_total") == 2
    assert registry.get_sample_value("reaper_dead_letters_parked_total") == 200


def test_a_dry_run_counts_its_verdicts_apart_and_moves_nothing(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    # a dry-run records nothing; even a result claiming otherwise moves no counter
    metrics.observe(a_pass(dry_run=True))
    labels = {"source": "job_queue", "condition": "poison", "action": "park", "dry_run": "true"}
    assert registry.get_sample_value("reaper_verdicts_total", labels) == 1
    real = {**labels, "dry_run": "false"}
    assert registry.get_sample_value("reaper_verdicts_total", real) is None
    assert registry.get_sample_value("reaper_leases_requeued_total") == 0
    assert registry.get_sample_value("reaper_jobs_parked_total") == 0
    assert registry.get_sample_value("reaper_dead_letters_parked_total") == 0
    assert "reaper_verdicts_recorded_total" not in sample_names(registry)
    assert "reaper_verdicts_applied_total" not in sample_names(registry)
    assert registry.get_sample_value("reaper_last_pass_dry_run") == 1


def test_passes_and_duration(metrics: ReaperMetrics, registry: CollectorRegistry) -> None:
    metrics.observe(a_pass())  # not ok: a policy refused, a dead-letter queue blocked
    metrics.observe(
        a_pass(
            policies=PoliciesOutcome(),
            dead_letters=DeadLettersOutcome(),
            finished_at=NOW + timedelta(seconds=4),
        )
    )
    assert registry.get_sample_value("reaper_passes_total", {"result": "not_ok"}) == 1
    assert registry.get_sample_value("reaper_passes_total", {"result": "ok"}) == 1
    assert registry.get_sample_value("reaper_pass_duration_seconds_count") == 2
    assert registry.get_sample_value("reaper_pass_duration_seconds_sum") == pytest.approx(5.5)
    assert registry.get_sample_value("reaper_pass_duration_seconds_bucket", {"le": "2.5"}) == 1
    assert registry.get_sample_value("reaper_pass_duration_seconds_bucket", {"le": "5.0"}) == 2


# --------------------------------------------------------------------------- the last pass


def test_conditions_open_counts_surfaced_and_zero_fills_the_sources_read(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe(a_pass())

    def open_(source: str, condition: str) -> float | None:
        labels = {"source": source, "condition": condition}
        return registry.get_sample_value("reaper_conditions_open", labels)

    assert open_("job_queue", "stale_ready") == 2
    assert open_("broker", "holder_gone") == 1
    assert open_("job_queue", "lost_dispatch") == 0  # can occur: zero-filled
    assert open_("broker", "dead_letter") == 0  # cleared
    assert open_("broker", "unbounded") == 0
    # pairs that cannot occur are not exported: a lease is requeued or parked, never
    # surfaced, and the broker knows no poison
    assert open_("job_queue", "lease_expired") is None
    assert open_("broker", "poison") is None
    assert open_("job_queue", "holder_gone") is None


def test_an_unreadable_source_is_down_and_concludes_nothing(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe(a_pass())
    metrics.observe(
        a_pass(
            unreadable=(Unreadable("broker", "connection refused"),),
            verdicts=tuple(a_pass().verdicts[:5]),
            broker=None,
        )
    )
    assert registry.get_sample_value("reaper_source_up", {"source": "job_queue"}) == 1
    assert registry.get_sample_value("reaper_source_up", {"source": "broker"}) == 0
    labels = {"source": "broker", "condition": "holder_gone"}
    assert registry.get_sample_value("reaper_conditions_open", labels) is None  # unknown, not 0
    labels = {"source": "job_queue", "condition": "stale_ready"}
    assert registry.get_sample_value("reaper_conditions_open", labels) == 2
    assert registry.get_sample_value("reaper_last_pass_ok") == 0
    assert not {n for n in sample_names(registry) if n.startswith("reaper_broker_info")}


def test_dead_letter_gauges(metrics: ReaperMetrics, registry: CollectorRegistry) -> None:
    metrics.observe(a_pass())
    read = {"queue": "vibey.work.dlq"}
    blocked = {"queue": "vibey.q.dlq"}
    assert registry.get_sample_value("reaper_dead_letter_queue_depth", read) == 130
    assert registry.get_sample_value("reaper_dead_letters_unread", read) == 25
    assert registry.get_sample_value("reaper_dead_letter_read_blocked", read) == 0
    assert registry.get_sample_value("reaper_dead_letter_queue_depth", blocked) == 7
    assert registry.get_sample_value("reaper_dead_letters_unread", blocked) == 7
    assert registry.get_sample_value("reaper_dead_letter_read_blocked", blocked) == 1


def test_oldest_claimable_age_per_project(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe(a_pass())
    age = "reaper_oldest_claimable_age_seconds"
    assert registry.get_sample_value(age, {"project_id": str(PROJECT_A)}) == 1200
    assert registry.get_sample_value(age, {"project_id": str(PROJECT_B)}) == 30


def test_policy_gauges(metrics: ReaperMetrics, registry: CollectorRegistry) -> None:
    metrics.observe(a_pass())
    verified = "reaper_policy_verified"
    assert registry.get_sample_value(verified, {"policy": "vibey-quorum"}) == 1
    assert registry.get_sample_value(verified, {"policy": "vibey-classic"}) == 0
    assert registry.get_sample_value(verified, {"policy": "vibey-dlq"}) == 0  # refused
    outcome = "reaper_policy_outcome"
    assert registry.get_sample_value(outcome, {"policy": "vibey-classic", "action": "updated"}) == 1
    assert registry.get_sample_value(outcome, {"policy": "vibey-dlq", "action": "refused"}) == 1
    assert registry.get_sample_value(outcome, {"policy": "vibey-dlq", "action": "updated"}) is None
    failing = "reaper_policy_queues_failing"
    assert registry.get_sample_value(failing, {"policy": "vibey-classic"}) == 2


def test_a_planned_policy_is_not_reported_verified_or_unverified(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    planned = PolicyOutcome("vibey-quorum", "planned", None, 0, (), "would create")
    metrics.observe(a_pass(dry_run=True, policies=PoliciesOutcome((planned,))))
    assert registry.get_sample_value("reaper_policy_verified", {"policy": "vibey-quorum"}) is None
    labels = {"policy": "vibey-quorum", "action": "planned"}
    assert registry.get_sample_value("reaper_policy_outcome", labels) == 1


def test_last_pass_gauges(metrics: ReaperMetrics, registry: CollectorRegistry) -> None:
    metrics.observe(a_pass())
    finished = (NOW + timedelta(seconds=1.5)).timestamp()
    assert registry.get_sample_value("reaper_last_pass_timestamp_seconds") == finished
    assert registry.get_sample_value("reaper_last_pass_ok") == 0
    assert registry.get_sample_value("reaper_last_pass_dry_run") == 0
    labels = {"product": "RabbitMQ", "version": "4.0.5"}
    assert registry.get_sample_value("reaper_broker_info", labels) == 1

    metrics.observe(a_pass(policies=PoliciesOutcome(), dead_letters=DeadLettersOutcome()))
    assert registry.get_sample_value("reaper_last_pass_ok") == 1


def test_a_pass_that_raised_is_not_ok_and_keeps_the_last_completed_time(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe_failure()
    assert registry.get_sample_value("reaper_last_pass_ok") == 0
    assert registry.get_sample_value("reaper_last_pass_timestamp_seconds") is None

    metrics.observe(a_pass(policies=PoliciesOutcome(), dead_letters=DeadLettersOutcome()))
    metrics.observe_failure()
    assert registry.get_sample_value("reaper_last_pass_ok") == 0
    finished = (NOW + timedelta(seconds=1.5)).timestamp()
    assert registry.get_sample_value("reaper_last_pass_timestamp_seconds") == finished
    assert registry.get_sample_value("reaper_passes_total", {"result": "error"}) == 2


def test_series_of_vanished_queues_projects_and_policies_drop(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe(a_pass())
    metrics.observe(
        a_pass(
            dead_letters=DeadLettersOutcome(
                (DeadLetterOutcome("vibey.work.dlq", 0, 0, 130, 0, None),)
            ),
            claimable=(ClaimableHead(PROJECT_B, uuid4(), "test", NOW - timedelta(seconds=5)),),
            policies=PoliciesOutcome(
                (PolicyOutcome("vibey-quorum", "unchanged", True, 3, (), "in force"),)
            ),
        )
    )
    for name in (
        "reaper_dead_letter_queue_depth",
        "reaper_dead_letters_unread",
        "reaper_dead_letter_read_blocked",
    ):
        assert registry.get_sample_value(name, {"queue": "vibey.q.dlq"}) is None
        assert registry.get_sample_value(name, {"queue": "vibey.work.dlq"}) == 0
    age = "reaper_oldest_claimable_age_seconds"
    assert registry.get_sample_value(age, {"project_id": str(PROJECT_A)}) is None
    assert registry.get_sample_value(age, {"project_id": str(PROJECT_B)}) == 5
    assert registry.get_sample_value("reaper_policy_verified", {"policy": "vibey-classic"}) is None
    labels = {"policy": "vibey-dlq", "action": "refused"}
    assert registry.get_sample_value("reaper_policy_outcome", labels) is None


def test_labels_are_bounded_never_a_job_id(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    metrics.observe(a_pass())
    job_ids = {str(j) for j in JOB_IDS}
    values = {v for f in registry.collect() for s in f.samples for v in s.labels.values()}
    assert not values & job_ids
    assert {"vibey.work.dlq", str(PROJECT_A), "vibey-quorum"} <= values


def test_two_metric_sets_cannot_share_a_registry(registry: CollectorRegistry) -> None:
    ReaperMetrics(registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        ReaperMetrics(registry)


# --------------------------------------------------------------------------- textfile


def test_textfile_is_written_atomically_and_parses(metrics: ReaperMetrics, tmp_path: Path) -> None:
    metrics.observe(a_pass())
    path = tmp_path / "queue_reaper.prom"
    path.write_text("stale content that is not exposition format {\n")
    metrics.write_textfile(str(path))

    assert os.listdir(tmp_path) == ["queue_reaper.prom"]  # no temporary file left behind
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    assert "reaper_verdicts" in families
    assert "reaper_conditions_open" in families
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    assert samples[("reaper_jobs_parked_total", ())] == 1


def test_textfile_into_a_missing_directory_is_a_clear_error(
    metrics: ReaperMetrics, tmp_path: Path
) -> None:
    path = tmp_path / "missing" / "queue_reaper.prom"
    with pytest.raises(MetricsExportError, match=r"could not write the metrics textfile .*missing"):
        metrics.write_textfile(str(path))
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- pushgateway


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_push_to_a_closed_port_is_a_clear_error_without_credentials(
    metrics: ReaperMetrics,
) -> None:
    url = f"http://pusher:s3cret-pw@127.0.0.1:{closed_port()}"
    with pytest.raises(MetricsExportError) as caught:
        metrics.push(url)
    message = str(caught.value)
    assert message.startswith("could not reach the Pushgateway at http://***@127.0.0.1:")
    assert "refused" in message.lower()
    assert "s3cret-pw" not in message
    assert "Traceback" not in message


def test_push_with_a_bad_url_is_a_clear_error(metrics: ReaperMetrics) -> None:
    with pytest.raises(MetricsExportError, match=r"Pushgateway at http://127\.0\.0\.1:notaport"):
        metrics.push("http://127.0.0.1:notaport")


class _Gateway(http.server.BaseHTTPRequestHandler):
    """A stand-in that records what a Pushgateway would receive, answering ``status``."""

    requests: list[tuple[str, str, dict[str, str], bytes]] = []  # noqa: RUF012
    status = 200

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).requests.append((self.command, self.path, dict(self.headers), body))
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[tuple[str, type[_Gateway]]]:
    handler = type("Gateway", (_Gateway,), {"requests": [], "status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_push_puts_every_metric_under_the_job_with_basic_auth_from_the_url(
    metrics: ReaperMetrics, gateway: tuple[str, type[_Gateway]]
) -> None:
    address, handler = gateway
    metrics.observe(a_pass())
    metrics.push(f"http://pusher:s3cret@{address}", grouping_key={"instance": "cron-1"})
    [(method, path, headers, body)] = handler.requests
    assert method == "PUT"
    assert path == "/metrics/job/queue-reaper/instance/cron-1"
    assert headers["Authorization"] == "Basic cHVzaGVyOnMzY3JldA=="  # pusher:s3cret
    text = body.decode()
    assert "reaper_verdicts_total{" in text
    assert "reaper_last_pass_timestamp_seconds" in text


def test_a_gateway_refusal_is_a_clear_error(
    metrics: ReaperMetrics, gateway: tuple[str, type[_Gateway]]
) -> None:
    address, handler = gateway
    handler.status = 400
    with pytest.raises(MetricsExportError, match=r"refused the metrics: HTTP 400"):
        metrics.push(f"http://{address}")


def test_what_the_broker_cannot_enforce_is_not_an_unverified_policy_and_a_plan_is_no_failure(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    unenforceable = PolicyOutcome(
        "vibey-classic", "unchanged", False, 1, ("vibey.c",), "...", "NotEnforced", True
    )
    planned = PolicyOutcome("vibey-quorum", "planned", False, 3, (), "...", "WouldUpdate")
    metrics.observe(replace(a_pass(), policies=PoliciesOutcome((unenforceable,))))
    assert registry.get_sample_value("reaper_policy_verified", {"policy": "vibey-classic"}) == 1
    metrics.observe(replace(a_pass(dry_run=True), policies=PoliciesOutcome((planned,))))
    assert registry.get_sample_value("reaper_policy_verified", {"policy": "vibey-quorum"}) is None


def test_lease_moves_are_counted_as_the_pass_counted_them(
    metrics: ReaperMetrics, registry: CollectorRegistry
) -> None:
    from tests.unit.test_report import _lease_result

    metrics.observe(_lease_result(expired=4, poison=2))  # the moves spooled, as a pass keeps them
    assert registry.get_sample_value("reaper_leases_requeued_total") == 4
    assert registry.get_sample_value("reaper_jobs_parked_total") == 2
    requeued = {"source": "job_queue", "condition": "lease_expired", "action": "requeue"}
    parked = {"source": "job_queue", "condition": "poison", "action": "park"}
    for labels, n in ((requeued, 4), (parked, 2)):
        assert registry.get_sample_value("reaper_verdicts_applied_total", labels) == n
        assert registry.get_sample_value("reaper_verdicts_recorded_total", labels) == n
        judged = labels | {"dry_run": "false"}
        assert registry.get_sample_value("reaper_verdicts_total", judged) == n
