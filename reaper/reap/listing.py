"""The vhost's queues as a pass keeps them: read, judged and dropped a page at a time.

So a pass's memory does not grow with the number of queues (SPEC §8). A queue survives its
page when anything downstream may need it: it is unavailable, its policy is not known yet, it
holds or lists anything (messages, deliveries, consumers), a consumer of the vhost names it,
the judge says anything of it, or a declared policy fails on it or would withhold a delivery
limit for it. Every other queue is *quiet*: it is counted (owned, foreign, dead-letter) and,
per declared policy, counted as verified, then forgotten; one listed without its statistics
(not a measurement: a node just restarted lists thousands so) is forgotten but for its name.
The kept queues, the counts and those names judge as the whole listing does (held so by a
property test).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reaper.broker.port import Broker
from reaper.core.bounds import dead_letter_exchange_in_force, is_dead_letter_queue, is_owned_queue
from reaper.core.cluster import queue_unavailable
from reaper.core.domain import BrokerFacts, QueueStats, Thresholds
from reaper.core.judge_queues import judge_queue
from reaper.core.values import is_unlimited
from reaper.policies.render import DesiredPolicy
from reaper.policies.verify import check_queues

__all__ = ["Listing", "QuietQueues", "read_listing"]


@dataclass(frozen=True)
class QuietQueues:
    """The queues listed and not kept, as counts: each was judged with nothing to say."""

    owned: int = 0
    foreign: int = 0
    dead_letter: int = 0
    #: Per declared policy (by name), the quiet queues it is declared for that showed its
    #: bounds in force (those listed without statistics among them).
    verified: Mapping[str, int] = field(default_factory=dict)
    #: The queues listed without their statistics and dropped (nothing else to say of them):
    #: not quiet, not counted above, named so that no finding on them is cleared.
    without_statistics: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return self.owned + self.foreign


@dataclass(frozen=True)
class Listing:
    """One listing of the vhost's queues, folded: the queues kept (measurable ones), those
    that cannot be measured now with why, the quiet ones as counts, and the pages read."""

    queues: tuple[QueueStats, ...] = ()
    unavailable: tuple[tuple[QueueStats, str], ...] = ()
    quiet: QuietQueues = field(default_factory=QuietQueues)
    pages: int = 0


@dataclass
class _Fold:
    facts: BrokerFacts
    thresholds: Thresholds
    desired: Sequence[DesiredPolicy] | None
    watched: frozenset[str]
    kept: list[QueueStats] = field(default_factory=list)
    unavailable: list[tuple[QueueStats, str]] = field(default_factory=list)
    owned: int = 0
    foreign: int = 0
    dead_letter: int = 0
    verified: dict[str, int] = field(default_factory=dict)
    without_statistics: list[str] = field(default_factory=list)
    pages: int = 0

    def listing(self) -> Listing:
        quiet = QuietQueues(
            self.owned,
            self.foreign,
            self.dead_letter,
            dict(self.verified),
            tuple(self.without_statistics),
        )
        return Listing(tuple(self.kept), tuple(self.unavailable), quiet, self.pages)


def _fold_page(fold: _Fold, page: Sequence[QueueStats]) -> None:
    """Judge one page into ``fold``: keep what may be needed, count the rest."""
    fold.pages += 1
    for queue in page:
        why = queue_unavailable(queue, fold.facts.nodes)
        if why is not None:
            fold.unavailable.append((queue, why))
            continue
        verified = _quiet(queue, fold)
        if verified is None:
            fold.kept.append(queue)
            continue
        for name in verified:
            fold.verified[name] = fold.verified.get(name, 0) + 1
        if not queue.counts_known:
            fold.without_statistics.append(queue.name)
            continue
        owned = is_owned_queue(queue.name, fold.thresholds)
        fold.owned += owned
        fold.foreign += not owned
        fold.dead_letter += is_dead_letter_queue(queue.name, fold.thresholds)


def _quiet(queue: QueueStats, fold: _Fold) -> list[str] | None:
    """The declared policies verified on ``queue`` if it is quiet (or listed without its
    statistics, with nothing else to say), else None (keep it)."""
    if not queue.policy_known or queue.name in fold.watched:
        return None
    if queue.counts_known and (
        queue.messages_ready != 0 or queue.messages_unacknowledged != 0 or queue.consumers != 0
    ):
        return None
    # An empty queue's verdicts do not depend on the clock (no head to age), nor do those of
    # a queue without its statistics (only its bounds are judged).
    judged = judge_queue(queue, fold.facts, fold.thresholds, 0, observed=True)
    if judged.verdicts or judged.notes:
        return None
    if fold.desired is None:
        return []
    checks = check_queues(fold.desired, [queue])
    if not all(c.ok and c.targeted for c in checks) or _withholds(queue, fold.desired):
        return None
    return [c.policy for c in checks]


def _withholds(queue: QueueStats, desired: Sequence[DesiredPolicy]) -> bool:
    """Whether a finite delivery limit of ``desired`` reaches ``queue`` with no dead-letter
    target in force (the renderer then withholds it: :func:`reaper.policies.render.render`)."""
    for d in desired:
        value = d.definition.get("delivery-limit")
        if value is None or is_unlimited(value) or queue.kind != d.queue_type:
            continue
        if re.search(d.pattern, queue.name) and dead_letter_exchange_in_force(queue) is None:
            return True
    return False


async def read_listing(
    broker: Broker,
    vhost: str | None,
    facts: BrokerFacts,
    thresholds: Thresholds,
    *,
    desired: Sequence[DesiredPolicy] | None,
    watched: frozenset[str] = frozenset(),
) -> Listing:
    """Read the vhost's queues a page at a time, each page folded before the next is held.
    ``desired``: the declared policies as rendered for this broker without the queues (None:
    none could be rendered, and nothing is verified); ``watched``: queues a consumer of the
    vhost names, always kept."""
    fold = _Fold(facts, thresholds, desired, watched)
    async for page in broker.queue_pages(vhost):
        _fold_page(fold, page)
    return fold.listing()
