"""The alert rules pass promtool's checks and their unit tests (promtool from Debian's
``prometheus`` package, installed by scripts/services)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

METRICS_DIR = Path(__file__).resolve().parents[2] / "metrics"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is not installed: run scripts/services (Debian's prometheus package)")
    return subprocess.run(
        [tool, *args], cwd=METRICS_DIR, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules() -> None:
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_and_a_non_firing_case() -> None:
    """Read line by line (PyYAML is not a dependency); promtool has parsed both files above."""
    rules = (METRICS_DIR / "alerts.yml").read_text()
    assert re.search(r"^  - name: queue-reaper$", rules, re.MULTILINE)
    blocks = re.split(r"^      - alert: ", rules, flags=re.MULTILINE)[1:]
    alerts = {block.split()[0] for block in blocks}
    assert len(alerts) == len(blocks), "alert names must be unique"
    for block in blocks:
        severity = re.search(r"^          severity: (\w+)$", block, re.MULTILINE)
        assert severity and severity[1] in {"critical", "warning", "info"}, block.split()[0]
        assert "summary:" in block and "description:" in block, block.split()[0]

    firing: set[str] = set()
    quiet: set[str] = set()
    cases = re.findall(
        r"alertname: (\w+)\n\s+exp_alerts:(.*)$",
        (METRICS_DIR / "alerts_test.yml").read_text(),
        re.MULTILINE,
    )
    for name, rest in cases:
        (quiet if rest.strip() == "[]" else firing).add(name)
    assert alerts <= firing, f"no firing case: {sorted(alerts - firing)}"
    assert alerts <= quiet, f"no non-firing case: {sorted(alerts - quiet)}"
