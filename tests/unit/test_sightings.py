"""The sighting rule, pure: first seen, still open, cleared; an unread source clears nothing."""

from __future__ import annotations

import uuid
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from reaper.core.domain import (
    FLEET_PROJECT_ID,
    Action,
    Condition,
    SightingKey,
    Source,
    Verdict,
)
from reaper.core.domain import Condition as _Condition
from reaper.core.domain import SightingKey as _Key
from reaper.core.domain import Source as _Source
from reaper.core.sightings import (
    CLEARED_DETAIL,
    SightingRef,
    batches,
    cleared,
    is_read,
    observed_sightings,
    records_to_write,
    ref_of,
    verdict_from_record,
)
from reaper.core.sightings import SightingRef as _Ref
from tests.support.verdicts import BOTH, MEASURES, broker_finding, verdicts
from tests.support.verdicts import stale as stale_job

P1, P2 = uuid.UUID(int=1), uuid.UUID(int=2)


def stale(project: uuid.UUID, job: str = "job-1", age: int = 1000) -> Verdict:
    return stale_job(project, job, age, detail="oldest claimable job unclaimed")


def gone(queue: str, unacked: int = 3) -> Verdict:
    return broker_finding(queue, Condition.HOLDER_GONE, unacked)


def test_refs_live_on_the_verdicts_stream() -> None:
    assert ref_of(stale(P1)) == SightingRef(
        P1, SightingKey(Source.JOB_QUEUE, Condition.STALE_READY, str(P1))
    )
    broker = gone("vibey.jobs.a")
    assert ref_of(broker) == SightingRef(
        FLEET_PROJECT_ID, SightingKey(Source.BROKER, Condition.HOLDER_GONE, "vibey.jobs.a")
    )
    # a project's stale head is one sighting, whichever job is at the head
    assert ref_of(stale(P1, "job-1")) == ref_of(stale(P1, "job-2"))


def test_only_surfaced_verdicts_are_sightings_and_the_first_of_a_ref_wins() -> None:
    first, second = stale(P1, "job-1", 1000), stale(P1, "job-2", 5000)
    requeue = replace(stale(P2), action=Action.REQUEUE, condition=Condition.LEASE_EXPIRED)
    observed = observed_sightings([first, requeue, second, gone("q")])
    assert list(observed.values()) == [first, gone("q")]
    assert observed[ref_of(first)] is first


def test_first_seen_is_recorded_then_nothing_while_it_persists() -> None:
    v = stale(P1)
    observed = observed_sightings([v])
    assert records_to_write(observed, {}, BOTH) == [v]
    assert records_to_write(observed, {ref_of(v): v}, BOTH) == []  # still open
    # cleared since: a new episode is recorded
    assert records_to_write(observed, {ref_of(v): cleared(v)}, BOTH) == [v]


def test_an_open_sighting_not_observed_is_cleared_once() -> None:
    v = gone("vibey.jobs.a")
    records = records_to_write({}, {ref_of(v): v}, BOTH)
    assert records == [cleared(v)]
    [c] = records
    assert (c.action, c.measured, c.object, c.queue, c.source, c.condition) == (
        Action.CLEARED,
        None,
        v.object,
        v.queue,
        v.source,
        v.condition,
    )
    assert c.detail == CLEARED_DETAIL and c.threshold == v.threshold and c.trusted is False
    assert records_to_write({}, {ref_of(v): c}, BOTH) == []  # already closed


def test_a_source_that_was_not_read_clears_nothing() -> None:
    broker, job = gone("q"), stale(P1)
    latest = {ref_of(broker): broker, ref_of(job): job}
    assert records_to_write({}, latest, frozenset({Source.JOB_QUEUE})) == [cleared(job)]
    assert records_to_write({}, latest, frozenset({Source.BROKER})) == [cleared(broker)]
    assert records_to_write({}, latest, frozenset()) == []


def test_a_pass_scoped_to_one_project_clears_only_that_projects_sightings() -> None:
    mine, theirs, broker = stale(P1), stale(P2), gone("q")
    latest = {ref_of(v): v for v in (mine, theirs, broker)}
    records = records_to_write({}, latest, BOTH, project_id=P1)
    assert sorted(r.object for r in records) == sorted([mine.object, broker.object])
    assert not is_read(theirs, BOTH, P1)
    assert is_read(theirs, BOTH, None)
    assert is_read(broker, BOTH, P1)


def test_observed_records_come_first_in_order_then_clears() -> None:
    a, b, old = gone("a"), gone("b"), gone("old")
    records = records_to_write(observed_sightings([b, a]), {ref_of(old): old}, BOTH)
    assert records == [b, a, cleared(old)]


@given(
    v=verdicts(
        st.sampled_from((Action.SURFACE, Action.CLEARED)), MEASURES | st.floats(allow_nan=False)
    )
)
def test_a_stored_record_rebuilds_to_the_same_ref(v: Verdict) -> None:
    rebuilt = verdict_from_record(v.stream, v.payload(), v.trusted)
    assert ref_of(rebuilt) == ref_of(v)
    assert rebuilt.payload() == v.payload()


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), unique=True), st.integers(1, 7))
def test_batches_hold_every_ref_once_and_keep_a_measures_buckets_together(
    queues: list[tuple[int, int]], size: int
) -> None:
    stream = uuid.UUID(int=7)
    refs = [
        _Ref(stream, _Key(_Source.BROKER, _Condition.DEAD_LETTER, f"q{q}#{b}")) for q, b in queues
    ]
    grouped = batches(refs, size)
    assert sorted(r for batch in grouped for r in batch) == sorted(refs)
    where = {r.key.scope.split("#")[0]: i for i, batch in enumerate(grouped) for r in batch}
    for i, batch in enumerate(grouped):
        assert batch == sorted(batch)
        assert all(where[r.key.scope.split("#")[0]] == i for r in batch)
        measures = {r.key.scope.split("#")[0] for r in batch}
        assert len(batch) <= size or len(measures) == 1
