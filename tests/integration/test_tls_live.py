"""TLS to both sources on the real services (SPEC §2, §7): RabbitMQ 3.10's management API on
https 15671 and PostgreSQL with ``sslmode=verify-full``, both with certificates from the test
CA that ``scripts/services`` makes. A CA not trusted, a name the certificate does not hold and
TLS spoken to a plain-http port are each said in words, with the fix."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from reaper.broker.client import ManagementClient
from reaper.broker.http import BrokerTls
from reaper.errors import BrokerUnavailable, StoreUnavailable
from reaper.jobqueue.postgres import PostgresStore
from tests.support.services import BROKER_PASSWORD, BROKER_USER

TLS = Path("/var/cache/queue-reaper/tls")
CA = str(TLS / "ca.pem")
CLIENT = (str(TLS / "client.pem"), str(TLS / "client-key.pem"))
#: 3.10's https listener, and a name /etc/hosts gives 127.0.0.1 that the certificate lacks.
HTTPS_310 = "https://localhost:15671"
OTHER_NAME = "vm"


@pytest.fixture(autouse=True, scope="module")
def _test_ca() -> None:
    if not (TLS / "ca.pem").is_file():
        pytest.fail(f"no test CA at {CA}: run scripts/services")


async def overview(url: str, tls: BrokerTls | None) -> str:
    client = ManagementClient(url, BROKER_USER, BROKER_PASSWORD, tls=tls)
    try:
        return str((await client.api.request("GET", "/api/overview"))["rabbitmq_version"])  # type: ignore[index]
    finally:
        await client.aclose()


async def test_the_management_api_over_https_with_the_ca() -> None:
    assert (await overview(HTTPS_310, BrokerTls(CA))).startswith("3.10")
    assert (await overview("https://127.0.0.1:15671", BrokerTls(CA))).startswith("3.10")


async def test_a_client_certificate_is_presented() -> None:
    assert (await overview(HTTPS_310, BrokerTls(CA, *CLIENT))).startswith("3.10")


async def test_an_untrusted_certificate_says_which_setting_to_give() -> None:
    with pytest.raises(BrokerUnavailable) as caught:
        await overview(HTTPS_310, BrokerTls())
    reason = caught.value.reason
    assert "the certificate presented by localhost is not trusted" in reason
    assert "self-signed certificate in certificate chain" in reason
    assert "set bus.ca_file to the PEM file of the CA that signed it" in reason


async def test_a_name_the_certificate_does_not_hold() -> None:
    with pytest.raises(BrokerUnavailable) as caught:
        await overview(f"https://{OTHER_NAME}:15671", BrokerTls(CA))
    reason = caught.value.reason
    assert f"the certificate presented by {OTHER_NAME} does not name {OTHER_NAME}" in reason
    assert "connect by a name the certificate holds" in reason


async def test_https_against_the_plain_http_port() -> None:
    with pytest.raises(BrokerUnavailable) as caught:
        await overview("https://localhost:15672", BrokerTls(CA))
    reason = caught.value.reason
    assert "answered in plain text (WRONG_VERSION_NUMBER)" in reason
    assert "use http:// for it, or the broker's TLS port" in reason


async def test_http_against_the_tls_port() -> None:
    with pytest.raises(BrokerUnavailable) as caught:
        await overview("http://localhost:15671", BrokerTls(CA))
    assert "may serve TLS; use https:// for it" in caught.value.reason


async def test_verify_off_reaches_an_untrusted_certificate() -> None:
    assert (await overview(HTTPS_310, BrokerTls(verify=False))).startswith("3.10")


async def test_a_ca_file_that_cannot_be_loaded(tmp_path: Path) -> None:
    with pytest.raises(BrokerUnavailable) as caught:
        await overview(HTTPS_310, BrokerTls(str(tmp_path / "absent.pem")))
    assert caught.value.reason == (
        f"RabbitMQ management API at {HTTPS_310} cannot set up TLS: bus.ca_file "
        f"{tmp_path / 'absent.pem'} cannot be loaded as PEM CA certificates: No such file or "
        "directory"
    )


def _tls_dsn(dsn: str, host: str, **params: str) -> str:
    """``dsn`` (a test database on 127.0.0.1) reached by ``host`` with TLS ``params``."""
    _, _, database = dsn.rpartition("/")
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"postgresql://postgres@{host}:5432/{database}?{query}"


async def test_postgresql_verify_full(pg_dsn: str) -> None:
    dsn = _tls_dsn(pg_dsn, "localhost", sslmode="verify-full", sslrootcert=CA)
    store = await PostgresStore.connect(dsn, pool_size=1)
    await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("select ssl from pg_stat_ssl where pid = pg_backend_pid()")
    finally:
        await conn.close()


async def test_postgresql_with_a_client_certificate(pg_dsn: str) -> None:
    dsn = _tls_dsn(
        pg_dsn,
        "localhost",
        sslmode="verify-full",
        sslrootcert=CA,
        sslcert=CLIENT[0],
        sslkey=CLIENT[1],
    )
    conn = await asyncpg.connect(dsn)
    try:
        dn = await conn.fetchval("select client_dn from pg_stat_ssl where pid = pg_backend_pid()")
    finally:
        await conn.close()
    assert dn == "/CN=queue-reaper"


async def test_postgresql_untrusted_and_mismatched(pg_dsn: str) -> None:
    with pytest.raises(StoreUnavailable) as caught:
        await PostgresStore.connect(
            _tls_dsn(
                pg_dsn,
                "localhost",
                sslmode="verify-full",
                sslrootcert="/etc/ssl/certs/ca-certificates.crt",
            ),
            pool_size=1,
        )
    assert "the certificate presented by localhost is not trusted" in caught.value.reason
    assert "set sslrootcert (in the DSN or database.sslrootcert)" in caught.value.reason
    with pytest.raises(StoreUnavailable) as caught:
        await PostgresStore.connect(
            _tls_dsn(pg_dsn, OTHER_NAME, sslmode="verify-full", sslrootcert=CA), pool_size=1
        )
    assert f"the certificate presented by {OTHER_NAME} does not name {OTHER_NAME}" in (
        caught.value.reason
    )


async def test_postgresql_verify_full_without_a_ca(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(StoreUnavailable) as caught:
        await PostgresStore.connect(
            _tls_dsn(pg_dsn, "localhost", sslmode="verify-full"), pool_size=1
        )
    assert (
        "need the CA that signed the server's certificate; set sslrootcert" in caught.value.reason
    )
