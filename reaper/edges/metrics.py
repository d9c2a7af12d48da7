"""The pass as Prometheus metrics: the last pass's gauges and the process's counters.

What the last pass saw, as gauges yielded from its result (:mod:`reaper.edges.pass_gauges`), and
what the process has done, as counters and a histogram across passes; exported by a scrape, a
textfile or a Pushgateway (SPEC §6).

``reaper_verdicts_total`` counts every verdict judged, once per pass, under a ``dry_run`` label
so an audit never inflates the real rates (a condition still open is judged again each pass);
the ledger's view is ``reaper_verdicts_recorded_total``. The move counters count only what a
real pass moved and recorded. Label values are bounded (sources, conditions, actions, queue,
policy and node names, project ids, the configured URLs): never a job id, never a header.
"""

from __future__ import annotations

import os
import threading
import urllib.error
from collections.abc import Callable, Mapping
from http.client import HTTPException
from urllib.parse import urlsplit, urlunsplit

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.exposition import (
    basic_auth_handler,
    default_handler,
    push_to_gateway,
    write_to_textfile,
)

from reaper.core.domain import Action, Condition, Source
from reaper.edges.pass_gauges import PassCollector
from reaper.errors import ReaperError, scrub
from reaper.gates.board import GateBoard
from reaper.reap.result import PassResult
from reaper.version import __version__

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
        # The exporters' convention (prometheus_build_info): 1, the version as a label, so a
        # dashboard can join on it and an alert can tell a fleet of mixed versions.
        Gauge(
            "reaper_build_info",
            "The queue-reaper version this process runs (always 1).",
            ["version"],
            registry=r,
        ).labels(__version__).set(1)
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
                self._count(v.source, v.condition, v.action, dry_run, real and rv.recorded)
            # the lease verdicts as counted by the pass, not read back for the counters
            listing = result.leases.listing
            for (condition, action), n in listing.tally().items():
                recorded = real and listing.recorded
                self._count(Source.JOB_QUEUE, condition, action, dry_run, recorded, n)
            if real:
                self.dead_letters_parked.inc(
                    sum(max(0, d.parked_new) for d in result.dead_letters.queues)
                )
                self.dead_letter_bodies_read.inc(
                    sum(max(0, d.bodies_read) for d in result.dead_letters.queues)
                )
            self.passes.labels("ok" if result.ok else "not_ok").inc()
            self.pass_duration.observe(max(0.0, result.duration_seconds))
            self.collector.update(result)

    def _count(
        self,
        source: Source,
        condition: Condition,
        action: Action,
        dry_run: str,
        recorded: bool,
        n: int = 1,
    ) -> None:
        """``n`` verdicts judged alike; recorded by a real pass, also as recorded, applied (a
        move or a clearance) and moved."""
        labels = (str(source), str(condition), str(action))
        self.verdicts.labels(*labels, dry_run).inc(n)
        if not recorded:
            return
        self.verdicts_recorded.labels(*labels).inc(n)
        if action is not Action.SURFACE:
            self.verdicts_applied.labels(*labels).inc(n)
        if source is Source.JOB_QUEUE and action is Action.REQUEUE:
            self.leases_requeued.inc(n)
        elif source is Source.JOB_QUEUE and action is Action.PARK:
            self.jobs_parked.inc(n)

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
