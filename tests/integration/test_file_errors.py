"""Every error about a file names the file: the TLS files of PostgreSQL and of the management
API, and the secret files (SPEC §11 and the operator's fix: a bare ``FileNotFoundError`` says
neither which key nor which path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reaper.broker.http import BrokerTls, tls_context
from reaper.config.connections import read_secret_file
from reaper.errors import BrokerUnavailable, StoreUnavailable
from reaper.jobqueue.database import Database
from tests.support.services import PG_ADMIN_DSN


@pytest.mark.parametrize("key", ["sslrootcert", "sslcert"])
async def test_a_missing_postgresql_tls_file_is_named(key: str, tmp_path: Path) -> None:
    missing = tmp_path / f"missing-{key}.pem"
    joiner = "&" if "?" in PG_ADMIN_DSN else "?"
    dsn = f"{PG_ADMIN_DSN}{joiner}sslmode=require&{key}={missing}"
    with pytest.raises(StoreUnavailable) as raised:
        database = await Database.connect(dsn)
        await database.close()
    assert f"{key} {missing}: No such file or directory" in str(raised.value)


@pytest.mark.parametrize(
    ("tls", "named"),
    [
        (BrokerTls(ca_file="/nonexistent-ca.pem"), "bus.ca_file /nonexistent-ca.pem"),
        (
            BrokerTls(client_cert_file="/nonexistent-cert.pem"),
            "bus.client_cert_file /nonexistent-cert.pem",
        ),
    ],
)
def test_a_missing_management_api_tls_file_is_named(tls: BrokerTls, named: str) -> None:
    with pytest.raises(BrokerUnavailable) as raised:
        tls_context(tls)
    assert named in str(raised.value)
    assert "No such file or directory" in str(raised.value)


def test_a_missing_secret_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "secret"
    with pytest.raises(ValueError) as raised:
        read_secret_file(str(missing), "bus.password_file")
    assert f"bus.password_file {missing} cannot be read: No such file" in str(raised.value)
