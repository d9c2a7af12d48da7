"""``reaper completion bash|zsh|fish`` and ``reaper man``: generated from the parser, run in
the real shells (``scripts/services`` installs zsh, fish and groff) and rendered by groff."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reaper.edges.arguments import build_parser
from reaper.edges.cli import main
from reaper.edges.completion import SHELLS, levels

PARSER = build_parser()
LEVELS = {lv.path: lv for lv in levels(PARSER)}


def generated(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def candidates(shell: str, script: Path, *words: str) -> list[str]:
    """What the script offers for the last of ``words``, asked of the shell itself."""
    if shell == "fish":
        line = " ".join(("reaper", *words))
        command = f"source {script}; complete -C{line!r}"
        ran = subprocess.run(["fish", "-c", command], capture_output=True, text=True, check=True)
        return [c.split("\t")[0] for c in ran.stdout.splitlines()]
    quoted = " ".join(f"'{w}'" for w in words)
    prelude = "autoload -U compinit; compinit -u; " if shell == "zsh" else ""
    command = f"{prelude}source {script}; _reaper_candidates {quoted}"
    ran = subprocess.run([shell, "-c", command], capture_output=True, text=True, check=True)
    return ran.stdout.split()


@pytest.fixture(params=SHELLS)
def shell_script(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[str, Path]:
    path = tmp_path / f"reaper.{request.param}"
    path.write_text(generated(request.param, capsys))
    check = subprocess.run([request.param, "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    return request.param, path


def test_every_command_completes_at_the_top(shell_script: tuple[str, Path]) -> None:
    shell, script = shell_script
    offered = candidates(shell, script, "")
    assert {"reap", "gates", "events", "doctor", "completion", "man"} <= set(offered)
    assert set(LEVELS["reaper"].actions) <= set(offered)


def test_a_command_offers_its_actions_and_options(shell_script: tuple[str, Path]) -> None:
    shell, script = shell_script
    assert set(candidates(shell, script, "gates", "")) >= {"list", "show", "answer"}
    assert "--dry-run" in candidates(shell, script, "reap", "--")
    assert "--dry-run" not in candidates(shell, script, "gates", "--")


def test_an_option_completes_its_choices(shell_script: tuple[str, Path]) -> None:
    shell, script = shell_script
    assert set(candidates(shell, script, "reap", "-o", "")) == {"text", "wide", "json"}
    assert set(candidates(shell, script, "completion", "")) >= set(SHELLS)


def test_a_path_option_completes_files(shell_script: tuple[str, Path], tmp_path: Path) -> None:
    shell, script = shell_script
    (tmp_path / "reaper.prom").write_text("")
    offered = candidates(shell, script, "reap", "--metrics-textfile", f"{tmp_path}/reaper.p")
    assert f"{tmp_path}/reaper.prom" in offered


def test_bash_knows_every_command_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "reaper.bash"
    script.write_text(generated("bash", capsys))
    for path, level in LEVELS.items():
        words = path.split()[1:]
        offered = set(candidates("bash", script, *words, ""))
        assert set(level.actions) | set(level.options) == offered, path


def test_an_unknown_shell_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["completion", "tcsh"])
    assert exit_.value.code == 2
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


def test_the_manual_page_renders_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["man"]) == 0
    page = capsys.readouterr().out
    assert page.startswith(".TH REAPER 1 ")
    rendered = subprocess.run(
        ["groff", "-man", "-Tascii", "-P-bou", "-ww"],
        input=page,
        capture_output=True,
        text=True,
        check=True,
    )
    assert rendered.stderr == "", rendered.stderr  # no roff warning
    text = rendered.stdout.replace("\u2010", "-").replace("\u2212", "-")
    text = " ".join(text.replace("\b", "").split())
    for path, level in LEVELS.items():
        if path != "reaper":
            assert path in text, path
        for option in level.options:
            if option not in ("-h", "--help"):
                assert option in text, (path, option)
