"""The reaper's promises as checks over the database and the broker, shared by the proof tests
(``test_chaos.py``, ``test_source_failures.py``, ``test_load.py``).

A proof test seeds a scenario through the helpers of this package, which record what was seeded in a
:class:`Seeded` (the expectation); it then runs real passes, and :func:`check_invariants` reads
everything back and asserts (SPEC §1, §3):

- **every moved lease has exactly one event and every event its move**: the ``requeue`` and
  ``park`` events of the ``job_queue`` source are, job by job and in ``seq`` order, exactly the
  lease episodes seeded (a prefix of them while a test is not converged); each event is on its
  job's project stream, with the condition its action implies (``lease_expired`` / ``poison``);
  the job is in the state its last event says, with the move's ``now`` as its ``updated_at``
  (the move and its event commit in one transaction, so they share it); a job whose episode has
  no event yet is still leased exactly as seeded; no other job is moved and no event names a job
  that was not seeded;
- **park events ↔ delivery_exhausted gates**: one gate per parked episode (identity
  ``delivery_exhausted:<job>:<expiry>``), no gate without its park event;
- **no gate duplicated**: every gate has an identity and identities are unique; every
  ``bus_dead_lettered`` gate has its ``bus.dead_letter`` job (idempotency key = identity), its
  ``dead_letter`` row and exactly one untrusted ``park`` event on the fleet stream, and none of
  these exists without the others;
- **every dead letter still on the broker**: each owned dead-letter queue still holds exactly the
  bodies seeded (its depth, and at the very end the bodies themselves, read with
  ``reject_requeue_true`` once the read is proven unable to drop anything), each parked letter is
  one of them, and the queues it must never read (a foreign tenant's, an owned consumerless
  backlog) hold what they held, none of it ever delivered (``redelivered`` false);
- **ledger streams gapless**: ``seq`` is ``1..n`` on every stream, the host's own events
  included (the host may append to the same streams);
- **digests**: every event's digest is the sha256 of its payload's canonical JSON;
- **sightings**: on every sighting key, records alternate ``surface``, ``cleared``, ``surface``...
  (recorded when first seen and again only after it cleared; never twice in a row).

Every check collects its problems and :func:`check_invariants` fails once, naming all of them.
It returns a :class:`Summary` of what it counted, so a test can assert the check was not vacuous
(events > 0, gates == expected).

The seeding is in ``seed_database`` and ``seed_broker``, the reaper processes in ``reapers``,
the checks in ``checks`` (the entry point, the ledger, sightings) and ``move_checks`` (leases,
parks, the broker); this package re-exports what the proof tests use.
"""

from __future__ import annotations

from tests.support.invariants.checks import check_invariants, open_sightings, sighting_key
from tests.support.invariants.expectation import (
    DEAD_LETTER_PREFIX,
    FOREIGN_DLQ,
    KILL_POLL_SECONDS,
    OWNED_DLQ,
    OWNED_ORIGIN,
    PACKAGE_ROOT,
    PUBLISHERS,
    STATS_WAIT_SECONDS,
    Episode,
    Seeded,
    Summary,
)
from tests.support.invariants.move_checks import check_broker, check_dead_letter_parks, check_leases
from tests.support.invariants.reapers import Run, reaper_env, run_reaper
from tests.support.invariants.seed_broker import (
    dead_letter_through,
    declare_dead_letter_queues,
    declare_origin,
    listed,
    queue_path,
    read_bodies,
    read_is_safe,
    seed_dead_letter_queues,
    seed_foreign,
    wait_for_depth,
    wait_for_depths,
)
from tests.support.invariants.seed_database import (
    clone_database,
    count_expired_leases,
    drop_database,
    fetchval,
    random_projects,
    reaper_backends,
    relet,
    requeued_jobs,
    seed_expired_leases,
    seed_scenario,
    seed_stale_ready,
    streams_held,
    wait_for_no_reaper_backends,
)

__all__ = [
    "DEAD_LETTER_PREFIX",
    "FOREIGN_DLQ",
    "KILL_POLL_SECONDS",
    "OWNED_DLQ",
    "OWNED_ORIGIN",
    "PACKAGE_ROOT",
    "PUBLISHERS",
    "STATS_WAIT_SECONDS",
    "Episode",
    "Run",
    "Seeded",
    "Summary",
    "check_broker",
    "check_dead_letter_parks",
    "check_invariants",
    "check_leases",
    "clone_database",
    "count_expired_leases",
    "dead_letter_through",
    "declare_dead_letter_queues",
    "declare_origin",
    "drop_database",
    "fetchval",
    "listed",
    "open_sightings",
    "queue_path",
    "random_projects",
    "read_bodies",
    "read_is_safe",
    "reaper_backends",
    "reaper_env",
    "relet",
    "requeued_jobs",
    "run_reaper",
    "seed_dead_letter_queues",
    "seed_expired_leases",
    "seed_foreign",
    "seed_scenario",
    "seed_stale_ready",
    "sighting_key",
    "streams_held",
    "wait_for_depth",
    "wait_for_depths",
    "wait_for_no_reaper_backends",
]
