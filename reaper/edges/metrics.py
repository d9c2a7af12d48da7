"""The pass as Prometheus metrics (SPEC §6): a collector for the last pass, counters for all.

Two kinds of series, on purpose:

* **What the last pass saw** (conditions open, dead-letter queues, claimable age per project,
  policies, sources, last pass time and outcome) is yielded by :class:`PassCollector` from the
  last :class:`~reaper.reap.result.PassResult` at each scrape. A queue or project that vanished from
  the last pass vanishes from the scrape: no stale labelled series is left behind.
* **What the process has done** (verdicts, leases requeued, jobs and dead letters parked,
  passes, pass duration) are real counters and a histogram that accumulate across passes.

Counting rules: ``reaper_verdicts_total`` counts every verdict judged, once per pass, with a
``dry_run`` label so an audit never inflates the real rates; a condition that stays open is
judged again each pass, so its rate is "passes that saw it". The ledger's view (a sighting is
recorded once) is ``reaper_verdicts_recorded_total``. The move counters count only what a real
pass moved and recorded: a lease another reaper took first is not counted twice.

Label values are bounded: sources, conditions, actions, queue names, policy names, project
ids, broker nodes and the configured management URLs. Never a job id, never a dead letter's own
headers.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.client import HTTPException
from urllib.parse import urlsplit, urlunsplit

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import (
    basic_auth_handler,
    default_handler,
    push_to_gateway,
    write_to_textfile,
)

from reaper.core.domain import SURFACED_CONDITIONS, Action, Source
from reaper.edges.gate_board import GateBoard, kinds_in
from reaper.errors import ReaperError, scrub
from reaper.reap.result import PassResult

# A counter's ``*_created`` series repeats its help and says nothing a scrape needs (SPEC §6).
disable_created_metrics()  # type: ignore[no-untyped-call]

__all__ = ["DEFAULT_PUSH_JOB", "MetricsExportError", "PassCollector", "ReaperMetrics"]

#: The Pushgateway ``job`` a one-shot pass pushes under.
DEFAULT_PUSH_JOB = "queue-reaper"

#: A pass reads two sources and may wait up to ``policy_verify_wait_seconds`` (at most 120 s)
#: for the broker's statistics, so the buckets reach well past the default 10 s.
PASS_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

PASS_RESULTS = ("ok", "not_ok", "error")


class MetricsExportError(ReaperError):
    """The metrics could not be written or pushed. The message names where and why, scrubbed."""


@dataclass(frozen=True)
class _Last:
    """What the collector yields from, swapped in one assignment so a scrape from the HTTP
    thread never sees half of one pass and half of the next."""

    result: PassResult | None
    ok: bool | None
    #: The open gates read after the last pass, and time.monotonic() when they were read.
    board: GateBoard | None = None
    board_read_at: float = 0.0


def _flag(value: bool) -> float:
    return 1.0 if value else 0.0


class PassCollector:
    """Yields the gauges that describe the last pass, from the last :class:`PassResult`."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._last = _Last(result=None, ok=None)
        self._monotonic = monotonic

    def update(self, result: PassResult) -> None:
        last = self._last
        self._last = _Last(result, result.ok, last.board, last.board_read_at)

    def update_gates(self, board: GateBoard) -> None:
        last = self._last
        self._last = _Last(last.result, last.ok, board, self._monotonic())

    def mark_failed(self) -> None:
        """A pass raised before it produced a result: the last result's gauges stay (they are
        still the latest known), but the last pass is not ok."""
        last = self._last
        self._last = _Last(last.result, False, last.board, last.board_read_at)

    @property
    def last_result(self) -> PassResult | None:
        return self._last.result

    def describe(self) -> Iterable[Metric]:
        return list(_families().values())

    def collect(self) -> Iterable[Metric]:
        last = self._last
        families = _families()
        if last.ok is not None:
            families["last_pass_ok"].add_metric([], _flag(last.ok))
        if last.result is not None:
            _fill(families, last.result)
        if last.board is not None:
            # the oldest gate keeps ageing between passes: the age at the read, plus since
            since = max(0.0, self._monotonic() - last.board_read_at)
            _fill_gates(families, last.board, since)
        return list(families.values())


def _families() -> dict[str, GaugeMetricFamily]:
    def gauge(name: str, documentation: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"reaper_{name}", documentation, labels=list(labels))

    return {
        "conditions_open": gauge(
            "conditions_open",
            "Surfaced conditions the last pass observed, by source and condition (0 for every "
            "condition the source can surface, when it was read; no series for a source that "
            "was not, nor for a pair that cannot occur).",
            ("source", "condition"),
        ),
        "dead_letter_queue_depth": gauge(
            "dead_letter_queue_depth",
            "Messages in a dead-letter queue at the last pass.",
            ("queue",),
        ),
        "dead_letters_unread": gauge(
            "dead_letters_unread",
            "Dead letters the last pass did not read (beyond the peek limit, or not read at "
            "all): measured, never assumed parked.",
            ("queue",),
        ),
        "dead_letter_read_blocked": gauge(
            "dead_letter_read_blocked",
            "1 when the last pass refused to read a dead-letter queue because reading could "
            "not be proven safe (the report says why).",
            ("queue",),
        ),
        "oldest_claimable_age_seconds": gauge(
            "oldest_claimable_age_seconds",
            "Age of each project's oldest claimable job at the last pass, counted from the "
            "later of its run_after and its last dependency's success.",
            ("project_id",),
        ),
        "policy_verified": gauge(
            "policy_verified",
            "1 when the last pass verified a declared policy in force on every owned queue where "
            "the broker enforces it (queues where it cannot are unbounded conditions), 0 when it "
            "did not or the write was refused; no series when not checked, nor for a dry run's "
            "planned write.",
            ("policy",),
        ),
        "policy_outcome": gauge(
            "policy_outcome",
            "1 for the action the last pass took on each declared policy "
            "(unchanged, created, updated, refused, unsupported, planned).",
            ("policy", "action"),
        ),
        "policy_queues_failing": gauge(
            "policy_queues_failing",
            "Owned queues on which the last pass did not find a declared policy in force.",
            ("policy",),
        ),
        "source_up": gauge(
            "source_up",
            "1 when the last pass read the source (job_queue: PostgreSQL, broker: the "
            "management API), 0 when it could not.",
            ("source",),
        ),
        "queue_unreadable": gauge(
            "queue_unreadable",
            "1 for each queue the last pass listed but could not measure (its node down, its "
            "replicas without a majority): nothing was concluded about it, and the pass is not "
            "ok.",
            ("queue",),
        ),
        "broker_node_running": gauge(
            "broker_node_running",
            "1 for each broker node the last pass found running, 0 for each listed as not "
            "running (a cluster's stopped member).",
            ("node",),
        ),
        "management_url_answered": gauge(
            "management_url_answered",
            "1 for each management URL that answered the last pass, 0 for each skipped "
            "(refused or timed out; the next one was asked); no series for one not needed.",
            ("url",),
        ),
        "broker_info": gauge(
            "broker_info",
            "The broker the last pass read: product and version (always 1).",
            ("product", "version"),
        ),
        "last_pass_timestamp_seconds": gauge(
            "last_pass_timestamp_seconds",
            "When the last completed pass finished, seconds since the epoch.",
        ),
        "last_pass_ok": gauge(
            "last_pass_ok",
            "1 when the last pass was ok (every source read, every policy verified, every "
            "dead-letter queue read safely); 0 when not, or when the pass raised.",
        ),
        "last_pass_dry_run": gauge(
            "last_pass_dry_run",
            "1 when the last pass was a dry-run audit (nothing moved, nothing recorded).",
        ),
        "gates_open": gauge(
            "gates_open",
            "Gates waiting for a person's answer, by kind (from the gates table after the last "
            "pass; 0 for a kind with none).",
            ("kind",),
        ),
        "gate_oldest_open_age_seconds": gauge(
            "gate_oldest_open_age_seconds",
            "How long the oldest open gate of each kind has waited, by the database's clock "
            "(0 when none is open).",
            ("kind",),
        ),
    }


def _fill_gates(families: Mapping[str, GaugeMetricFamily], board: GateBoard, since: float) -> None:
    for kind in kinds_in(board.counts):
        count = board.open_of(kind)
        age = 0.0 if count is None else (board.now - count.oldest).total_seconds() + since
        families["gates_open"].add_metric([kind], 0 if count is None else count.open)
        families["gate_oldest_open_age_seconds"].add_metric([kind], max(0.0, age))


def _fill(families: Mapping[str, GaugeMetricFamily], result: PassResult) -> None:
    unreadable = {u.source for u in result.unreadable if u.queue is None}
    read = [s for s in Source if s.value not in unreadable]

    open_now: Tally[tuple[str, str]] = Tally()
    for source in read:
        for condition in SURFACED_CONDITIONS.get(source.value, ()):
            open_now[(source.value, condition)] += 0
    for rv in result.surfaced():
        open_now[(str(rv.verdict.source), str(rv.verdict.condition))] += 1
    for (source_name, condition_name), count in sorted(open_now.items()):
        families["conditions_open"].add_metric([source_name, condition_name], count)

    dead_letters = {d.queue: d for d in result.dead_letters}
    for queue, d in sorted(dead_letters.items()):
        families["dead_letter_queue_depth"].add_metric([queue], d.depth)
        families["dead_letters_unread"].add_metric([queue], d.unread)
        families["dead_letter_read_blocked"].add_metric([queue], _flag(d.read_blocked is not None))

    ages: dict[str, float] = {}
    for head in result.claimable:
        age = max(0.0, (result.started_at - head.claimable_since).total_seconds())
        key = str(head.project_id)
        ages[key] = max(age, ages.get(key, 0.0))
    for project, age in sorted(ages.items()):
        families["oldest_claimable_age_seconds"].add_metric([project], age)

    for p in sorted(result.policies, key=lambda p: p.name):
        families["policy_outcome"].add_metric([p.name, p.action], 1)
        families["policy_queues_failing"].add_metric([p.name], len(p.queues_failing))
        if (p.action == "refused" or p.verified is not None) and not p.planned:
            # what the broker cannot enforce is alerted on as an unbounded queue, not here
            verified = bool(p.verified) or p.unenforceable
            families["policy_verified"].add_metric([p.name], _flag(verified))

    for source in Source:
        families["source_up"].add_metric([source.value], _flag(source.value not in unreadable))

    for queue in sorted({u.queue for u in result.unreadable if u.queue is not None}):
        families["queue_unreadable"].add_metric([queue], 1)
    for endpoint in result.management:
        if endpoint.answered is not None:
            families["management_url_answered"].add_metric([endpoint.url], _flag(endpoint.answered))

    if result.broker is not None:
        families["broker_info"].add_metric([result.broker.product, result.broker.version], 1)
        for node in result.broker.nodes or ():
            families["broker_node_running"].add_metric([node.name], _flag(node.running))
    families["last_pass_timestamp_seconds"].add_metric([], result.finished_at.timestamp())
    families["last_pass_dry_run"].add_metric([], _flag(result.dry_run))


class ReaperMetrics:
    """Every metric of the reaper on one registry (a fresh one unless given).

    ``observe`` after each pass; then scrape the registry, ``write_textfile`` or ``push``.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.collector = PassCollector()
        self.registry.register(self.collector)
        self._lock = threading.Lock()
        r = self.registry
        self.verdicts = Counter(
            "reaper_verdicts",
            'Verdicts judged, one per verdict per pass (dry-run passes under dry_run="true").',
            ["source", "condition", "action", "dry_run"],
            registry=r,
        )
        self.verdicts_recorded = Counter(
            "reaper_verdicts_recorded",
            "Verdicts recorded as QueueReaped ledger events by this process.",
            ["source", "condition", "action"],
            registry=r,
        )
        self.verdicts_applied = Counter(
            "reaper_verdicts_applied",
            "Verdicts whose write committed (a requeue, park or clearance with its ledger event) "
            "in this process: a dry run, a surface and a failed write apply nothing.",
            ["source", "condition", "action"],
            registry=r,
        )
        self.leases_requeued = Counter(
            "reaper_leases_requeued",
            "Expired leases moved back to ready (each with its ledger event).",
            registry=r,
        )
        self.jobs_parked = Counter(
            "reaper_jobs_parked",
            "Poison jobs parked as awaiting_human behind a delivery_exhausted gate.",
            registry=r,
        )
        self.dead_letters_parked = Counter(
            "reaper_dead_letters_parked",
            "Dead letters parked as bus.dead_letter jobs behind a bus_dead_lettered gate.",
            registry=r,
        )
        self.dead_letter_bodies_read = Counter(
            "reaper_dead_letter_bodies_read",
            "Dead-letter bodies read: only by a pass that saw a letter not parked yet (a quiet "
            "pass reads none).",
            registry=r,
        )
        self.passes = Counter(
            "reaper_passes",
            "Passes run, by result: ok, not_ok (ran, something not ok) or error (raised).",
            ["result"],
            registry=r,
        )
        for name in PASS_RESULTS:
            self.passes.labels(name)
        self.pass_duration = Histogram(
            "reaper_pass_duration_seconds",
            "Wall time of one pass, from reading the sources to the result.",
            buckets=PASS_DURATION_BUCKETS,
            registry=r,
        )

    @property
    def last_result(self) -> PassResult | None:
        return self.collector.last_result

    def observe(self, result: PassResult) -> None:
        """Count a pass's verdicts and moves, and make it the pass the gauges describe."""
        dry_run = "true" if result.dry_run else "false"
        real = not result.dry_run
        with self._lock:
            for rv in result.verdicts:
                v = rv.verdict
                source, condition, action = str(v.source), str(v.condition), str(v.action)
                self.verdicts.labels(source, condition, action, dry_run).inc()
                if not (real and rv.recorded):
                    continue
                self.verdicts_recorded.labels(source, condition, action).inc()
                if rv.applied:
                    self.verdicts_applied.labels(source, condition, action).inc()
                if v.source is Source.JOB_QUEUE and v.action is Action.REQUEUE:
                    self.leases_requeued.inc()
                elif v.source is Source.JOB_QUEUE and v.action is Action.PARK:
                    self.jobs_parked.inc()
            if real:
                self.dead_letters_parked.inc(sum(max(0, d.parked_new) for d in result.dead_letters))
                self.dead_letter_bodies_read.inc(
                    sum(max(0, d.bodies_read) for d in result.dead_letters)
                )
            self.passes.labels("ok" if result.ok else "not_ok").inc()
            self.pass_duration.observe(max(0.0, result.duration_seconds))
            self.collector.update(result)

    def observe_gates(self, board: GateBoard) -> None:
        """Make ``board`` the open gates the gate gauges describe."""
        with self._lock:
            self.collector.update_gates(board)

    def observe_failure(self) -> None:
        """A pass raised instead of returning a result: ``reaper_last_pass_ok`` becomes 0 and
        ``reaper_last_pass_timestamp_seconds`` keeps the last pass that did complete."""
        with self._lock:
            self.passes.labels("error").inc()
            self.collector.mark_failed()

    def write_textfile(self, path: str | os.PathLike[str]) -> None:
        """Write every metric for node-exporter's textfile collector (the file name must end
        in ``.prom`` for it to be read). Atomic: written to a temporary file in the same
        directory, then renamed over ``path``; a failure leaves no temporary file."""
        try:
            write_to_textfile(os.fspath(path), self.registry)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise MetricsExportError(
                f"could not write the metrics textfile {path}: {reason}"
            ) from None

    def push(
        self,
        gateway_url: str,
        job: str = DEFAULT_PUSH_JOB,
        *,
        grouping_key: Mapping[str, str] | None = None,
        timeout_seconds: float = 10.0,
    ) -> None:
        """Push every metric to a Pushgateway (``PUT``: replaces the job's group).

        Credentials in the URL (``https://user:pass@host``) are sent as basic auth and never
        appear in a message. Any failure raises :class:`MetricsExportError`.
        """
        where = scrub(gateway_url)
        try:
            url, handler = _gateway(gateway_url)
            push_to_gateway(
                url,
                job=job,
                registry=self.registry,
                grouping_key=dict(grouping_key or {}),
                timeout=timeout_seconds,
                handler=handler,
            )
        except urllib.error.HTTPError as exc:
            raise MetricsExportError(
                f"the Pushgateway at {where} refused the metrics: HTTP {exc.code} {exc.reason}"
            ) from None
        except urllib.error.URLError as exc:
            raise MetricsExportError(
                f"could not reach the Pushgateway at {where}: {_reason(exc.reason)}"
            ) from None
        except (OSError, ValueError, HTTPException) as exc:
            raise MetricsExportError(
                f"could not push metrics to the Pushgateway at {where}: {_reason(exc)}"
            ) from None


def _reason(exc: object) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return scrub(exc.strerror)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return scrub(str(exc) or type(exc).__name__)


Handler = Callable[..., Callable[[], None]]


def _gateway(gateway_url: str) -> tuple[str, Handler]:
    """Split credentials out of the URL into a basic-auth handler."""
    url = gateway_url if "://" in gateway_url else f"http://{gateway_url}"
    parts = urlsplit(url)
    if parts.username is None:
        return url, default_handler
    username, password = parts.username, parts.password or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def handler(
        url: str, method: str, timeout: float | None, headers: list[tuple[str, str]], data: bytes
    ) -> Callable[[], None]:
        return basic_auth_handler(url, method, timeout, headers, data, username, password)

    return bare, handler
