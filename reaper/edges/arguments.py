"""The ``reaper`` command line's arguments: every command's options and help.

The ``reaper`` command line's arguments: every command's options and help, and the global
options every command takes before or after its name; their paragraphs are in
:mod:`reaper.edges.help_text`. :mod:`reaper.edges.cli` runs them."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from reaper.core.domain import GATE_BUS_DEAD_LETTERED, GATE_DELIVERY_EXHAUSTED
from reaper.edges import gate_bulk
from reaper.edges.completion import SHELLS
from reaper.edges.events import OUTPUTS as EVENT_OUTPUTS
from reaper.edges.help_text import (
    ANSWER_DESCRIPTION,
    DESCRIPTION,
    EPILOG,
    MIGRATE_DESCRIPTION,
    REAP_EPILOG,
)
from reaper.edges.logs import LOG_FORMATS
from reaper.edges.options import Commands, add_actions, add_output, add_project
from reaper.edges.serve import ListenError, parse_listen
from reaper.gates.ids import VOCABULARY, argument, choose, gate_kind
from reaper.version import __version__

__all__ = ["build_parser"]


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
    _add_db(commands)
    _add_doctor(commands)
    _add_policies(commands)
    _add_gates(commands)
    _add_events(commands)
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


def _add_db(commands: Commands) -> None:
    """``reaper db migrate`` and ``reaper db grants``."""
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
    grants = db_commands.add_parser(
        "grants",
        help="the GRANTs a role needs to run the reaper, and no more (--apply runs them)",
        description="Print the GRANT statements that give ROLE exactly the privileges the "
        "reaper needs on the tables it reads and writes in this database, each with why; "
        "nothing on the ledger beyond SELECT and INSERT. Run as the tables' owner; --apply runs "
        "them in one transaction.",
    )
    grants.add_argument("role", metavar="ROLE", help="the role the reaper connects as")
    grants.add_argument("--apply", action="store_true", help="run the GRANTs")


def _add_doctor(commands: Commands) -> None:
    """``reaper doctor``."""
    doctor = commands.add_parser(
        "doctor",
        help="check every precondition of a pass, one line each with the fix",
        description="Check the configuration, PostgreSQL (reachable, TLS, schema, privileges, "
        "clock) and every management URL (reachable, TLS, vhost, tags, permissions, policy "
        "rights, the conf.d snippet on every node), and the dispatch mode. Exit 0 when all "
        "pass, 1 otherwise.",
    )
    add_output(
        doctor,
        ("text", "wide", "json"),
        "text (default: one line each, the fix after it), wide (the fix on a line of its "
        "own under each) or json",
    )


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


def _add_gates(commands: Commands) -> None:
    """``reaper gates list|show|answer``."""
    # not required: ``reaper gates`` alone prints its actions (GATE_ACTIONS)
    gate_commands = add_actions(
        commands,
        "gates",
        help="what waits for a person",
        description="What waits for a person: poison jobs (delivery_exhausted) and dead "
        "letters (bus_dead_lettered) parked as gates. Nothing is deleted; each answer is a "
        "GateAnswered event on the ledger.",
        required=False,
    )
    listing = gate_commands.add_parser(
        "list",
        help="open gates, oldest first, with the command for each answer",
        description="The open gates, oldest first: short id, age, project, kind, job kind, "
        "and the exact command for each answer really possible.",
    )
    add_output(
        listing,
        ("text", "wide", "json", "name"),
        "text (default: a table, short ids), wide (whole ids), json, or name (one whole "
        "gate id a line, for xargs)",
    )
    listing.add_argument("--all", action="store_true", help="include answered gates")
    listing.add_argument(
        "--kind",
        type=argument(gate_kind),
        metavar="KIND",
        help=f"only gates of this kind: {GATE_DELIVERY_EXHAUSTED} (or poison), "
        f"{GATE_BUS_DEAD_LETTERED} (or dead_letter)",
    )
    add_project(listing, "only this project's gates (id, prefix or fleet)")
    listing.add_argument(
        "--older-than", metavar="AGE", help="only gates raised longer ago than AGE (e.g. 1h)"
    )
    listing.add_argument(
        "--since",
        metavar="AGE|ISO",
        help="only gates raised at or after: 1h, or 2026-12-01T09:00Z (a report's parks: the "
        "time it prints)",
    )
    show = gate_commands.add_parser(
        "show",
        help="one gate, whole",
        description="One gate, whole: for a dead letter its quoted (untrusted) headers, its "
        "origin, the body's first bytes and whether replay is possible.",
    )
    show.add_argument("gate", metavar="GATE", help="the gate's id or a unique prefix of it")
    show.add_argument("--json", action="store_true", help="print it as JSON")
    answer = gate_commands.add_parser(
        "answer",
        help="answer a gate",
        description=ANSWER_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    answer.add_argument(
        "gate", metavar="GATE", nargs="?", help="the gate's id or a unique prefix of it"
    )
    answer.add_argument("--choice", required=True, help="one of the gate's answers")
    answer.add_argument("--by", metavar="NAME", help="who answers (default: OS user@host)")
    answer.add_argument("--reason", metavar="TEXT", help="why, kept on the ledger")
    answer.add_argument(
        "--dry-run", action="store_true", help="say what it would do; write nothing"
    )
    gate_bulk.add_selection(answer, (GATE_DELIVERY_EXHAUSTED, GATE_BUS_DEAD_LETTERED))


def _add_events(commands: Commands) -> None:
    """``reaper events``."""
    events = commands.add_parser(
        "events",
        help="the ledger, newest last, one line per event (read from its indexes)",
        description="The append-only ledger, newest last, one line per event: every verdict "
        "(QueueReaped) and every gate answer (GateAnswered). Ids are taken as the outputs "
        "print them: any unique prefix, and `fleet` for the fleet's own stream.",
    )
    events.add_argument("--since", metavar="AGE|ISO", help="e.g. 1h, or 2026-12-01T09:00Z")
    add_project(events, "only this project's stream (id, prefix or fleet)")
    events.add_argument("--kind", metavar="KIND", help="QueueReaped or GateAnswered")
    for word, example in (("condition", "poison"), ("action", "park"), ("source", "broker")):
        events.add_argument(
            f"--{word}",
            type=argument(functools.partial(choose, word, known=VOCABULARY[word])),
            metavar=word.upper(),
            help=f"one of {', '.join(VOCABULARY[word])} (e.g. {example})",
        )
    events.add_argument("--object", metavar="ID", help="a job (id or prefix) or a queue name")
    add_output(
        events,
        EVENT_OUTPUTS,
        "text (default: short ids), wide (whole ids), json, or name (PROJECT#SEQ)",
    )
    events.add_argument(
        "--limit", type=_positive, default=100, help="the newest N (default %(default)s)"
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


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {value!r}")
    return int(value)
