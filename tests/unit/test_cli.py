"""The command line: help that teaches, exit code 2 for usage and configuration errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import reaper.errors
from reaper.edges.cli import build_parser, main


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(reaper.errors, "_known_secrets", set())
    for key in list(__import__("os").environ):
        if key.startswith("REAPER_"):
            monkeypatch.delenv(key)


def test_help_names_every_command_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("reap", "config", "db", "policies", "gates", "serve", "demo"):
        assert command in out
    assert "exit codes:\n  0  the pass is ok" in out
    assert "1  the pass ran but is NOT OK" in out and "2  usage or configuration error" in out


def test_an_unknown_command_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["reap-everything"])
    assert exc.value.code == 2


def test_a_bad_project_id_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["reap", "--project", "nope"])
    assert exc.value.code == 2
    assert "not a project id" in capsys.readouterr().err


def test_config_check_exits_2_naming_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "50-bad.toml").write_text(
        "[queue.reap]\ninterval_seconds = 0\ndead_letter_peek_limit = 5000\n"
        "[bus]\nmanagement_url = 'http://admin:s3cret@127.0.0.1:15672'\n"
    )
    assert main(["--config-dir", str(conf), "config", "check"]) == 2
    err = capsys.readouterr().err
    assert "interval_seconds" in err
    assert "dead_letter_peek_limit" in err
    assert "management_url" in err
    assert "s3cret" not in err


def test_config_check_passes_on_the_shipped_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    shipped = Path(__file__).resolve().parents[2] / "conf.d"
    assert main(["--config-dir", str(shipped), "config", "check"]) == 0
    assert "configuration is valid" in capsys.readouterr().out


def test_config_show_masks_secrets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REAPER_BUS__PASSWORD", "hunter2-very-secret")
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "hunter2-very-secret" not in out
    assert "env:REAPER_BUS__PASSWORD" in out


def test_config_show_in_each_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("KEY"))
    assert header.split() == ["KEY", "VALUE", "ORIGIN"]
    assert main(["config", "show", "-o", "wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert next(line for line in wide if line.startswith("KEY")).split()[-1] == "VARIABLE"
    [dsn] = [line for line in wide if line.startswith("database.dsn ")]
    assert dsn.split()[-1] == "REAPER_DATABASE__DSN"
    assert main(["config", "show", "-o", "name"]) == 0
    keys = capsys.readouterr().out.split()
    assert "database.dsn" in keys and "queue.reap.stale_ready_seconds" in keys
    assert main(["config", "show", "-o", "json"]) == 0
    assert {v["key"] for v in json.loads(capsys.readouterr().out)["values"]} == set(keys)


def test_every_subcommand_has_help() -> None:
    parser = build_parser()
    for argv in (
        ["reap"],
        ["config", "show"],
        ["gates", "answer"],
        ["serve"],
        ["policies", "plan"],
    ):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([*argv, "--help"])
        assert exc.value.code == 0


def test_db_migrate_help_explains_the_lock_timeout_concurrent_builds_and_the_dry_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["db", "migrate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for phrase in (
        "--dry-run",
        "lock_timeout_seconds",
        "REAPER_DATABASE__LOCK_TIMEOUT_SECONDS",
        "CREATE INDEX CONCURRENTLY",
        "names the blocking",
        "takes no lock on any of the host's tables",
        "invalid",
        "00000000-0000-0000-0000-000000000000",
    ):
        assert phrase in " ".join(out.split()), phrase
