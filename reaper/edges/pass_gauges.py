"""The gauges of the last pass, yielded from its result at each scrape.

The gauges of the last pass (SPEC §6), yielded by :class:`PassCollector` from the last
:class:`~reaper.reap.result.PassResult` at each scrape: conditions open, dead-letter queues,
claimable age per project, policies, sources, the open gates, last pass time and outcome. A
queue or project that vanished from the last pass vanishes from the scrape: no stale labelled
series is left behind. :mod:`reaper.edges.metrics` registers it beside the counters."""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric

from reaper.core.domain import SURFACED_CONDITIONS, Source
from reaper.gates.board import GateBoard, kinds_in
from reaper.reap.result import PassResult

__all__ = ["PassCollector"]


#: The gauges of the last pass, in the order a scrape lists them: name, help, labels.
_GAUGES: Final[tuple[tuple[str, str, tuple[str, ...]], ...]] = (
    (
        "conditions_open",
        "Surfaced conditions the last pass observed, by source and condition (0 for every "
        "condition the source can surface, when it was read; no series for a source that "
        "was not, nor for a pair that cannot occur).",
        ("source", "condition"),
    ),
    (
        "dead_letter_queue_depth",
        "Messages in a dead-letter queue at the last pass.",
        ("queue",),
    ),
    (
        "dead_letters_unread",
        "Dead letters the last pass did not read (beyond the peek limit, or not read at "
        "all): measured, never assumed parked.",
        ("queue",),
    ),
    (
        "dead_letter_read_blocked",
        "1 when the last pass refused to read a dead-letter queue because reading could "
        "not be proven safe (the report says why).",
        ("queue",),
    ),
    (
        "oldest_claimable_age_seconds",
        "Age of each project's oldest claimable job at the last pass, counted from the "
        "later of its run_after and its last dependency's success.",
        ("project_id",),
    ),
    (
        "policy_verified",
        "1 when the last pass verified a declared policy in force on every owned queue where "
        "the broker enforces it (queues where it cannot are unbounded conditions), 0 when it "
        "did not or the write was refused; no series when not checked, nor for a dry run's "
        "planned write.",
        ("policy",),
    ),
    (
        "policy_outcome",
        "1 for the action the last pass took on each declared policy "
        "(unchanged, created, updated, refused, unsupported, planned).",
        ("policy", "action"),
    ),
    (
        "policy_queues_failing",
        "Owned queues on which the last pass did not find a declared policy in force.",
        ("policy",),
    ),
    (
        "source_up",
        "1 when the last pass read the source (job_queue: PostgreSQL, broker: the "
        "management API), 0 when it could not.",
        ("source",),
    ),
    (
        "queue_unreadable",
        "1 for each queue the last pass listed but could not measure (its node down, its "
        "replicas without a majority): nothing was concluded about it, and the pass is not "
        "ok.",
        ("queue",),
    ),
    (
        "broker_node_running",
        "1 for each broker node the last pass found running, 0 for each listed as not "
        "running (a cluster's stopped member).",
        ("node",),
    ),
    (
        "management_url_answered",
        "1 for each management URL that answered the last pass, 0 for each skipped "
        "(refused or timed out; the next one was asked); no series for one not needed.",
        ("url",),
    ),
    (
        "broker_info",
        "The broker the last pass read: product and version (always 1).",
        ("product", "version"),
    ),
    (
        "last_pass_timestamp_seconds",
        "When the last completed pass finished, seconds since the epoch.",
        (),
    ),
    (
        "last_pass_ok",
        "1 when the last pass was ok (every source read, every policy verified, every "
        "dead-letter queue read safely); 0 when not, or when the pass raised.",
        (),
    ),
    (
        "last_pass_dry_run",
        "1 when the last pass was a dry-run audit (nothing moved, nothing recorded).",
        (),
    ),
    (
        "gates_open",
        "Gates waiting for a person's answer, by kind (from the gates table after the last "
        "pass; 0 for a kind with none).",
        ("kind",),
    ),
    (
        "gate_oldest_open_age_seconds",
        "How long the oldest open gate of each kind has waited, by the database's clock "
        "(0 when none is open).",
        ("kind",),
    ),
)


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
    return {
        name: GaugeMetricFamily(f"reaper_{name}", documentation, labels=list(labels))
        for name, documentation, labels in _GAUGES
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

    dead_letters = {d.queue: d for d in result.dead_letters.queues}
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

    for p in sorted(result.policies.outcomes, key=lambda p: p.name):
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
