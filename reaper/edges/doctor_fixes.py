"""The fix on each failing ``reaper doctor`` line, for the situation its reason names.

The fix on each failing ``reaper doctor`` line, for the situation its reason names: a
PostgreSQL that refuses, does not answer, has no such database or role, or lacks the schema;
a management API that cannot be reached, refuses the user, or does not trust its certificate.
Each says what to do and where, never "see the reason"; the last rule of each is what works
whatever the reason (correct the configured address)."""

from __future__ import annotations

from urllib.parse import urlsplit

from reaper.broker.http import tags_fix

__all__ = ["broker_fix", "database_fix", "vhost_fix"]


def database_fix(reason: str, dsn: str) -> str:
    """What to do about a PostgreSQL that failed as ``reason`` says, at ``dsn``."""
    parts = urlsplit(dsn)
    host, port = parts.hostname or "localhost", parts.port or 5432
    name = parts.path.lstrip("/") or "postgres"
    where = f"{host}:{port}"
    lowered = reason.lower()
    if "connection refused" in lowered:
        return (
            f"start PostgreSQL on {where} (systemctl start postgresql), or set [database] dsn "
            "(REAPER_DATABASE__DSN) to the server that runs"
        )
    if "no answer within" in lowered or "resolve" in lowered:
        return f"make {where} reachable from this host (DNS, firewall), or correct [database] dsn"
    if "authentication failed" in lowered:
        return (
            "give the DSN's role its password in [database] password_file (or "
            "REAPER_DATABASE__PASSWORD), or name a role that exists in [database] dsn"
        )
    if "does not exist: create it" in lowered:
        return (
            f"createdb -h {host} -p {port} {name} (as its owner), then reaper db migrate; "
            "or set [database] dsn to the database that holds the job queue"
        )
    if "schema is missing" in lowered:
        return "run `reaper db migrate` as the tables' owner (online: it never holds a long lock)"
    if "reaper db grants" in reason:
        return f"run `reaper db grants {parts.username or 'ROLE'} --apply` as the tables' owner"
    if "certificate" in lowered or "ssl" in lowered or "tls" in lowered:
        return (
            "set sslmode and sslrootcert in [database] dsn to match the server's TLS (the "
            "reason names the mismatch)"
        )
    return f"correct [database] dsn (now {where}/{name}) or the server it names, then rerun"


def broker_fix(reason: str, url: str, user: str) -> str:
    """What to do about a management API at ``url`` that failed as ``reason`` says."""
    lowered = reason.lower()
    if "could not be reached" in lowered or "refused" in lowered:
        return (
            f"start the broker's management plugin on {url} (rabbitmq-plugins enable "
            "rabbitmq_management), or set bus.management_url to the URL that answers"
        )
    if "401" in reason or "credentials" in lowered or "authenticat" in lowered:
        return (
            f"set bus.username ({user!r}) and bus.password (REAPER_BUS__PASSWORD) to a user "
            "of this broker: rabbitmqctl authenticate_user NAME PASSWORD checks them"
        )
    if "certificate" in lowered or "tls" in lowered or "ssl" in lowered:
        return (
            "set bus.ca_file to the CA that signed the management API's certificate (and "
            "remove bus.verify = false)"
        )
    if "monitoring" in lowered or "403" in reason:
        return tags_fix(user)
    return f"make {url} answer GET /api/overview, or set bus.management_url to one that does"


def vhost_fix(vhost: str) -> str:
    """What to do about a vhost that does not exist: point at one that does, or create it."""
    return (
        f"set bus.vhost (REAPER_BUS__VHOST) to the vhost that holds the owned queues "
        f"(rabbitmqctl list_vhosts), or create it: rabbitmqctl add_vhost {vhost}"
    )
