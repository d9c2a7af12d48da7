"""The long help the command line prints: the overview, its examples and the paragraphs.

The long help the command line prints, as :mod:`reaper.edges.arguments` gives it to argparse:
``reaper --help``'s overview, examples and exit codes, how to read ``reaper reap``'s report,
and the paragraphs of ``reaper db migrate`` and ``reaper gates answer``."""

from __future__ import annotations

__all__ = ["ANSWER_DESCRIPTION", "DESCRIPTION", "EPILOG", "MIGRATE_DESCRIPTION", "REAP_EPILOG"]

DESCRIPTION = """\
queue-reaper: measures what a job queue holds in PostgreSQL and RabbitMQ against declared
thresholds, requeues expired leases, parks poison jobs and dead letters as human gates (it
never deletes anything), reconciles the declared broker policies, and records every verdict
in an append-only ledger and as Prometheus metrics.

Configuration comes from conf.d/*.toml drop-ins (--config-dir, default ./conf.d, then
/etc/queue-reaper/conf.d) overlaid by REAPER_* environment variables, e.g.
REAPER_QUEUE__REAP__STALE_READY_SECONDS=600. `reaper config show` prints what is in force.
"""

EPILOG = """\
examples:
  reaper reap --dry-run          judge everything, write nothing, print the report
  reaper reap --json             one real pass, the report as JSON (exit 0/1/2)
  reaper gates list              what waits for a person, oldest first, with each command
  reaper gates answer 1a2b3c4d --choice retry
  reaper events --since 1h       the ledger, newest last
  reaper db migrate --dry-run    the schema statements a migration would run, none run
  reaper policies plan           desired broker policies against what is in force
  reaper serve                   a pass every interval_seconds, /metrics on 127.0.0.1:9464
  reaper demo                    a realistic pass against the local services

exit codes:
  0  the pass is ok: every source read, every write committed, every declared policy the
     broker accepts and enforces in force, no queue of ours that would drop a message
     (the report may still list findings: "OK, 3 findings")
  1  the pass ran but is NOT OK: the header says why (a source unreadable, a write not done,
     a policy not in force, a queue that would drop messages, a dead-letter queue not read)
  2  usage or configuration error: nothing was run

the report: see the README's "Reading the report" for every status, heading and code
(KeyUnsupported, InSync, NotEnforced, DeliveryLimitWithheld, [new], [seen], ...).
"""

#: The report's codes, as `reaper reap --help` explains them.
REAP_EPILOG = """the report, top to bottom:
  status       OK | OK, N findings | NOT OK: <why>; exit 0, 0, 1
  Database, Broker, Read   the target (host:port/database, vhost, management URLs that
               answered, dispatch) and what was read (leases, projects, owned/foreign/
               dead-letter queues): a pass against the wrong vhost shows it here
  NOT OK       what made the pass not ok, each with its fix: UNREADABLE (a source, or a queue
               on a node that is down), NOT DONE (a write the database refused: its reason and
               the privilege needed), UNKNOWN (a commit with no answer), POLICY (a policy not
               in force), DEAD LETTER (a queue not read safely), WOULD DROP (a queue of ours
               whose delivery limit would delete messages: declare x-dead-letter-exchange)
  Findings     what the pass found, worst first, one line each: the measurement against its
               threshold, the next step, and the sighting: [new] recorded now, [seen since
               HH:MMZ] open in the ledger since then (a dry run reads it too), [would
               record] in a dry run, not on record yet, [not recorded] ledger not written.
               Nothing is moved for a finding; unbounded = no bound the broker enforces
               (the reaper's own observation is the guard)
  Done / Would do   what committed (a dry run: what it would do): moves, parks and policy
               writes; each park names its gate and the command that answers it (past 10:
               the first five, and the one command that lists every gate the pass raised
               and the one that answers them all; -o wide: every park, its gate whole)
  Policies     one line each: action (unchanged, created, updated, deleted, refused,
               unsupported, planned), in force or not, and the reason code: InSync, Created,
               Updated, Deleted, WouldCreate, WouldUpdate, WouldDelete, KeyUnsupported (the
               version refuses a key; the fallback in force is said once), NoOwnedQueues,
               NotEnforced (accepted, not enforced on that queue type: the queue is an
               unbounded finding), DeliveryLimitWithheld (a queue has no dead-letter target),
               Refused, DefinitionRejected, ReadBackMismatch, ShadowedBy, FiniteDeliveryLimit,
               NotInForce, QueueNotCarrying, CarriedOutsideScope, StalePolicy, FallbackUnproven
  -o wide      every detail in full; --json (or -o json) every verdict, with applied
"""


MIGRATE_DESCRIPTION = """\
Bring the reaper's schema up to date on a live database without stalling the host's traffic.

It reads the catalog first and runs only what is missing: a table, a column, an index that
is absent or invalid, a function or trigger that is not the shipped one. On a database whose
schema is in place it takes no lock on any of the host's tables. Each migration is recorded
in reaper_migration once every step of it is in place; migrators take turns on an advisory
lock.

lock_timeout: a statement that needs a lock on a live table (adding a column takes ACCESS
  EXCLUSIVE, however briefly) waits for it at most [database] lock_timeout_seconds (default
  2 s; REAPER_DATABASE__LOCK_TIMEOUT_SECONDS), because the host's traffic queues behind it
  while it waits. A lock that cannot be had is tried again after a short pause, unless the
  transaction holding it is still open: then the migration stops and names the blocking
  session (pid, application_name, user, state, how long its transaction has been open, its
  query) and exits 1. It changes nothing half-way: the transactional steps of one migration
  run in one transaction, which is rolled back.

CONCURRENTLY: indexes are built with CREATE INDEX CONCURRENTLY, outside a transaction, so
  writes go on during the build. A build that is cut short drops the index it began, or
  leaves it invalid (PostgreSQL does not use it); the next run drops and rebuilds an invalid
  index.

--dry-run: prints, as SQL, exactly the statements a run would execute now, with why each is
  needed, and runs none (exit 0; exit 1 where a run would stop before running anything).

--outbox: also the schema of a host that dispatches through RabbitMQ (job.dispatch_seq,
  job.dispatched_at, job_outbox and an index of its unsent rows), for a fresh install that
  wants outbox dispatch; only what is missing. Never without the flag: with these in place,
  [queue.reap] dispatch = "auto" finds outbox dispatch in force, and every requeue and gate
  answer then writes an outbox row for the host's relay to publish.

Where job.project_id (or human_gate's, or event's) references a project table, the fleet's
reserved project row (00000000-0000-0000-0000-000000000000) is created in it; if that table
has NOT NULL columns without a default, it says which and how to create the row by hand
(exit 1). Exit codes: 0 done (or nothing to do), 1 stopped.
"""


ANSWER_DESCRIPTION = """\
Answer a gate, named by its id or any unique prefix of it (the 8 characters `gates list`
shows), or every open gate a selection names (--kind, --project, --older-than, --since,
--queue, --all): the gates are shown with their count, and answered only with --yes (or the count
typed back at a terminal), each in its own transaction with its own GateAnswered event.
delivery_exhausted: retry (the job is re-readied for exactly one more delivery) or cancel
(the job ends cancelled and is never delivered again). bus_dead_lettered: replay (publish
the body back to the owned queue it died on) or dismiss (settle it, send nothing); the
broker's copy stays either way. The answer, who gave it and one GateAnswered event on the
ledger commit together with the job's move. --dry-run says what the answer would do and writes
nothing."""
