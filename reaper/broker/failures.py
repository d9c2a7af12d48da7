"""What a failure at the management API means, in words a person can act on.

What a failure at the management API means, in words a person can act on, each with its
fix: a name that does not resolve, a certificate not trusted, the AMQP port given for the
management API, TLS spoken to a plain-http port, the broker's own reason. Pure: no httpx here
(:mod:`reaper.broker.http` turns the driver's failures into these words)."""

from __future__ import annotations

import html
import socket
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

from reaper.broker.bounded import decoded
from reaper.core.tls import tls_words

__all__ = ["connect_words", "not_http_words", "reason_words", "tags_fix"]

#: Ports RabbitMQ speaks AMQP on by default (plain, TLS): never the management API's.
_AMQP_PORTS: Final = frozenset({5672, 5671})
#: How the resolver says a name does not exist (glibc, musl, macOS).
_UNRESOLVED: Final = ("name or service not known", "nodename nor servname", "no address")


def tags_fix(username: str) -> str:
    """What to do about a user whose tags do not allow the reaper's requests."""
    return (
        "add the 'monitoring' tag (and 'policymaker' to write policies): "
        f"rabbitmqctl set_user_tags {username} monitoring policymaker"
    )


def connect_words(exc: BaseException, url: str) -> str:
    """Why a connection was not made, with the fix."""
    parts = urlsplit(url)
    host = parts.hostname or url
    tls = tls_words(exc, host=host, ca_key="bus.ca_file", verify_key="bus.verify")
    if tls is not None:
        return tls
    link: BaseException | None = exc
    while link is not None:
        if isinstance(link, socket.gaierror) or any(
            word in str(link).lower() for word in _UNRESOLVED
        ):
            return (
                f"the name {host!r} does not resolve ({link}): check the host in the "
                "management URL and this machine's DNS"
            )
        link = link.__cause__ or link.__context__
    return (
        f"connection refused or unreachable ({exc or type(exc).__name__}): is the broker "
        "running and the management plugin enabled on that port?"
    )


def not_http_words(exc: BaseException, url: str) -> str | None:
    """When a connection broke before any HTTP answer: what is likely listening instead."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    text = str(exc)
    if port in _AMQP_PORTS:
        return (
            f"closed the connection without an HTTP answer: port {port} is RabbitMQ's AMQP "
            "port, not the management API's; use the management plugin's port (15672 for "
            "http, 15671 for https)"
        )
    link: BaseException | None = exc
    while link is not None:
        if isinstance(link, ConnectionResetError):
            return (
                f"closed the connection without an HTTP answer: port {port} may be an AMQP "
                "port rather than the management API's; use the management plugin's port "
                "(15672 for http, 15671 for https by default)"
            )
        link = link.__cause__ or link.__context__
    if parts.scheme == "http" and "illegal" in text.lower():
        return f"did not answer in HTTP ({text}): port {port} may serve TLS; use https:// for it"
    return None


def reason_words(kept: bytes) -> str:
    """The broker's own words for an error in an answer's body as kept
    (:mod:`reaper.broker.bounded`), on one line, prefixed ``": "`` (or empty)."""
    try:
        body = decoded(kept)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(body, Mapping):
        return ""
    text = body.get("reason") or body.get("error") or ""
    if not isinstance(text, str):
        text = str(text)
    text = " ".join(html.unescape(text).split())
    return f": {text[:300]}" if text else ""
