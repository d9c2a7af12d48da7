"""Command-line habits (SPEC §5): global options before or after the command, -q, a closed
pipe ends quietly, third-party loggers quiet unless -vv, help for every option and command,
exit 2 for every usage error, and a worker's log gets one reaper line per pass."""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reaper.edges import colour, logs
from reaper.edges.arguments import _subcommands, build_parser
from reaper.edges.cli import main
from reaper.gates.ids import gate_kind
from tests.support.cli import Cli
from tests.support.verdicts import stale_queue


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for key in list(__import__("os").environ):
        if key.startswith("REAPER_"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize(
    "argv",
    [
        ["--config-dir", "X", "-v", "reap", "--dry-run"],
        ["reap", "--dry-run", "--config-dir", "X", "-v"],
        ["reap", "-v", "--dry-run", "--config-dir", "X"],
    ],
)
def test_global_options_are_taken_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.config_dir, args.verbose, args.dry_run, args.quiet) == (Path("X"), 1, True, False)


def test_global_options_given_before_are_not_reset_by_the_command() -> None:
    args = build_parser().parse_args(["-q", "--config-dir", "Y", "gates", "list"])
    assert (args.quiet, args.config_dir, args.verbose) == (True, Path("Y"), 0)
    assert build_parser().parse_args(["-vv", "db", "migrate"]).verbose == 2


def test_every_command_and_option_has_help() -> None:
    parser = build_parser()
    missing = []
    for sub in [parser, *_subcommands(parser)]:
        if sub is not parser and not sub.description:
            missing.append(sub.prog)
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{sub.prog} {a.dest}" for a in action._choices_actions if not a.help]
            elif not action.help:
                missing.append(f"{sub.prog} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--listen", "19466"],
        ["serve", "--listen", "host:port"],
        ["reap", "--output", "yaml"],
        ["reap", "--no-such-option"],
        ["reap", "--project", "not-hex"],
        ["events", "--project", "0bf5z"],
        ["gates", "list", "--project", "nope"],
    ],
)
def test_every_usage_error_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage: reaper" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "nearest"),
    [
        (["gates", "list", "--kind", "poisson"], "did you mean poison?"),
        (["events", "--condition", "poisson"], "did you mean poison?"),
        (["events", "--action", "parked"], "did you mean park?"),
        (["events", "--source", "brokers"], "did you mean broker?"),
        (["events", "--condition", "zzz"], "one of hung_handler, lease_expired"),
    ],
)
def test_a_word_outside_the_vocabulary_is_refused_with_the_nearest(
    argv: list[str], nearest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert nearest in capsys.readouterr().err


def test_gates_alone_lists_its_actions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gates"]) == 0  # before any configuration is read
    out = capsys.readouterr().out
    assert all(f"\n  {action} " in out for action in ("list", "show", "answer"))
    assert out.rstrip().endswith("start with: reaper gates list")


def test_a_gate_kind_is_taken_as_the_report_says_it() -> None:
    assert gate_kind("poison") == gate_kind("delivery_exhausted") == "delivery_exhausted"
    assert gate_kind("dead_letter") == "bus_dead_lettered"


@pytest.mark.parametrize(
    ("verbose", "level"), [(0, logging.WARNING), (1, logging.WARNING), (2, logging.DEBUG)]
)
def test_third_party_loggers_stay_at_warning_unless_vv(verbose: int, level: int) -> None:
    logs.configure(verbose, quiet=False)
    assert {logging.getLogger(n).level for n in logs.THIRD_PARTY_LOGGERS} == {level}


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("reaper.serve", logging.WARNING, __file__, 1, message, (), None)
    record.created = 1796116801.5  # 2026-12-01T09:20:01.500Z
    record.__dict__.update(extra)
    return record


def test_a_log_line_carries_one_utc_timestamp_format() -> None:
    line = logs.TextFormatter().format(_record("pass failed: broker unreadable"))
    assert line == "2026-12-01T09:20:01.500Z WARNING reaper.serve: pass failed: broker unreadable"


def test_a_json_log_line_is_one_object_with_the_exact_message() -> None:
    line = logs.JsonFormatter().format(_record('queue "vibey.q\x1b[2J" unreadable'))
    assert "\n" not in line and json.loads(line) == {
        "time": "2026-12-01T09:20:01.500Z",
        "level": "warning",
        "logger": "reaper.serve",
        "message": 'queue "vibey.q\x1b[2J" unreadable',
    }


def test_serve_logs_json_when_asked(tmp_path: Path) -> None:
    """A real ``reaper serve --log-format json`` (its first line, before any pass ends), each
    stderr line one JSON object with a UTC time."""
    env = {**os.environ, "REAPER_DATABASE__DSN": "postgresql://127.0.0.1:1/none"}
    env["REAPER_BUS__MANAGEMENT_URL"] = "http://127.0.0.1:1"
    env["REAPER_QUEUE__REAP__INTERVAL_SECONDS"] = "3600"
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reaper",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        first = serve.stderr.readline() if serve.stderr else ""
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    line = json.loads(first)
    assert line["logger"].startswith("reaper") and line["time"].endswith("Z"), line


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # `reaper config show | head -1` with a reader that is gone before the first write
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; r, w = os.pipe(); os.close(r); os.dup2(w, 1);"
            "from reaper.edges.cli import main; sys.exit(main(['reap', '--help']))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**__import__("os").environ},
        timeout=60,
    )
    assert "BrokenPipeError" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_worker_logging_at_info_gets_one_reaper_line_per_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from datetime import UTC, datetime

    from reaper.edges import hook
    from reaper.reap.progress import RecordedVerdict, Unreadable
    from reaper.reap.result import PassResult

    now = datetime(2026, 12, 1, tzinfo=UTC)
    stuck = [RecordedVerdict(stale_queue(f"q{n}", trusted=True), True) for n in range(5)]
    result = PassResult(
        False, now, now, None, tuple(stuck), unreadable=(Unreadable("broker", "down"),)
    )
    caplog.set_level(logging.INFO)
    hook.QueueReaper._log(result, None)
    lines = [r for r in caplog.records if r.name.startswith("reaper")]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    message = lines[0].getMessage()
    assert message.startswith("queue reap NOT OK: 1 source unreadable in ")
    assert "UNREADABLE broker; new stale_ready on q0" in message and "and 2 more" in message

    # the HTTP client's request lines made inside a pass are not the worker's to read
    caplog.clear()
    hook._quiet_http_client()
    token = hook._IN_PASS.set(True)
    try:
        logging.getLogger("httpx").info("HTTP Request: GET http://broker/api/queues")
        logging.getLogger("httpx").warning("a warning still shows")
    finally:
        hook._IN_PASS.reset(token)
    logging.getLogger("httpx").info("the host's own request")
    assert [r.getMessage() for r in caplog.records] == [
        "a warning still shows",
        "the host's own request",
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_and_never_with_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "queue-reaper pass: NOT OK: 1 source unreadable   2026-12-01T09:00:00Z  (0.10 s)\nx"
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    painted = colour.report(text, _Terminal())
    assert painted.startswith("queue-reaper pass: \033[31mNOT OK\033[0m: 1 source")
    assert painted.endswith("\nx")
    assert colour.standing("WARN", _Terminal()) == "\033[33mWARN\033[0m"
    # a pipe, a file, a test's capture: no colour
    assert colour.report(text, io.StringIO()) == text
    monkeypatch.setenv("NO_COLOR", "1")
    assert colour.report(text, _Terminal()) == text
    assert colour.standing("OK", _Terminal()) == "OK"
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert colour.report(text, _Terminal()) == text


def test_a_report_through_a_pipe_has_no_colour(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REAPER_", "NO_COLOR"))}
    env["REAPER_DATABASE__DSN"] = "postgresql://postgres@127.0.0.1:1/none"
    env["REAPER_BUS__MANAGEMENT_URL"] = "http://127.0.0.1:9"
    env["TERM"] = "xterm-256color"
    done = subprocess.run(
        [sys.executable, "-m", "reaper", "--config-dir", str(tmp_path), "doctor"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 1 and "\033[" not in done.stdout + done.stderr
    assert done.stdout.startswith("OK    configuration: ")


@pytest.mark.parametrize(
    ("argv", "doing"),
    [
        (["events"], "read the ledger"),
        (["gates", "list"], "read gates"),
        (["gates", "answer", "0123abcd", "--choice", "retry", "--yes"], "answer"),
        (["gates", "answer", "--kind", "poison", "--choice", "retry", "--dry-run"], "answer"),
    ],
)
async def test_a_command_that_needs_the_store_says_it_cannot_in_one_line(
    cli: Cli, argv: list[str], doing: str
) -> None:
    """No PostgreSQL: the command says what it could not do and why, one line, exit 1."""
    said = await cli.on({"REAPER_DATABASE__DSN": "postgresql://postgres@127.0.0.1:1/none"})(*argv)
    assert said.code == 1, said
    assert not said.out, said
    [line] = said.err.splitlines()
    assert line.startswith(f"reaper: cannot {doing}: "), line
    assert "127.0.0.1:1" in line or "refused" in line, line
