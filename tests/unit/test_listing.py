"""The listing folded a page at a time (reaper.reap.listing) judges as the whole listing does:
the same verdicts and notes, the same inventory, the same policy outcomes, whatever the pages."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from reaper.broker.port import BrokerPolicy
from reaper.core.bounds import is_dead_letter_queue, is_owned_queue
from reaper.core.domain import BrokerFacts, Measurements, QueueStats, Thresholds
from reaper.core.judge import judge
from reaper.policies.declarations import PolicyParameters, load_declarations
from reaper.policies.outcome import PolicyState, outcome
from reaper.policies.reconcile import QueuesRead
from reaper.policies.render import DesiredPolicy, render
from reaper.policies.verify import check_queues
from reaper.reap.listing import Listing, read_listing
from tests.support.brokers import RABBITMQ_40, RABBITMQ_43, RABBITMQ_310
from tests.support.queues import queue_stats

folded = settings(deadline=None, max_examples=150)


class _Paged:
    """A broker's queue listing in these pages, as a pass reads them a page at a time."""

    def __init__(self, pages: Sequence[list[QueueStats]]) -> None:
        self.pages = pages

    async def queue_pages(self, vhost: str | None = None) -> AsyncIterator[list[QueueStats]]:
        for page in self.pages:
            yield page


def fold_pages(
    pages: Sequence[list[QueueStats]],
    facts: BrokerFacts,
    thresholds: Thresholds,
    *,
    desired: list[DesiredPolicy] | None,
) -> Listing:
    """The listing a pass reads from a broker that lists ``pages``."""
    broker: Any = _Paged(pages)
    return asyncio.run(read_listing(broker, None, facts, thresholds, desired=desired))


THRESHOLDS = Thresholds()
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
PARAMS = PolicyParameters()

names = st.builds(
    lambda prefix, middle, suffix: prefix + middle + suffix,
    st.sampled_from(["vibey.jobs.", "vibey.runs.", "vibey.", "celery.", "other."]),
    st.text(alphabet="abc0", min_size=1, max_size=4),
    st.sampled_from(["", ".dlq", ".dead", ".wait"]),
)
small = st.sampled_from([0, 0, 0, 0, 1, 3])
dead_letter_arguments = st.sampled_from(
    [{}, {"x-dead-letter-exchange": "vibey.dlx"}, {"x-delivery-limit": 5}, {"x-message-ttl": 1}]
)


@st.composite
def queue(draw: st.DrawFn, name: str, desired: list[DesiredPolicy]) -> QueueStats:
    """A queue, mostly a quiet and compliant one: empty, carrying the policy declared for it."""
    q = QueueStats(
        vhost="/",
        name=name,
        type=draw(st.sampled_from(["quorum", "classic", "quorum", None])),
        messages_ready=draw(small),
        messages_unacknowledged=draw(small),
        consumers=draw(small),
        arguments=draw(dead_letter_arguments),
        counts_known=draw(st.sampled_from([True, True, True, False])),
        policy_known=draw(st.sampled_from([True, True, True, False])),
        reported_delivery_limit=draw(st.sampled_from([None, -1, 20])),
    )
    selecting = [d for d in desired if d.selects(q)]
    if selecting and draw(st.booleans()):
        d = max(selecting, key=lambda d: d.priority)
        limit = d.definition.get("delivery-limit")
        q = replace(
            q,
            policy=d.name,
            effective_policy=dict(d.definition),
            reported_delivery_limit=draw(st.sampled_from([limit, limit, None])),
        )
    elif draw(st.booleans()):
        q = replace(q, policy=draw(st.sampled_from(["theirs", *(d.name for d in desired)])))
    return q


@st.composite
def cases(draw: st.DrawFn) -> tuple[BrokerFacts, list[QueueStats], list[list[QueueStats]]]:
    facts = draw(st.sampled_from([RABBITMQ_310, RABBITMQ_40, RABBITMQ_43]))
    desired = render(load_declarations(), PARAMS, facts, None)
    queue_names = draw(st.lists(names, min_size=0, max_size=24, unique=True))
    queues = [draw(queue(name, desired)) for name in queue_names]
    cuts = sorted(draw(st.lists(st.integers(0, len(queues)), max_size=5)))
    bounds = [0, *cuts, len(queues)]
    pages = [queues[a:b] for a, b in itertools.pairwise(bounds)]
    return facts, queues, pages


def _fold(facts: BrokerFacts, pages: list[list[QueueStats]], final: list[DesiredPolicy]) -> Listing:
    """As a pass does: folded with the policies rendered before any queue is known; listed
    again with the final ones when the listing no longer holds (``reconcile._still_true``)."""
    listing = fold_pages(
        pages, facts, THRESHOLDS, desired=render(load_declarations(), PARAMS, facts, None)
    )
    if any(d.withheld and listing.quiet.verified.get(d.name) for d in final):
        listing = fold_pages(pages, facts, THRESHOLDS, desired=final)
    return listing


@folded
@given(cases())
def test_the_folded_listing_judges_as_the_whole_listing(
    case: tuple[BrokerFacts, list[QueueStats], list[list[QueueStats]]],
) -> None:
    facts, queues, pages = case
    final = render(load_declarations(), PARAMS, facts, queues)
    listing = _fold(facts, pages, final)
    kept = listing.queues + tuple(q for q, _ in listing.unavailable)
    dropped = listing.quiet.without_statistics
    event(f"quiet queues: {min(listing.quiet.count, 3)}{'+' if listing.quiet.count > 2 else ''}")
    event(f"dropped without statistics: {min(len(dropped), 2)}{'+' if len(dropped) > 1 else ''}")
    assert len(kept) + listing.quiet.count + len(dropped) == len(queues)
    assert sorted(dropped) == sorted(q.name for q in queues if not q.counts_known and q not in kept)
    whole = judge(Measurements(queues=tuple(queues), broker=facts), THRESHOLDS, NOW)
    part = judge(
        Measurements(queues=listing.queues, broker=facts, without_statistics=dropped),
        THRESHOLDS,
        NOW,
    )
    assert part == whole
    owned = sum(is_owned_queue(q.name, THRESHOLDS) for q in queues)
    dead = sum(is_dead_letter_queue(q.name, THRESHOLDS) for q in queues)
    listed = [q.name for q in kept] + list(dropped)
    assert listing.quiet.owned + sum(is_owned_queue(n, THRESHOLDS) for n in listed) == owned
    assert (
        listing.quiet.dead_letter + sum(is_dead_letter_queue(n, THRESHOLDS) for n in listed) == dead
    )
    # what the renderer withholds depends only on the queues kept
    assert render(load_declarations(), PARAMS, facts, kept) == final


@folded
@given(cases())
def test_the_policies_verified_on_the_folded_listing_are_those_on_the_whole(
    case: tuple[BrokerFacts, list[QueueStats], list[list[QueueStats]]],
) -> None:
    facts, queues, pages = case
    final = render(load_declarations(), PARAMS, facts, queues)
    listing = _fold(facts, pages, final)
    read = QueuesRead(listing.queues, listing.unavailable, listing.quiet.verified)
    held = {
        d.name: BrokerPolicy(d.name, d.pattern, d.apply_to, d.priority, d.definition) for d in final
    }
    whole_checks = check_queues(final, queues)
    part_checks = check_queues(final, read.queues)
    for d in final:
        state = PolicyState(d, held[d.name], ())
        whole = outcome(state, whole_checks, held, (), dry_run=False)
        part = outcome(
            state,
            part_checks,
            held,
            read.unreadable,
            dry_run=False,
            quiet=read.verified.get(d.name, 0),
        )
        assert part == whole, d.name


def test_a_quiet_queue_is_counted_and_not_kept() -> None:
    facts = RABBITMQ_40
    desired = render(load_declarations(), PARAMS, facts, None)
    (quorum,) = [d for d in desired if d.queue_type == "quorum" and "dead" not in d.name]
    quiet = queue_stats(
        "vibey.jobs.p1",
        policy=quorum.name,
        effective_policy=dict(quorum.definition),
        arguments={"x-dead-letter-exchange": "vibey.dlx"},
        reported_delivery_limit=20,
    )
    busy = replace(quiet, name="vibey.jobs.p2", messages_ready=1)
    listing = fold_pages([[quiet], [busy]], facts, THRESHOLDS, desired=desired)
    assert [q.name for q in listing.queues] == ["vibey.jobs.p2"]
    assert (listing.quiet.owned, listing.quiet.foreign, listing.pages) == (1, 0, 2)
    assert listing.quiet.verified == {quorum.name: 1}
