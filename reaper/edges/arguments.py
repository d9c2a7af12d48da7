"""The ``reaper`` command line's arguments: every command's options and help.

The ``reaper`` command line's arguments: every command's options and help, and the global
options every command takes before or after its name. :mod:`reaper.edges.cli` runs them."""

from __future__ import annotations

import argparse
from pathlib import Path

from reaper.edges import doctor, gate_commands, production
from reaper.edges.completion import SHELLS
from reaper.edges.logs import LOG_FORMATS
from reaper.edges.options import Commands, add_actions, add_output, add_project
from reaper.edges.serve import ListenError, parse_listen
from reaper.version import __version__

__all__ = ["build_parser"]

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


def build_parser() -> argparse.ArgumentParser:
    """``reaper``'s parser: every command, and the global options before or after each."""
    parser = argparse.ArgumentParser(
        prog="reaper",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"queue-reaper {__version__}")
    _global_options(parser, defaults=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_reap(commands)
    _add_config(commands)
    db_commands = _add_db(commands)
    # Running in production: least privileges and the doctor.
    production.add_db_commands(db_commands)
    doctor.add_command(commands)
    _add_policies(commands)
    # what waits for a person, and the ledger (reaper.edges.gate_commands)
    gate_commands.add_parsers(commands)
    _add_serve(commands)
    _add_demo(commands)
    _add_shell(commands)
    for sub in _subcommands(parser):
        _global_options(sub, defaults=False)
    return parser


def _add_reap(commands: Commands) -> None:
    """``reaper reap``: one whole pass and its report."""
    reap = commands.add_parser(
        "reap",
        help="run one whole pass and print its report",
        description="Run one whole pass: measure both sources, judge, act, reconcile the\n"
        "policies, record, report. Exit 0 when the pass is ok, 1 when it ran but is not ok,\n"
        "2 on a usage or configuration error.",
        epilog=REAP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reap.add_argument(
        "--dry-run",
        action="store_true",
        help="judge everything and write nothing: no row, event, gate, policy or message moved",
    )
    add_output(
        reap,
        ("text", "wide", "json"),
        "text (default: one line per finding), wide (every detail in full) or json",
        json_help="print the report as one JSON object, streamed, with every verdict (the text "
        "report summarises lease moves above 10 per condition); the same as -o json",
        json_first=True,
    )
    add_project(
        reap, "only this project's job-queue work (its id, a prefix the outputs print, or fleet)"
    )
    reap.add_argument(
        "--metrics-textfile",
        type=Path,
        metavar="PATH",
        help="write the pass's metrics for node-exporter's textfile collector (atomic)",
    )
    reap.add_argument(
        "--pushgateway", metavar="URL", help="push the pass's metrics to a Pushgateway"
    )


def _add_config(commands: Commands) -> None:
    """``reaper config check`` and ``reaper config show``."""
    config_commands = add_actions(
        commands,
        "config",
        help="check or show the effective configuration",
        description="Check or show the effective configuration.",
    )
    config_commands.add_parser(
        "check",
        help="validate; exit 2 naming every problem, 0 when valid",
        description="Validate the drop-ins and the environment: exit 0 when valid, 2 naming "
        "every problem at once.",
    )
    config_show = config_commands.add_parser(
        "show",
        help="the effective configuration, secrets masked, with where each value came from",
        description="Print every key in force, secrets masked, with the file or variable it "
        "came from, the dispatch in force and the management URLs in order of preference.",
    )
    add_output(
        config_show,
        ("text", "wide", "json", "name"),
        "text (default: a table, secrets masked), wide (each key's description too), "
        "json, or name (the keys alone)",
    )


def _add_db(commands: Commands) -> Commands:
    """``reaper db migrate``; the table of ``db`` actions the others join."""
    db_commands = add_actions(
        commands, "db", help="the PostgreSQL schema", description="The reaper's PostgreSQL schema."
    )
    migrate = db_commands.add_parser(
        "migrate",
        help="bring the schema up to date, online: only what is missing, never a long lock",
        description=MIGRATE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    migrate.add_argument(
        "--dry-run",
        action="store_true",
        help="read the catalog and print the statements that would run (only those needed); "
        "run none",
    )
    migrate.add_argument(
        "--outbox",
        action="store_true",
        help="also create the outbox dispatch schema (job.dispatch_seq, job.dispatched_at, "
        "job_outbox) where it is missing",
    )
    return db_commands


def _add_policies(commands: Commands) -> None:
    """``reaper policies plan``."""
    policy_commands = add_actions(
        commands,
        "policies",
        help="the declared broker policies",
        description="The declared broker policies (policies/*.json).",
    )
    plan = policy_commands.add_parser(
        "plan",
        help="desired policies against what the broker has, per queue; writes nothing",
        description="Desired policies, rendered for this broker, against what it holds, and "
        "each owned queue's bounds in force. Writes nothing.",
    )
    add_output(
        plan,
        ("text", "wide", "json", "name"),
        "text (default), wide (each policy's desired and actual definitions too), json, "
        "or name (the declared policies' names)",
    )


def _add_serve(commands: Commands) -> None:
    """``reaper serve``."""
    serve = commands.add_parser(
        "serve",
        help="a pass every interval_seconds; /metrics and /healthz over HTTP",
        description="Run a pass every [queue.reap] interval_seconds (the fleet's turn, shared "
        "with the workers' hooks) and serve /metrics, /healthz and a status page at /.",
    )
    serve.add_argument(
        "--listen",
        default="127.0.0.1:9464",
        type=_listen,
        metavar="HOST:PORT",
        help="where to listen (default %(default)s)",
    )
    serve.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text (default: UTC time, level, logger, message) or json (one object a line, "
        "for a log shipper)",
    )


def _add_demo(commands: Commands) -> None:
    """``reaper demo``."""
    demo = commands.add_parser(
        "demo",
        help="seed a realistic scenario in its own database and vhost, then audit and reap it",
        description="Create a database and a vhost of its own on the configured services, "
        "seed a realistic scenario, then run a dry-run audit and two real passes, printing "
        "each report. Both are kept, and the end says where to look and how to remove them.",
    )
    demo.add_argument(
        "--cleanup",
        action="store_true",
        help="remove the demo's database and vhost at the end (default: keep them, and say how)",
    )


def _add_shell(commands: Commands) -> None:
    """``reaper completion SHELL`` and ``reaper man``: generated from this parser."""
    completion = commands.add_parser(
        "completion",
        help="print the shell completion script for bash, zsh or fish",
        description="Print a completion script for SHELL, generated from the parser: every "
        "command, option and choice completes. bash: source <(reaper completion bash), or "
        "write it to /etc/bash_completion.d/reaper; zsh: reaper completion zsh > "
        '"${fpath[1]}/_reaper"; fish: reaper completion fish > '
        "~/.config/fish/completions/reaper.fish.",
    )
    completion.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    commands.add_parser(
        "man",
        help="print the manual page (roff): reaper man | man -l -",
        description="Print reaper(1) in roff, generated from the parser: every command and "
        "option as --help gives them. Read it with `reaper man | man -l -`, or install it as "
        "reaper.1 in a man directory.",
    )


def _global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The options every command takes, before or after its name; given after it, they only
    override (their defaults are the top-level parser's alone)."""
    group = parser.add_argument_group("global options")

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    group.add_argument(
        "--config-dir",
        type=Path,
        help="directory of *.toml drop-ins (default: ./conf.d, then /etc/queue-reaper/conf.d; "
        "none: environment only)",
        default=default(None),
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        help="-v: what the reaper reads (each broker request, each PostgreSQL session, with "
        "what came back and how long it took) and what a pass decided; -vv: the HTTP "
        "client's and asyncio's lines too",
        default=default(0),
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="warnings and errors only; `reap` prints its status line alone",
        default=default(False),
    )


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command's parser, nested ones included."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found.append(sub)
                found += _subcommands(sub)
    return found


def _listen(value: str) -> str:
    try:
        parse_listen(value)
    except ListenError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value
