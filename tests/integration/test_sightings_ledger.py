"""Sightings on the ledger, against real PostgreSQL: one record per episode, fleet-wide,
across several reapers and unreadable passes."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Coroutine
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar, TypeVar

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from reaper.core.domain import FLEET_PROJECT_ID, Action, Condition, Source, Verdict
from reaper.core.sightings import SightingsPass
from reaper.jobqueue.postgres import PostgresStore
from reaper.jobqueue.sql import QUERIES
from tests.support.store import NOW
from tests.support.verdicts import BOTH, broker_finding, stale

pytestmark = pytest.mark.postgres

T = TypeVar("T")


def _sighting_events(events: list[Any], queues: set[str] | None = None) -> list[Any]:
    return [
        e
        for e in events
        if e.payload["action"] in ("surface", "cleared")
        and (queues is None or e.payload["queue"] in queues)
    ]


async def test_first_seen_persisting_cleared_and_seen_again(pg_dsn: str) -> None:
    store = await PostgresStore.connect(pg_dsn)
    try:
        p, q = uuid.uuid4(), f"vibey.jobs.{uuid.uuid4().hex[:6]}"
        first = [stale(p), broker_finding(q)]
        assert (
            await store.record_sightings(first, SightingsPass(now=NOW, sources_read=BOTH))
        ).records == first
        for minute in range(1, 4):  # persisting: nothing more
            again = [stale(p, "another-head", 2000), broker_finding(q)]
            later = NOW + timedelta(minutes=minute)
            assert (
                await store.record_sightings(again, SightingsPass(now=later, sources_read=BOTH))
            ).records == []
        # the broker could not be read: its sighting stays open, the job queue's clears
        written = await store.record_sightings(
            [],
            SightingsPass(
                now=NOW + timedelta(minutes=5), sources_read=frozenset({Source.JOB_QUEUE})
            ),
        )
        assert [(w.source, w.action) for w in written.records] == [
            (Source.JOB_QUEUE, Action.CLEARED)
        ]
        assert (
            await store.record_sightings(
                [broker_finding(q)], SightingsPass(now=NOW, sources_read=BOTH)
            )
        ).records == []
        # seen again after clearing: a new episode
        back = [stale(p, "job-3")]
        written = await store.record_sightings(back, SightingsPass(now=NOW, sources_read=BOTH))
        assert [(w.source, w.action) for w in written.records] == [
            (Source.JOB_QUEUE, Action.SURFACE),
            (Source.BROKER, Action.CLEARED),
        ]
        project_events = await store.events(p)
        assert [(e.seq, e.payload["action"], e.payload["object"]) for e in project_events] == [
            (1, "surface", "job"),
            (2, "cleared", "job"),
            (3, "surface", "job-3"),
        ]
        fleet = _sighting_events(await store.events(FLEET_PROJECT_ID), {q})
        assert [(e.payload["action"], e.trusted) for e in fleet] == [
            ("surface", False),
            ("cleared", False),
        ]
        assert fleet[1].payload["measured"] is None
    finally:
        await store.close()


async def test_many_reapers_at_once_record_each_episode_once(pg_dsn: str) -> None:
    stores = [await PostgresStore.connect(pg_dsn, pool_size=1) for _ in range(8)]
    try:
        projects = [uuid.uuid4() for _ in range(5)]
        queues = [f"vibey.jobs.{uuid.uuid4().hex[:6]}" for _ in range(5)]
        observed = [stale(p) for p in projects] + [broker_finding(q) for q in queues]

        async def everyone(seen: list[Verdict]) -> list[list[Verdict]]:
            recorded = await asyncio.gather(
                *(
                    s.record_sightings(
                        seen if i % 2 else list(reversed(seen)),
                        SightingsPass(now=NOW, sources_read=BOTH),
                    )
                    for i, s in enumerate(stores)
                )
            )
            return [r.records for r in recorded]

        opened = await everyone(observed)
        assert Counter(id(v) for written in opened for v in written) == Counter(
            {id(v): 1 for v in observed}
        )
        closed = await everyone([])
        assert sum(len(w) for w in closed) == len(observed)
        for p in projects:
            actions = [e.payload["action"] for e in await stores[0].events(p)]
            assert actions == ["surface", "cleared"]
        fleet = _sighting_events(await stores[0].events(FLEET_PROJECT_ID), set(queues))
        assert Counter(e.payload["action"] for e in fleet) == {"surface": 5, "cleared": 5}
        seqs = [e.seq for e in await stores[0].events(FLEET_PROJECT_ID)]
        assert seqs == list(range(1, len(seqs) + 1))
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_the_latest_sighting_is_an_index_probe(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            """
            INSERT INTO event (project_id, seq, kind, payload, digest, trusted)
            SELECT gen_random_uuid(), 1, 'QueueReaped',
                   jsonb_build_object('source', 'job_queue', 'condition', 'lease_expired',
                                      'action', 'requeue', 'object', g::text),
                   repeat('a', 64), true
            FROM generate_series(1, 5000) AS g;
            ANALYZE event;
            """
        )
        plan = await conn.fetchval(
            f"EXPLAIN (FORMAT JSON) {QUERIES['latest_sightings']}".rstrip(";"),
            [FLEET_PROJECT_ID],
            ["broker"],
            ["holder_gone"],
            ["vibey.jobs.a"],
        )
    finally:
        await conn.close()
    text = json.dumps(plan)
    assert "event_sighting_latest_v2_idx" in text  # migration 0008: the bucketed scope
    assert '"Seq Scan"' not in text.replace('"Function Scan"', "")


# --------------------------------------------------------------------------- the machine

_JOB_QUEUE_KEYS = 2
_QUEUES = 2
_BROKER_CONDITIONS = (Condition.HOLDER_GONE, Condition.UNBOUNDED)


class SightingsMachine(RuleBasedStateMachine):
    """The world holds conditions; reapers pass over it, some unable to read a source. The
    ledger's open sightings must always equal the model's: the conditions present at the
    last pass that could read them."""

    loop: ClassVar[asyncio.AbstractEventLoop]
    stores: ClassVar[list[PostgresStore]]

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    @initialize()
    def fresh_streams(self) -> None:
        # a fresh universe per example: new projects, new queue names
        self.projects = [uuid.uuid4() for _ in range(_JOB_QUEUE_KEYS)]
        tag = uuid.uuid4().hex[:8]
        self.queues = [f"vibey.jobs.{tag}.{i}" for i in range(_QUEUES)]
        self.keys: list[tuple[Source, Condition, str]] = [
            (Source.JOB_QUEUE, Condition.STALE_READY, str(p)) for p in self.projects
        ] + [(Source.BROKER, c, q) for q in self.queues for c in _BROKER_CONDITIONS]
        self.present: set[int] = set()
        self.open: set[int] = set()
        self.episodes: Counter[int] = Counter()
        self.ended: Counter[int] = Counter()
        self.now = NOW
        self.passes = 0

    @rule(key=st.integers(0, 5))
    def appear(self, key: int) -> None:
        self.present.add(key)

    @rule(key=st.integers(0, 5))
    def vanish(self, key: int) -> None:
        self.present.discard(key)

    @rule(
        reapers=st.sampled_from([(0,), (1,), (2,), (0, 1), (1, 2), (0, 1, 2)]),
        reads_job_queue=st.booleans(),
        reads_broker=st.booleans(),
        scope=st.one_of(st.none(), st.integers(0, _JOB_QUEUE_KEYS - 1)),
        twice=st.booleans(),
    )
    def a_pass(
        self,
        reapers: tuple[int, ...],
        reads_job_queue: bool,
        reads_broker: bool,
        scope: int | None,
        twice: bool,
    ) -> None:
        """One pass, or the same pass by several reapers at once (the same world seen by
        each): together they write what one would."""
        self.passes += 1
        self.now += timedelta(minutes=1)
        read = frozenset(
            s
            for s, ok in ((Source.JOB_QUEUE, reads_job_queue), (Source.BROKER, reads_broker))
            if ok
        )
        project = None if scope is None else self.projects[scope]
        in_view = {k for k in range(len(self.keys)) if self._visible(k, read, project)}
        observed: list[Verdict] = []
        for k in sorted(self.present & in_view):
            verdict = self._verdict(k)
            observed.append(verdict)
            if twice:  # a second finding for the same sighting: the first wins
                observed.append(replace(verdict, object=f"{verdict.object}-dup", measured=9))

        async def together() -> list[list[Verdict]]:
            recorded = await asyncio.gather(
                *(
                    self.stores[r].record_sightings(
                        observed, SightingsPass(now=self.now, sources_read=read, project_id=project)
                    )
                    for r in reapers
                )
            )
            return [r.records for r in recorded]

        written = [w for per_reaper in self._run(together()) for w in per_reaper]

        # an unscoped pass that read a source also clears what earlier examples left open
        # (it measured the whole fleet): only this example's keys are the model's business
        written = [w for w in written if self._key_of(w) is not None]
        opened = {k for k in in_view if k in self.present and k not in self.open}
        closed = {k for k in in_view if k not in self.present and k in self.open}
        self.open = (self.open | opened) - closed
        self.episodes.update(opened)
        self.ended.update(closed)
        assert {self._key_of(w) for w in written if w.action is Action.SURFACE} == opened
        assert {self._key_of(w) for w in written if w.action is Action.CLEARED} == closed
        assert len(written) == len(opened) + len(closed), "one record per change, fleet-wide"
        assert all(not w.object.endswith("-dup") for w in written)

    @invariant()
    def the_ledger_agrees(self) -> None:
        if not hasattr(self, "keys"):
            return
        history: dict[int, list[str]] = {k: [] for k in range(len(self.keys))}
        for stream in [*self.projects, FLEET_PROJECT_ID]:
            events = self._run(self.stores[0].events(stream))
            for e in events:
                if e.payload["action"] not in ("surface", "cleared"):
                    continue
                if stream == FLEET_PROJECT_ID and e.payload["queue"] not in self.queues:
                    continue  # another example's
                history[self._key_of_payload(stream, e.payload)].append(e.payload["action"])
        ledger_open = {k for k, actions in history.items() if actions and actions[-1] == "surface"}
        assert ledger_open == self.open
        # the index of open sightings holds exactly what the ledger has open
        assert self._indexed() == ledger_open
        for k, actions in history.items():
            # surface, cleared, surface, ...: one surface per episode, one cleared per end
            assert actions == ["surface", "cleared"] * self.ended[k] + (
                ["surface"] if k in self.open else []
            ), (self.keys[k], actions)
            assert actions.count("surface") == self.episodes[k]

    def _indexed(self) -> set[int]:
        async def rows() -> list[Any]:
            async with self.stores[0].database.session("reading the index") as conn:
                return list(
                    await conn.fetch(
                        "SELECT stream, payload::text AS payload FROM reaper_open_sighting"
                        " WHERE stream = ANY($1::uuid[])",
                        [*self.projects, FLEET_PROJECT_ID],
                    )
                )

        found = set()
        for row in self._run(rows()):
            payload = json.loads(row["payload"])
            if row["stream"] == FLEET_PROJECT_ID and payload["queue"] not in self.queues:
                continue  # another example's
            found.add(self._key_of_payload(row["stream"], payload))
        return found

    def _visible(self, k: int, read: frozenset[Source], project: uuid.UUID | None) -> bool:
        source, _, scope = self.keys[k]
        if source not in read:
            return False
        return source is Source.BROKER or project is None or scope == str(project)

    def _verdict(self, k: int) -> Verdict:
        source, condition, scope = self.keys[k]
        if source is Source.JOB_QUEUE:
            return stale(uuid.UUID(scope), job=f"head-{self.passes}", age=900 + self.passes)
        return broker_finding(scope, condition)

    def _key_of(self, v: Verdict) -> int | None:
        scope = str(v.project_id) if v.source is Source.JOB_QUEUE else str(v.queue)
        key = (v.source, v.condition, scope)
        return self.keys.index(key) if key in self.keys else None

    def _key_of_payload(self, stream: uuid.UUID, payload: Any) -> int:
        source = Source(payload["source"])
        scope = str(stream) if source is Source.JOB_QUEUE else payload["queue"]
        return self.keys.index((source, Condition(payload["condition"]), scope))


def test_sightings_state_machine(pg_dsn: str) -> None:
    loop = asyncio.new_event_loop()
    try:
        stores = [
            loop.run_until_complete(PostgresStore.connect(pg_dsn, pool_size=1)) for _ in range(3)
        ]
        SightingsMachine.loop = loop
        SightingsMachine.stores = stores
        try:
            run_state_machine_as_test(
                SightingsMachine,
                settings=settings(
                    max_examples=50,
                    stateful_step_count=25,
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow],
                ),
            )
        finally:
            for s in stores:
                loop.run_until_complete(s.close())
    finally:
        loop.close()


async def test_more_sightings_than_the_lock_table_holds_are_recorded_and_cleared(
    pg_dsn: str,
) -> None:
    """30,000 sightings at once: one advisory lock each in one transaction overflows
    PostgreSQL's lock table ("out of shared memory"); in batches they are all recorded,
    in their order, and all cleared when none is seen."""
    store = await PostgresStore.connect(pg_dsn)
    try:
        run = uuid.uuid4().hex[:6]
        found = [broker_finding(f"vibey.jobs.many.{run}.{i:05d}") for i in range(30_000)]
        written = await store.record_sightings(found, SightingsPass(now=NOW, sources_read=BOTH))
        assert written.records == found
        later = NOW + timedelta(minutes=1)
        again = await store.record_sightings(found, SightingsPass(now=later, sources_read=BOTH))
        assert again.records == [] and len(again.since) == len(found)
        cleared = await store.record_sightings([], SightingsPass(now=later, sources_read=BOTH))
        mine = [r for r in cleared.records if r.queue and f".{run}." in r.queue]
        assert len(mine) == len(found)
        assert {r.action for r in mine} == {Action.CLEARED}
    finally:
        await store.close()
