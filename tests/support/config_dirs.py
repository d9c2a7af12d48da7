"""A configuration load that reads nothing of the machine's: for the tests of loading."""

from __future__ import annotations

from pathlib import Path

import pytest

import reaper.config.loading as loading
import reaper.config.secrets as secrets
from reaper import errors


def isolate_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No ./conf.d, no /etc/queue-reaper/conf.d, no secret registered by another test: the
    working directory, the default drop-in and secrets directories all under ``tmp_path``."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(loading, "DEFAULT_CONFIG_DIRS", (Path("conf.d"), tmp_path / "etc"))
    monkeypatch.setattr(secrets, "DEFAULT_SECRETS_DIR", tmp_path / "run-secrets")
    monkeypatch.setattr(errors, "_known_secrets", set())
    return tmp_path
