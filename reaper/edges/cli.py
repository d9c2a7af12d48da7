"""The ``reaper`` command: load the configuration, run the command, exit.

The ``reaper`` command: load the configuration, run the command, exit (its arguments are
:mod:`reaper.edges.arguments`).

Exit codes (SPEC §5): 0 the pass is ok (findings may be listed: ``OK, N findings``); 1 the
pass ran but is not ok (a source unreadable, a write not done, a policy not in force, a queue
of ours that would drop messages, a dead-letter queue that could not be read safely); 2 usage
or configuration error. The global options (``--config-dir``, ``-v``, ``-q``) are taken before
or after the command.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from reaper.config import LoadedConfig, load_config, show
from reaper.core.terminal import for_terminal, table
from reaper.edges import commands, completion, doctor, gate_commands, logs, production
from reaper.edges.arguments import build_parser
from reaper.edges.commands import EXIT_NOT_OK, EXIT_OK, EXIT_USAGE
from reaper.edges.manpage import manpage
from reaper.edges.options import output_of
from reaper.errors import ConfigError, GateError, ReaperError, scrub

log = logging.getLogger("reaper")


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, default=str))


def _config_show(loaded: LoadedConfig, output: str) -> int:
    """``config show``: every key in force under a header row, secrets masked, with its
    origin (``wide``: and the variable that sets it); or JSON, or the keys alone."""
    values = show(loaded)
    if output == "name":
        print("\n".join(v.key for v in values))
        return EXIT_OK
    in_force, why = asyncio.run(commands.dispatch_of(loaded))
    if output == "json":
        _print_json(
            {
                "config_dir": str(loaded.config_dir) if loaded.config_dir else None,
                "files": [str(f) for f in loaded.files],
                "values": [{"key": v.key, "value": v.value, "origin": v.origin} for v in values],
                "dispatch": {"in_force": in_force, "why": why},
                "management_urls": _management_urls(loaded),
                "warnings": [w for w in [loaded.settings.bus.tls_warning()] if w],
            }
        )
        return EXIT_OK
    where = str(loaded.config_dir) if loaded.config_dir else "none (environment only)"
    insecure = loaded.settings.bus.tls_warning()
    if insecure is not None:
        print(insecure)
    print(f"config dir: {where}")
    for f in loaded.files:
        print(f"  file: {f}")
    header = ("KEY", "VALUE", "ORIGIN") + (("VARIABLE",) if output == "wide" else ())
    rows = [
        (v.key, json.dumps(v.value, default=str), v.origin)
        + ((f"REAPER_{v.key.upper().replace('.', '__')}",) if output == "wide" else ())
        for v in values
    ]
    print("\n".join(table(header, rows)))
    print(f"dispatch in force: {in_force or 'not known'} ({why})")
    management = _management_urls(loaded)
    print(f"management API in force, in order of preference ({management['key']}):")
    for number, url in enumerate(management["in_force"], start=1):
        print(f"  {number}. {url}")
    print(f"  ({management['why']})")
    return EXIT_OK


def _management_urls(loaded: LoadedConfig) -> dict[str, Any]:
    """Which management URLs a pass uses, from which key, and how it goes through them."""
    bus = loaded.settings.bus
    urls = list(bus.urls_in_force())
    if bus.management_urls is not None:
        key = "bus.management_urls"
        why = (
            f"from {loaded.origin(key)}; bus.management_url is not used. Each pass asks the "
            "first; a node that refuses the connection or times out on a read is skipped for "
            "the rest of the pass (the report's notes name it) and the next is asked; the "
            "broker is unreadable only when none answers"
        )
    else:
        key = "bus.management_url"
        why = (
            f"from {loaded.origin(key)}: one URL, so no failover; set bus.management_urls to "
            "list one URL per node of a cluster"
        )
    return {"in_force": urls, "key": key, "why": why}


async def _run(args: argparse.Namespace, loaded: LoadedConfig) -> int:
    if args.command == "reap":
        return await commands.reap(
            loaded,
            dry_run=args.dry_run,
            output=output_of(args),
            quiet=args.quiet,
            project_id=args.project,
            metrics_textfile=args.metrics_textfile,
            pushgateway=args.pushgateway,
        )
    if args.command == "db" and args.db_command == "grants":
        return await production.grants(loaded, args.role, apply=args.apply)
    if args.command == "doctor":
        return await doctor.run(loaded, output=output_of(args))
    if args.command == "db":
        return await commands.migrate(loaded, dry_run=args.dry_run, outbox=args.outbox)
    if args.command == "policies":
        return await commands.policies_plan(loaded, output=output_of(args))
    if args.command in gate_commands.COMMANDS:
        return await gate_commands.run(args, loaded)
    if args.command == "serve":
        return await commands.serve(loaded, args.listen)
    if args.command == "demo":
        return await commands.demo(loaded, cleanup=args.cleanup)
    raise AssertionError(f"unhandled command {args.command}")


class TerminalText(io.TextIOBase):
    """A text stream whose every write goes through :func:`for_terminal`: whatever a line
    carries (a queue name, a header, an answer's ``--by``), nothing in it drives the
    terminal. JSON is written with its non-ASCII escaped, so it passes unchanged."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(for_terminal(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()


def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalText(out), TerminalText(err)
    try:
        return _main(argv)
    except BrokenPipeError:
        # the reader went away (`reaper reap | head -1`): end quietly, and keep the
        # interpreter from failing again as it flushes stdout on the way out
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "completion":
        print(completion.script(parser, args.shell), end="")
        return EXIT_OK
    if args.command == "man":
        print(manpage(parser), end="")
        return EXIT_OK
    if args.command == "gates" and args.gates_command is None:
        print(gate_commands.GATE_ACTIONS)
        return EXIT_OK
    logs.configure(args.verbose, args.quiet, getattr(args, "log_format", "text"))
    try:
        loaded = load_config(args.config_dir)
    except ConfigError as exc:
        print("configuration is invalid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "config":
        if args.config_command == "check":
            where = loaded.config_dir or "environment only"
            print(f"configuration is valid ({len(loaded.files)} file(s) from {where})")
            return EXIT_OK
        return _config_show(loaded, output_of(args))
    try:
        return asyncio.run(_run(args, loaded))
    except GateError as exc:
        print(f"reaper: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"reaper: configuration is invalid: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ReaperError as exc:
        print(f"reaper: {exc}", file=sys.stderr)
        return EXIT_NOT_OK
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # ended quietly by main
    except Exception as exc:  # the last line of defence: one line, scrubbed, never a traceback
        log.debug("unexpected error", exc_info=True)
        print(f"reaper: unexpected {type(exc).__name__}: {scrub(str(exc))}", file=sys.stderr)
        return EXIT_NOT_OK


if __name__ == "__main__":
    sys.exit(main())
