"""The words for a failed TLS handshake (``reaper.core.tls``): each failure the live tests
produce (tests/integration/test_tls_live.py), and the ones they cannot (an expired
certificate), said with the setting that fixes it; anything else is not a TLS failure."""

from __future__ import annotations

import ssl

from reaper.core.tls import tls_words


def _verify_error(message: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {message}")
    exc.verify_message = message
    return exc


def words(exc: BaseException) -> str | None:
    return tls_words(exc, host="db", ca_key="sslrootcert", verify_key="sslmode=verify-full")


def test_an_untrusted_ca() -> None:
    said = words(_verify_error("unable to get local issuer certificate"))
    assert said == (
        "the certificate presented by db is not trusted (unable to get local issuer "
        "certificate): set sslrootcert to the PEM file of the CA that signed it (leaving "
        "sslmode=verify-full on)"
    )


def test_an_expired_certificate_is_not_trusted() -> None:
    said = words(_verify_error("certificate has expired"))
    assert said is not None and said.startswith("the certificate presented by db is not trusted")


def test_a_name_the_certificate_lacks() -> None:
    said = words(_verify_error("Hostname mismatch, certificate is not valid for 'db'."))
    assert said is not None and said.startswith("the certificate presented by db does not name db")


def test_tls_to_a_plain_port_found_through_the_cause() -> None:
    outer = ConnectionError("connect failed")
    outer.__cause__ = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    said = words(outer)
    assert said is not None and "answered in plain text (WRONG_VERSION_NUMBER)" in said


def test_not_a_tls_failure() -> None:
    assert words(ConnectionRefusedError(111, "refused")) is None
