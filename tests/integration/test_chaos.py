"""Chaos: real reaper processes SIGKILLed at random points of their pass (issue 7, item 1).

The scenario of ``reaper/scenario.py`` (expired leases, a poison job, live leases, stale
projects, dependencies; on the broker an owned quorum dead-letter queue with ``x-death``
headers, a drifted policy, a consumerless backlog, a foreign tenant) plus thousands more
expired leases (one in ten poison) and real dead letters (rejected on an owned work queue) in
the owned quorum dead-letter queue and in an owned classic one, is reaped by
``python -m reaper reap --json`` processes, each killed with SIGKILL after a random delay in
``[0, T]``, where ``T`` is how long one uninterrupted pass of the same scenario took. Every
few trials new expired leases are seeded, and that trial's process is killed as soon as the
first batch of its lease moves has committed (a partial move, the state between the batches
and lanes of one pass); less often, some requeued jobs are leased again and
left to expire (a second episode of the same job, some now poison), and new dead letters
arrive. Then every session the killed processes left is gone, one clean pass runs,
and:

- every invariant of ``tests/support/invariants`` holds (each moved lease has exactly one event
  and each event its move, no lease moved twice, no gate duplicated, every dead letter still on the
  broker, the foreign and consumerless queues untouched, gapless streams, digests,
  alternating sightings);
- the final state equals that of the same scenario reaped with no interruption in a second
  database (a copy of the first taken before any pass, reaped by clean passes after each
  seeding): the same jobs requeued and parked with the same attempts, the same gates, the same
  dead letters parked, the same number of events per object, the same open sightings (not the
  ``seq`` order, and not the sighting history: a killed pass may have seen a queue mid-way).

Sizes: ``QR_CHAOS_TRIALS`` (default 20) trials per broker version, 60 in all: each version
still sees kills before and after writing, amid lease moves (every fifth trial) and second
episodes (every eighth). Measured beside the whole suite, which keeps both cores busy: 284 to
313 s per broker version, against 596 to 628 s with 50 trials each. A long manual run::

    QR_CHAOS_TRIALS=500 python -m pytest tests/integration/test_chaos.py -s

``QR_CHAOS_SEED`` replays one run (every run prints its seed).
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reaper.config import load_config
from tests.support.invariants import (
    OWNED_DLQ,
    Run,
    Seeded,
    check_invariants,
    clone_database,
    count_expired_leases,
    dead_letter_through,
    declare_dead_letter_queues,
    declare_origin,
    drop_database,
    open_sightings,
    queue_path,
    reaper_env,
    relet,
    requeued_jobs,
    run_reaper,
    seed_expired_leases,
    seed_scenario,
    seed_stale_ready,
    wait_for_depth,
    wait_for_depths,
    wait_for_no_reaper_backends,
)
from tests.support.services import BrokerUnderTest, on_one_broker
from tests.support.store import query

pytestmark = [pytest.mark.broker, pytest.mark.postgres]

TRIALS = int(os.environ.get("QR_CHAOS_TRIALS", "20"))
SEED = int(os.environ.get("QR_CHAOS_SEED", str(random.SystemRandom().randrange(2**32))))

FIRST_LEASES = 3_000
#: Every this many trials, new expired leases, and that trial's process is killed as soon as
#: the first batch of its lease moves has committed (the others not yet) ...
RESEED_EVERY = 5
RESEED_LEASES = 5_000
#: ... and every this many, second episodes of requeued jobs and new dead letters; the
#: reference converges first, so that it has requeued them too.
RELET_EVERY = 8
RELET = 60
CLASSIC_DLQ, CLASSIC_ORIGIN = "vibey.runs.dead", "vibey.runs"
#: An owned work queue that dead-letters into the scenario's dead-letter queue.
CHAOS_ORIGIN = "vibey.chaos"
FIRST_DEAD_LETTERS, CLASSIC_DEAD_LETTERS, NEW_DEAD_LETTERS = 30, 10, 4
#: Clean passes the reference database may need to converge (on 4.0 the dead-letter policy
#: must be in force before a quorum dead-letter queue is read).
REFERENCE_PASSES = 6
#: The stale threshold of every pass here: a day, which no run of this test reaches. The
#: scenario's quorum queues report no head age, so a pass judges them by how long it has seen
#: their deliveries stand still, counted in each database from its own first pass; with the
#: default 900 s, a run longer than that (the whole suite on a slow machine) opens their
#: sightings in one database and not yet in the other. The scenario's stale jobs and head
#: messages are seeded older than the threshold the settings carry, so they are stale still.
STALE_READY_SECONDS = "86400"
_STALE = {"REAPER_QUEUE__REAP__STALE_READY_SECONDS": STALE_READY_SECONDS}


@dataclass
class Trials:
    """What the kills hit."""

    runs: list[Run] = field(default_factory=list)
    #: per trial: killed, (events, expired leases) before it and after it
    progress: list[tuple[bool, tuple[int, int], tuple[int, int]]] = field(default_factory=list)

    @property
    def killed(self) -> int:
        return sum(1 for r in self.runs if r.killed)

    @property
    def killed_after_writing(self) -> int:
        return sum(1 for killed, before, after in self.progress if killed and after[0] > before[0])

    @property
    def killed_before_writing(self) -> int:
        return sum(1 for killed, before, after in self.progress if killed and after[0] == before[0])

    @property
    def killed_mid_move(self) -> int:
        """Killed after moving some of the expired leases and before moving them all."""
        return sum(
            1 for killed, before, after in self.progress if killed and before[1] > after[1] > 0
        )


async def _events(dsn: str) -> int:
    rows = await query(dsn, "SELECT count(*) AS n FROM event")
    return int(rows[0]["n"])


async def _converge(
    env: dict[str, str], workdir: Path, dsn: str, seeded: Seeded, broker: BrokerUnderTest
) -> list[Run]:
    """Clean passes until one is ok (``Run.ok_on``) with nothing left to move or park
    (bounded)."""
    runs = []
    for _ in range(REFERENCE_PASSES):
        run = await run_reaper(env, workdir)
        runs.append(run)
        parked = await query(dsn, "SELECT count(*) AS n FROM dead_letter")
        if (
            run.ok_on(broker)
            and not await count_expired_leases(dsn, datetime.now(UTC))
            and parked[0]["n"] == seeded.dead_letter_count
        ):
            return runs
    raise AssertionError(
        f"{dsn.rsplit('/', 1)[-1]} did not converge in {REFERENCE_PASSES} clean passes: "
        + " | ".join(r.describe() for r in runs)
    )


async def final_state(dsn: str, seeded: Seeded) -> dict[str, Any]:
    """What must not depend on whether passes were interrupted (ids of rows the reaper
    created are replaced by the identities that make them)."""
    jobs = await query(
        dsn,
        "SELECT id, state, attempts, lease_owner, lease_expires_at FROM job "
        "WHERE id = ANY($1::uuid[])",
        list(seeded.episodes),
    )
    events = [
        dict(r)
        for r in await query(
            dsn,
            "SELECT e.project_id, e.seq, e.payload::text AS payload, d.identity "
            "FROM event AS e LEFT JOIN dead_letter AS d "
            "ON d.job_id::text = e.payload ->> 'object' ORDER BY e.project_id, e.seq",
        )
    ]
    for e in events:
        e["payload"] = json.loads(e["payload"])
    moves = Counter(
        (
            e["identity"] or e["payload"]["object"],
            e["payload"]["source"],
            e["payload"]["condition"],
            e["payload"]["action"],
        )
        for e in events
        if e["payload"]["action"] in ("requeue", "park")
    )
    gates = await query(
        dsn, "SELECT kind, identity, answered_at IS NOT NULL AS answered FROM human_gate"
    )
    letters = await query(dsn, "SELECT identity, queue FROM dead_letter")
    return {
        "jobs": sorted(
            (str(r["id"]), r["state"], r["attempts"], r["lease_owner"], r["lease_expires_at"])
            for r in jobs
        ),
        "moves": sorted(moves.items()),
        "gates": sorted((r["kind"], r["identity"], r["answered"]) for r in gates),
        "dead_letters": sorted((r["identity"], r["queue"]) for r in letters),
        "open_sightings": sorted(open_sightings(events)),
    }


@pytest.mark.slow
async def test_reapers_killed_at_random_points_converge_to_the_uninterrupted_state(
    broker: BrokerUnderTest, pg_dsn: str, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    print(f"\nchaos on RabbitMQ {broker.version}: seed {SEED}, {TRIALS} trials")
    started = time.monotonic()
    config_dir = tmp_path / "conf.d"
    config_dir.mkdir()
    workdir = tmp_path / "runs"
    chaos_env = reaper_env(broker, pg_dsn, config_dir, **_STALE)
    settings = load_config(None, environ=chaos_env).settings
    seeded = Seeded()

    # the scenario (reaper/scenario.py), then more of everything it has one or a few of
    now = datetime.now(UTC)
    scenario = await seed_scenario(
        settings, pg_dsn, broker, seeded, now=now, projects=4, expired_leases=24, dead_letters=24
    )
    workers = [p.id for p in scenario.projects if p.has_worker]
    projects = workers + [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(9)]
    await seed_expired_leases([pg_dsn], seeded, FIRST_LEASES, projects, rng, now=now)
    declare_origin(broker, CHAOS_ORIGIN, OWNED_DLQ)
    dead_letter_through(broker, seeded, FIRST_DEAD_LETTERS, origin=CHAOS_ORIGIN, tag="first")
    declare_dead_letter_queues(broker, CLASSIC_DLQ, CLASSIC_ORIGIN, dlq_type="classic")
    dead_letter_through(
        broker, seeded, CLASSIC_DEAD_LETTERS, dlq=CLASSIC_DLQ, origin=CLASSIC_ORIGIN, tag="c"
    )
    await wait_for_depths(broker, {q: len(b) for q, b in seeded.dead_letters.items()})

    print(f"seeded in {time.monotonic() - started:.1f} s")
    # the reference: the same database, reaped without interruption
    reference_dsn = await clone_database(pg_dsn)
    try:
        await _chaos(broker, pg_dsn, reference_dsn, config_dir, workdir, seeded, projects, rng)
    finally:
        await drop_database(reference_dsn)
    print(f"{time.monotonic() - started:.1f} s in all")


async def _chaos(
    broker: BrokerUnderTest,
    pg_dsn: str,
    reference_dsn: str,
    config_dir: Path,
    workdir: Path,
    seeded: Seeded,
    projects: list[uuid.UUID],
    rng: random.Random,
) -> None:
    chaos_env = reaper_env(broker, pg_dsn, config_dir, **_STALE)
    reference_env = reaper_env(broker, reference_dsn, config_dir, **_STALE)
    both = [pg_dsn, reference_dsn]

    # The reference's first pass repairs the scenario's drifted policy, and the queues show the
    # repair only with the broker's next statistics (an interval later, STATS_INTERVAL_SECONDS on
    # the test brokers; 5 s on 3.10 with the default): that pass
    # may wait for them. The passes after it take the trials' 1 s wait, and the kill window
    # is [0, one typical whole pass]: the reference's last (ok) one.
    repair_env = {**reference_env, "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "20"}
    reference_runs = [await run_reaper(repair_env, workdir)]
    reference_runs += await _converge(reference_env, workdir, reference_dsn, seeded, broker)
    window = max(1.0, reference_runs[-1].seconds)
    print(f"reference converged in {len(reference_runs)} pass(es); kill window [0, {window:.2f}] s")
    for r in reference_runs:
        print(f"  reference pass, {r.seconds:.2f} s: {r.describe()}")

    trials = Trials()
    reseeds = relets = 0
    for trial in range(TRIALS):
        targeted = trial > 0 and trial % RESEED_EVERY == 0
        if targeted:
            reseeds += 1
            now = datetime.now(UTC)
            await seed_expired_leases(both, seeded, RESEED_LEASES, projects, rng, now=now)
        if trial and trial % RELET_EVERY == 0:
            # second episodes: only of jobs both databases have requeued
            relets += 1
            reference_runs += await _converge(reference_env, workdir, reference_dsn, seeded, broker)
            ready = await requeued_jobs(pg_dsn, seeded)
            now = datetime.now(UTC)
            await relet(both, seeded, rng.sample(ready, min(RELET, len(ready))), rng, now=now)
            dead_letter_through(
                broker, seeded, NEW_DEAD_LETTERS, origin=CHAOS_ORIGIN, tag=f"r{relets}"
            )
            await wait_for_depth(broker, OWNED_DLQ, len(seeded.dead_letters[OWNED_DLQ]))
        expired = await count_expired_leases(pg_dsn, datetime.now(UTC))
        before = await _events(pg_dsn), expired

        async def some_moved(expired: int = expired) -> bool:
            # the first batch of this pass's lease moves has committed
            return await count_expired_leases(pg_dsn, datetime.now(UTC)) < expired

        if targeted:
            run = await run_reaper(chaos_env, workdir, kill_when=some_moved)
        else:
            run = await run_reaper(chaos_env, workdir, kill_after=rng.uniform(0, window))
        assert run.killed or run.returncode in (0, 1), run.describe()
        after = await _events(pg_dsn), await count_expired_leases(pg_dsn, datetime.now(UTC))
        trials.runs.append(run)
        trials.progress.append((run.killed, before, after))

    # every session a killed process left is gone, no read is left half done; then clean
    # passes until one is ok with nothing left, as the reference's (a pass moves at most
    # MAX_LEASES_PER_PASS leases, and the kills may have left more than one pass's worth)
    reference_runs += await _converge(reference_env, workdir, reference_dsn, seeded, broker)
    await wait_for_no_reaper_backends(pg_dsn)
    await wait_for_depths(broker, {q: len(b) for q, b in seeded.dead_letters.items()})
    finals = await _converge(chaos_env, workdir, pg_dsn, seeded, broker)
    final = finals[-1]
    print(
        f"{trials.killed} of {TRIALS} killed ({trials.killed_before_writing} before writing, "
        f"{trials.killed_after_writing} after writing, {trials.killed_mid_move} amid lease "
        f"moves), {reseeds} reseeds, {relets} relets, {len(seeded.all_episodes)} lease "
        f"episodes, {seeded.dead_letter_count} dead letters, {len(reference_runs)} reference "
        f"passes ({sum(r.seconds for r in reference_runs):.1f} s); trials "
        f"{sum(r.seconds for r in trials.runs):.1f} s in processes; {len(finals)} clean "
        f"pass(es) after them, the last: {final.describe()}"
    )
    assert final.ok_on(broker), f"the clean pass after the kills is not ok: {final.describe()}"

    # non-vacuous: the kills hit passes before they wrote anything, after they wrote something,
    # and between the batches of one pass's lease moves
    assert trials.killed >= TRIALS // 4, f"only {trials.killed} of {TRIALS} trials were killed"
    assert trials.killed_after_writing >= 1 and trials.killed_before_writing >= 1, trials.progress
    assert trials.killed_mid_move >= 1, trials.progress

    reference = await check_invariants(reference_dsn, seeded, broker, read_broker=False)
    chaos = await check_invariants(pg_dsn, seeded, broker, read_broker=True)
    moves = seeded.expected_moves()
    assert chaos.lease_events == moves and moves["requeue"] > 0 and moves["park"] > 0
    assert chaos.delivery_exhausted_gates == moves["park"]
    assert chaos.dead_letter_gates == seeded.dead_letter_count == chaos.dead_letter_parks
    assert sum(chaos.dead_letters_on_broker.values()) == seeded.dead_letter_count
    assert chaos.untouched_on_broker == seeded.untouched and sum(seeded.untouched.values()) > 0
    assert any(len(episodes) > 1 for episodes in seeded.episodes.values())
    assert chaos.sightings["surface"] >= 4  # two stale projects, webhooks, the foreign tenant

    chaos_state = await final_state(pg_dsn, seeded)
    reference_state = await final_state(reference_dsn, seeded)
    for key in chaos_state:
        assert chaos_state[key] == reference_state[key], f"{key} differs from the reference"
    assert reference.lease_events == chaos.lease_events
    print(
        f"invariants hold: {chaos.events} events on {chaos.streams} streams, moves "
        f"{dict(chaos.lease_events)}, gates {chaos.delivery_exhausted_gates} delivery_exhausted "
        f"+ {chaos.dead_letter_gates} bus_dead_lettered, sightings {dict(chaos.sightings)}"
    )


# --------------------------------------------------------------------------- the checker itself


async def _tamper(dsn: str, sql: str, *args: Any) -> str:
    """A copy of the database ``dsn`` with one statement run on it."""
    copy = await clone_database(dsn)
    await query(copy, sql, *args)
    return copy


#: Each violation an invariant promises to catch, made by hand on a copy of a converged
#: database, with the words the checker must name it by.
TAMPERINGS: list[tuple[str, str, str]] = [
    (
        "a lease moved twice (a second event for its move)",
        """WITH s AS (SELECT p.project_id, (SELECT max(seq) FROM event AS x
                                        WHERE x.project_id = p.project_id) + 1 AS last_seq
                      FROM (SELECT (SELECT project_id FROM event
                                    WHERE payload->>'action' = 'requeue' LIMIT 1)
                                   AS project_id) AS p)
           INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
           SELECT e.project_id, s.last_seq, e.kind, e.payload, e.digest, e.trusted, e.created_at
           FROM event AS e JOIN s USING (project_id)
           WHERE e.payload->>'action' = 'requeue' LIMIT 1 RETURNING seq""",
        "moved twice",
    ),
    (
        "an event without its move (the job still leased)",
        """UPDATE job SET state = 'leased', lease_owner = 'w', lease_expires_at = $1
           WHERE id = (SELECT (payload->>'object')::uuid FROM event
                       WHERE payload->>'action' = 'requeue' LIMIT 1) RETURNING id""",
        "after its requeue the job is leased",
    ),
    (
        "a move without its event (a job requeued by hand)",
        """UPDATE job SET state = 'ready', lease_owner = NULL, lease_expires_at = NULL
           WHERE kind = 'tamper' RETURNING id""",
        "not moved",
    ),
    (
        "a gate duplicated",
        """INSERT INTO human_gate (project_id, job_id, kind, prompt, identity)
           SELECT project_id, job_id, kind, prompt, identity || ':again' FROM human_gate
           WHERE kind = 'delivery_exhausted' LIMIT 1 RETURNING id""",
        "delivery_exhausted gates",
    ),
    (
        "a gap in a stream",
        """WITH s AS (SELECT p.project_id, (SELECT max(seq) FROM event AS x
                                        WHERE x.project_id = p.project_id) + 2 AS last_seq
                      FROM (SELECT (SELECT project_id FROM event
                                    WHERE payload->>'action' = 'park' LIMIT 1)
                                   AS project_id) AS p)
           INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
           SELECT s.project_id, s.last_seq, 'QueueReaped', '{"action": "none"}', repeat('0', 64),
                  true, $1 FROM s RETURNING seq""",
        "not gapless",
    ),
    (
        "a digest that is not its payload's",
        """WITH s AS (SELECT p.project_id, (SELECT max(seq) FROM event AS x
                                        WHERE x.project_id = p.project_id) + 1 AS last_seq
                      FROM (SELECT '00000000-0000-0000-0000-000000000000'::uuid
                                   AS project_id) AS p)
           INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
           SELECT s.project_id, s.last_seq, 'QueueReaped', e.payload, repeat('a', 64),
                  e.trusted, $1
           FROM s, LATERAL (SELECT payload, trusted FROM event
                            WHERE payload->>'action' = 'surface' LIMIT 1) AS e
           RETURNING seq""",
        "is not the sha256",
    ),
    (
        "a sighting recorded twice while open",
        """WITH e AS (SELECT project_id, payload, digest, trusted FROM event
                      WHERE payload->>'action' = 'surface'
                        AND payload->>'source' = 'job_queue' LIMIT 1),
                s AS (SELECT p.project_id, (SELECT max(seq) FROM event AS x
                                        WHERE x.project_id = p.project_id) + 1 AS last_seq
                      FROM (SELECT (SELECT project_id FROM e) AS project_id) AS p)
           INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
           SELECT s.project_id, s.last_seq, 'QueueReaped', e.payload, e.digest, e.trusted, $1
           FROM e JOIN s USING (project_id) RETURNING seq""",
        "do not alternate",
    ),
    (
        "a dead letter parked twice (a second park event)",
        """WITH s AS (SELECT p.project_id, (SELECT max(seq) FROM event AS x
                                        WHERE x.project_id = p.project_id) + 1 AS last_seq
                      FROM (SELECT '00000000-0000-0000-0000-000000000000'::uuid
                                   AS project_id) AS p)
           INSERT INTO event (project_id, seq, kind, payload, digest, trusted, created_at)
           SELECT s.project_id, s.last_seq, e.kind, e.payload, e.digest, e.trusted, $1
           FROM s, LATERAL (SELECT kind, payload, digest, trusted FROM event
                            WHERE payload->>'action' = 'park'
                              AND payload->>'source' = 'broker' LIMIT 1) AS e
           RETURNING seq""",
        "park event(s)",
    ),
]


@on_one_broker
async def test_the_invariants_catch_every_violation_they_promise_to(
    broker: BrokerUnderTest, pg_dsn: str, tmp_path: Path
) -> None:
    """Each invariant check fails on a database where its promise was broken by hand, and
    the broker check fails once a dead letter is gone: none of them passes vacuously."""
    config_dir = tmp_path / "conf.d"
    config_dir.mkdir()
    env = reaper_env(
        broker, pg_dsn, config_dir, REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS="20"
    )
    seeded = Seeded()
    rng = random.Random(1)
    now = datetime.now(UTC)
    projects = [uuid.uuid4() for _ in range(3)]
    await seed_expired_leases([pg_dsn], seeded, 60, projects, rng, now=now)
    await seed_stale_ready([pg_dsn], projects[0], now=now)
    declare_dead_letter_queues(broker)
    dead_letter_through(broker, seeded, 4, tag="check")
    await wait_for_depth(broker, OWNED_DLQ, 4)
    await _converge(env, tmp_path / "runs", pg_dsn, seeded, broker)
    summary = await check_invariants(pg_dsn, seeded, broker, read_broker=False)
    assert summary.lease_events == seeded.expected_moves() and summary.dead_letter_parks == 4
    # one more seeded expired lease, never reaped, for "a move without its event"
    [extra] = await seed_expired_leases([pg_dsn], seeded, 1, projects, rng, now=now)
    await query(pg_dsn, "UPDATE job SET kind = 'tamper' WHERE id = $1 RETURNING id", extra.job_id)
    await check_invariants(pg_dsn, seeded, converged=False)

    for what, sql, words in TAMPERINGS:
        copy = await _tamper(pg_dsn, sql, *(() if "$1" not in sql else (now,)))
        try:
            with pytest.raises(AssertionError, match=re.escape(words)):
                await check_invariants(copy, seeded, converged="not moved" in words)
        except BaseException as exc:
            raise AssertionError(f"not caught: {what}") from exc
        finally:
            await drop_database(copy)

    with broker.admin() as admin:  # a dead letter taken away
        admin.post(
            f"{queue_path(broker, OWNED_DLQ)}/get",
            json={"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"},
        ).raise_for_status()
    with pytest.raises(AssertionError, match=re.escape(OWNED_DLQ)):  # lost, or not all there
        await check_invariants(pg_dsn, seeded, broker, converged=False, read_broker=True)
