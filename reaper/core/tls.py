"""What a failed TLS handshake means, in an operator's words, with the fix.

What a failed TLS handshake means, in an operator's words, with the fix. Pure: it reads
an exception's chain, and both seams (the management API's and PostgreSQL's) word their
failures with it, as ``reaper doctor`` does.

Measured with Python's ssl against this project's test CA: a CA the client does not trust
says ``self-signed certificate in certificate chain`` or ``unable to get local issuer
certificate``; a name the certificate does not hold says ``Hostname mismatch``; TLS spoken
to a plain-http port says ``WRONG_VERSION_NUMBER`` (the server answered in plain text).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator

__all__ = ["tls_words"]

_UNTRUSTED = (
    "self-signed certificate",
    "self signed certificate",
    "unable to get local issuer",
    "unable to get issuer",
    "certificate has expired",
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def tls_words(exc: BaseException, *, host: str, ca_key: str, verify_key: str) -> str | None:
    """One sentence with the fix when ``exc`` (or what caused it) is a TLS failure, else
    None. ``ca_key`` names the setting that gives the CA (``bus.ca_file``), ``verify_key``
    the one that would switch verification off (never advised, only named)."""
    for link in _chain(exc):
        text = str(link)
        if "WRONG_VERSION_NUMBER" in text or "wrong version number" in text:
            return (
                f"TLS was spoken to {host}, which answered in plain text (WRONG_VERSION_NUMBER): "
                "this port does not serve TLS; use http:// for it, or the broker's TLS port "
                "(RabbitMQ's management https listener is usually 15671)"
            )
        if isinstance(link, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
            reason = getattr(link, "verify_message", None) or text
            if "Hostname mismatch" in text or "hostname" in str(reason).lower():
                return (
                    f"the certificate presented by {host} does not name {host} ({reason}): "
                    "connect by a name the certificate holds (its subjectAltName), or have the "
                    "certificate reissued for this name"
                )
            if any(word in str(reason) for word in _UNTRUSTED):
                return (
                    f"the certificate presented by {host} is not trusted ({reason}): set {ca_key} "
                    "to the PEM file of the CA that signed it (leaving "
                    f"{verify_key} on)"
                )
            return f"the certificate presented by {host} failed verification ({reason})"
        if isinstance(link, ssl.SSLError):
            return f"the TLS handshake with {host} failed ({text})"
    return None
