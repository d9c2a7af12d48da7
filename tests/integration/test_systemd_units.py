"""The units in deploy/systemd (SPEC §6, §10): ``systemd-analyze verify`` finds nothing to say
about them, and ``systemd-analyze security`` rates their exposure low. ``scripts/services``
installs the tools; a machine without them fails here rather than skipping."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
NAMES = ("queue-reaper-serve.service", "queue-reaper-reap.service", "queue-reaper-reap.timer")
#: Where the units expect the package's entry point.
ENTRY_POINT = "/opt/queue-reaper/bin/reaper"
#: systemd-analyze security's exposure, in tenths (10 is the worst; "OK" is below 2).
MAX_EXPOSURE = 20


@pytest.fixture(scope="module")
def analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.fail("systemd-analyze is not installed: run scripts/services")
    return found


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """The units as installed, their entry point an executable that exists here (verify
    checks that ExecStart's binary exists)."""
    reaper = tmp_path / "reaper"
    reaper.write_text("#!/bin/sh\n")
    reaper.chmod(0o755)
    for name in NAMES:
        text = (UNITS / name).read_text()
        (tmp_path / name).write_text(text.replace(ENTRY_POINT, str(reaper)))
    return tmp_path


def test_verify_finds_nothing(analyze: str, installed: Path) -> None:
    done = subprocess.run(
        [analyze, "verify", "--man=no", *NAMES],
        cwd=installed,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_typo_is_caught(analyze: str, installed: Path) -> None:
    """The check above can fail: an unknown key is reported."""
    unit = installed / "queue-reaper-serve.service"
    unit.write_text(unit.read_text().replace("NoNewPrivileges=", "NoNewPrivilegs="))
    done = subprocess.run(
        [analyze, "verify", "--man=no", unit.name],
        cwd=installed,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Unknown key 'NoNewPrivilegs'" in done.stderr


@pytest.mark.parametrize("name", NAMES[:2])
def test_exposure_is_low(analyze: str, installed: Path, name: str) -> None:
    done = subprocess.run(
        [analyze, "security", "--offline=yes", f"--threshold={MAX_EXPOSURE}", name],
        cwd=installed,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:]


def _service(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / name)
    return parser["Service"]


def test_the_serve_unit() -> None:
    service = _service("queue-reaper-serve.service")
    assert service["ExecStart"].endswith("serve --listen 127.0.0.1:9464")
    assert service["Restart"] == "on-failure"
    assert (service["User"], service["NoNewPrivileges"], service["ProtectSystem"]) == (
        "queue-reaper",
        "yes",
        "strict",
    )


def test_the_reap_unit_writes_the_textfile() -> None:
    service = _service("queue-reaper-reap.service")
    assert service["Type"] == "oneshot"
    textfile = "/var/lib/prometheus/node-exporter/queue-reaper.prom"
    assert f"reap --metrics-textfile {textfile}" in service["ExecStart"]
    assert service["ReadWritePaths"] == "/var/lib/prometheus/node-exporter"
    assert service["ProtectSystem"] == "strict"
