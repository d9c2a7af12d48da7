"""Passwords from files (SPEC §2): ``password_file``, ``REAPER_*__PASSWORD_FILE`` and a secrets
directory; an unreadable file is a problem naming its path and never its content."""

from __future__ import annotations

from pathlib import Path

import pytest

from reaper.config import load_config
from reaper.config.loading import show
from reaper.errors import ConfigError
from tests.support.config_dirs import isolate_config


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolate_config(tmp_path, monkeypatch)


def origins(environ: dict[str, str], config_dir: Path | None = None) -> dict[str, str]:
    return {v.key: v.origin for v in show(load_config(config_dir, environ=environ))}


def test_password_file_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "bus").write_text("s3cret\n")
    (tmp_path / "db").write_text("dbpass")
    environ = {
        "REAPER_BUS__PASSWORD_FILE": str(tmp_path / "bus"),
        "REAPER_DATABASE__PASSWORD_FILE": str(tmp_path / "db"),
    }
    settings = load_config(environ=environ).settings
    assert settings.bus.password.get_secret_value() == "s3cret"
    assert settings.database.password is not None
    assert settings.database.password.get_secret_value() == "dbpass"
    shown = {v.key: v for v in show(load_config(environ=environ))}
    assert shown["bus.password"].value == "***"
    assert shown["bus.password"].origin == f"file:{tmp_path / 'bus'} (named by bus.password_file)"
    assert shown["bus.password_file"].origin == "env:REAPER_BUS__PASSWORD_FILE"


def test_password_file_from_a_drop_in(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("from-toml\n")
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "50-bus.toml").write_text(f'[bus]\npassword_file = "{tmp_path / "pw"}"\n')
    assert load_config(conf, environ={}).settings.bus.password.get_secret_value() == "from-toml"


def test_an_unreadable_file_names_its_path_never_its_content(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"REAPER_BUS__PASSWORD_FILE": str(missing)})
    assert caught.value.problems == [
        f"bus.password_file {missing} cannot be read: No such file or directory"
    ]
    # Root reads any mode, so a file whose bytes are not text stands for one that cannot be
    # read: its content must not leak into the problem.
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfehunter2")
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"REAPER_DATABASE__PASSWORD_FILE": str(binary)})
    (problem,) = caught.value.problems
    assert problem == f"database.password_file {binary} cannot be read: UnicodeDecodeError"
    assert "hunter2" not in problem


def test_a_password_and_a_password_file_at_once_are_refused(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("one")
    with pytest.raises(ConfigError) as caught:
        load_config(
            environ={
                "REAPER_BUS__PASSWORD": "two",
                "REAPER_BUS__PASSWORD_FILE": str(tmp_path / "pw"),
            }
        )
    (problem,) = caught.value.problems
    assert "bus.password and bus.password_file are both set" in problem
    assert "two" not in problem.replace("both", "")


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        load_config(environ={"REAPER_BUS__PASSWORD_FILE": str(tmp_path / "pw")})


def test_the_secrets_directory(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    directory.mkdir()
    (directory / "reaper_bus__password").write_text("dir-bus\n")
    (directory / "REAPER_DATABASE__PASSWORD").write_text("dir-db\n")
    (directory / "another_program").write_text("not ours")
    environ = {"REAPER_SECRETS_DIR": str(directory)}
    settings = load_config(environ=environ).settings
    assert settings.bus.password.get_secret_value() == "dir-bus"
    assert settings.database.password is not None
    assert settings.database.password.get_secret_value() == "dir-db"
    found = origins(environ)
    assert found["bus.password"] == f"secret:{directory / 'reaper_bus__password'}"
    assert found["database.password"] == f"secret:{directory / 'REAPER_DATABASE__PASSWORD'}"


def test_the_environment_wins_over_the_secrets_directory(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    directory.mkdir()
    (directory / "reaper_bus__password").write_text("dir")
    (tmp_path / "pw").write_text("file")
    environ = {"REAPER_SECRETS_DIR": str(directory), "REAPER_BUS__PASSWORD": "env"}
    assert load_config(environ=environ).settings.bus.password.get_secret_value() == "env"
    environ = {
        "REAPER_SECRETS_DIR": str(directory),
        "REAPER_BUS__PASSWORD_FILE": str(tmp_path / "pw"),
    }
    assert load_config(environ=environ).settings.bus.password.get_secret_value() == "file"


def test_the_default_secrets_directory_is_read_when_present(isolated: Path) -> None:
    default = isolated / "run-secrets"
    default.mkdir()
    (default / "reaper_bus__password").write_text("mounted")
    assert load_config(environ={}).settings.bus.password.get_secret_value() == "mounted"


def test_a_secrets_directory_that_is_not_there_is_a_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"REAPER_SECRETS_DIR": str(tmp_path / "absent")})
    assert caught.value.problems == [f"REAPER_SECRETS_DIR {tmp_path / 'absent'} does not exist"]


def test_an_unreadable_secret_in_the_directory_names_the_file(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    (directory / "reaper_bus__password").mkdir(parents=True)
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"REAPER_SECRETS_DIR": str(directory)})
    assert caught.value.problems == [
        f"the secrets directory's file {directory / 'reaper_bus__password'} cannot be read: "
        "Is a directory"
    ]


def test_tls_keys_of_the_database_join_the_dsn() -> None:
    environ = {
        "REAPER_DATABASE__DSN": "postgresql://reaper@localhost:5432/jobs",
        "REAPER_DATABASE__SSLMODE": "verify-full",
        "REAPER_DATABASE__SSLROOTCERT": "/etc/ca.pem",
    }
    database = load_config(environ=environ).settings.database
    assert database.dsn_in_force() == (
        "postgresql://reaper@localhost:5432/jobs?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
    )
    assert database.tls() == {"sslmode": "verify-full", "sslrootcert": "/etc/ca.pem"}


def test_tls_keys_that_disagree_with_the_dsn_are_refused() -> None:
    environ = {
        "REAPER_DATABASE__DSN": "postgresql://localhost/jobs?sslmode=require",
        "REAPER_DATABASE__SSLMODE": "verify-full",
    }
    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ)
    assert caught.value.problems == [
        "database.sslmode = 'verify-full' and the DSN's sslmode=require disagree: set it in one "
        "place"
    ]


def test_an_unknown_sslmode_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"database\.sslmode"):
        load_config(environ={"REAPER_DATABASE__SSLMODE": "verify"})


def test_a_client_key_without_its_certificate_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"client_key_file is set without bus\.client_cert_file"):
        load_config(environ={"REAPER_BUS__CLIENT_KEY_FILE": "/k.pem"})


def test_verify_off_is_said_loudly() -> None:
    bus = load_config(environ={"REAPER_BUS__VERIFY": "false"}).settings.bus
    warning = bus.tls_warning()
    assert warning is not None and warning.startswith("WARNING: bus.verify = false")
    assert load_config(environ={}).settings.bus.tls_warning() is None
