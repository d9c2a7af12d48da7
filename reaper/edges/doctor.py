"""``reaper doctor``: every precondition of a pass checked, one line each with the fix.

``reaper doctor``: every precondition of a pass checked, one line each with the fix
(SPEC §10). Exit 0 when all pass, 1 otherwise; ``--json`` for machines.

The checks: the configuration; PostgreSQL reachable, TLS as configured, the schema present and
current, each privilege the reaper needs held (``has_table_privilege``), the clock skew between
the database and this host; every management URL reachable (and its TLS), the vhost, the user's
tags and vhost permissions, the right to write policies, every node loading the broker's conf.d
snippet; the dispatch mode. The failure words are the seams' own, so a pass and the doctor say
the same thing.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from reaper.broker.capabilities import capabilities_for, product_and_version
from reaper.broker.client import ManagementClient
from reaper.broker.http import BrokerTls, api_path, tags_fix
from reaper.config import LoadedConfig, Settings
from reaper.core.domain import BrokerFacts
from reaper.core.enforcement import TimeoutSetting
from reaper.edges import colour
from reaper.edges.commands import dispatch_of
from reaper.edges.doctor_fixes import broker_fix, database_fix, vhost_fix
from reaper.edges.doctor_vhost import owned_queues
from reaper.edges.production import open_database
from reaper.errors import BrokerUnavailable, ReaperError
from reaper.jobqueue.database import Database
from reaper.jobqueue.health import session_facts
from reaper.schema.catalog import applied_migrations
from reaper.schema.grants import grants_for, privileges_held
from reaper.schema.steps import shipped_migrations

__all__ = ["Check", "checks", "reachable", "run", "snippet_check"]

#: The broker's conf.d snippet every node must load (the broker-wide consumer timeout).
SNIPPET: Final = "20-vibey-reap.conf"
#: More than this between the database's clock and this host's is a finding.
MAX_SKEW_SECONDS: Final = 5.0
_LOOPBACK: Final = frozenset({"localhost", "127.0.0.1", "::1", ""})

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """One check: what was checked, how it fared, what was seen, and the fix."""

    name: str
    status: Status
    detail: str
    #: What to do: never empty on a check that is not ok (the doctor's own test holds it).
    fix: str = ""


async def run(loaded: LoadedConfig, *, output: str = "text") -> int:
    found = await checks(loaded)
    ok = all(c.status != "fail" for c in found)
    if output == "json":
        print(json.dumps({"ok": ok, "checks": [asdict(c) for c in found]}, indent=2))
    else:
        for check in found:
            word = colour.standing(check.status.upper(), sys.stdout)
            line = f"{word}{' ' * (6 - len(check.status))}{check.name}: {check.detail}"
            print(line if output == "wide" or not check.fix else f"{line} -> fix: {check.fix}")
            if output == "wide" and check.fix:
                print(f"      fix: {check.fix}")
        failed = sum(1 for c in found if c.status == "fail")
        print(f"doctor: {len(found)} checks, {failed} failed" + ("" if failed else ": ready"))
    return 0 if ok else 1


async def checks(loaded: LoadedConfig) -> list[Check]:
    settings = loaded.settings
    where = str(loaded.config_dir) if loaded.config_dir else "the environment only"
    found = [Check("configuration", "ok", f"valid ({len(loaded.files)} file(s) from {where})")]
    if (warning := settings.bus.tls_warning()) is not None:
        found.append(Check("configuration", "warn", warning, broker_fix("tls", "", "")))
    found.extend(await _database(loaded))
    for url in settings.bus.urls_in_force():
        found.extend(await _broker(loaded, url))
    in_force, why = await dispatch_of(loaded)
    found.append(
        Check("dispatch", "ok", f"{in_force} ({why})")
        if in_force is not None
        else Check(
            "dispatch", "fail", why, "fix the postgresql line above: the dispatch is read there"
        )
    )
    return found


# --------------------------------------------------------------------------- PostgreSQL


async def _database(loaded: LoadedConfig) -> list[Check]:
    db = loaded.settings.database
    dsn = db.dsn_in_force()
    try:
        database = await open_database(loaded)
    except ReaperError as exc:
        return [Check("postgresql", "fail", exc.reason, database_fix(exc.reason, dsn))]
    try:
        return await _database_checks(database, db.tls(), dsn)
    finally:
        await database.close()


async def _database_checks(database: Database, tls: dict[str, str], dsn: str) -> list[Check]:
    found: list[Check] = []
    try:
        facts = await session_facts(database)
    except ReaperError as exc:
        return [Check("postgresql", "fail", exc.reason, database_fix(exc.reason, dsn))]
    found.append(
        Check(
            "postgresql",
            "ok",
            f"reachable at {database.where} as {facts.role} (PostgreSQL {facts.version})",
        )
    )
    found.append(_database_tls(database.where, facts.ssl, facts.tls_version, tls))
    found.extend(await _schema(database, facts.recorded, dsn))
    found.append(await _privileges(database, facts.role, dsn))
    skew = facts.now.timestamp() - time.time()
    if abs(skew) <= MAX_SKEW_SECONDS:
        found.append(
            Check("clock", "ok", f"the database's clock and this host's differ by {skew:+.1f} s")
        )
    else:
        found.append(
            Check(
                "clock",
                "fail",
                f"the database's clock is {skew:+.1f} s from this host's (more than "
                f"{MAX_SKEW_SECONDS:g} s): the database's decides every judgement, this host's "
                "stamps the metrics and logs",
                "keep both in time with NTP (chrony or systemd-timesyncd)",
            )
        )
    return found


def _database_tls(where: str, ssl: bool, version: str | None, tls: dict[str, str]) -> Check:
    mode = tls.get("sslmode")
    host = where.split(":", 1)[0]
    if ssl:
        verified = {
            "verify-full": "the CA and the host name verified",
            "verify-ca": "the CA verified, not the host name",
        }.get(mode or "", "encrypted, the certificate NOT verified")
        status: Status = "ok" if mode == "verify-full" else "warn"
        fix = "" if status == "ok" else "set sslmode=verify-full and sslrootcert to the CA"
        return Check(
            "postgresql tls", status, f"{version}, sslmode={mode or 'prefer'}: {verified}", fix
        )
    if host in _LOOPBACK:
        return Check("postgresql tls", "ok", f"not encrypted, on loopback ({host})")
    return Check(
        "postgresql tls",
        "warn",
        f"not encrypted to {host} (sslmode={mode or 'prefer'})",
        "set sslmode=verify-full and sslrootcert (in the DSN or [database])",
    )


async def _schema(database: Database, recorded: bool, dsn: str) -> list[Check]:
    fix = "run `reaper db migrate` as the tables' owner (online: it never holds a long lock)"
    if not recorded:
        return [
            Check("schema", "fail", "no reaper_migration table: the schema is not installed", fix)
        ]
    try:
        applied = await applied_migrations(database)
    except ReaperError as exc:
        return [Check("schema", "fail", exc.reason, database_fix(exc.reason, dsn))]
    missing = [name for name in shipped_migrations() if name not in applied]
    if missing:
        return [
            Check(
                "schema",
                "fail",
                f"{len(missing)} migration(s) not applied: {', '.join(missing)}",
                fix,
            )
        ]
    return [Check("schema", "ok", f"current ({len(applied)} migrations applied)")]


async def _privileges(database: Database, role: str, dsn: str) -> Check:
    try:
        needed = [p for g in await grants_for(database, role) for p in g.privileges]
        held = await privileges_held(database, role, needed)
    except ReaperError as exc:
        return Check("privileges", "fail", exc.reason, database_fix(exc.reason, dsn))
    lacking = [f"{p.privilege} on {p.object}" for p, ok in held if not ok]
    if lacking:
        return Check(
            "privileges",
            "fail",
            f"{role} lacks {len(lacking)} of {len(held)}: {', '.join(lacking)}",
            f"reaper db grants {role} --apply (as the tables' owner)",
        )
    return Check("privileges", "ok", f"{role} holds all {len(held)} the reaper needs")


# --------------------------------------------------------------------------- the broker


async def _broker(loaded: LoadedConfig, url: str) -> list[Check]:
    bus = loaded.settings.bus
    client = ManagementClient(
        url,
        bus.username,
        bus.password.get_secret_value(),
        vhost=bus.vhost,
        timeout_seconds=bus.timeout_seconds,
        tls=BrokerTls(bus.ca_file, bus.client_cert_file, bus.client_key_file, bus.verify),
    )
    name = f"broker {url}"
    try:
        return await _broker_checks(client, name, url, loaded.settings)
    finally:
        await client.aclose()


async def _get(
    client: ManagementClient, path: str, params: dict[str, str | int] | None = None
) -> Any:
    return await client.api.request("GET", path, params=params)


async def _broker_checks(
    client: ManagementClient, name: str, url: str, settings: Settings
) -> list[Check]:
    user, vhost, verify = settings.bus.username, settings.bus.vhost, settings.bus.verify
    try:
        overview = await _get(client, "/api/overview")
    except ReaperError as exc:
        return [Check(name, "fail", exc.reason, broker_fix(exc.reason, url, user))]
    listed = overview if isinstance(overview, dict) else {}
    facts = capabilities_for(*product_and_version(listed))
    found = [reachable(name, listed)]
    host = urlsplit(url).hostname or ""
    if url.startswith("https:"):
        how = "certificate and name verified" if verify else "certificate NOT verified"
        fix = "" if verify else "set bus.ca_file to the CA that signed it and remove bus.verify"
        found.append(Check(f"{name} tls", "ok" if verify else "warn", how, fix))
    elif host not in _LOOPBACK:
        found.append(
            Check(
                f"{name} tls",
                "warn",
                f"plain http to {host}: the password crosses the network",
                "serve the management API over https (RabbitMQ: management.ssl.*) and use https://",
            )
        )
    try:
        # The pass's own first request of the vhost (an administrator alone may read
        # /api/vhosts/NAME), so a missing vhost is said in the pass's words.
        await _get(
            client, api_path("queues", vhost), {"page": 1, "page_size": 1, "columns": "name"}
        )
        found.append(Check(f"{name} vhost", "ok", f"{vhost!r} exists"))
        found.append(Check(f"{name} queues", *await owned_queues(client, settings)))
    except BrokerUnavailable as exc:
        if exc.status != 404:
            found.append(
                Check(f"{name} vhost", "fail", exc.reason, broker_fix(exc.reason, url, user))
            )
        else:  # the user's permissions on it are checked once it exists
            said = f"{vhost!r} does not exist on this broker (the permissions of {user!r} on "
            found.append(
                Check(
                    f"{name} vhost", "fail", f"{said}it are checked once it does)", vhost_fix(vhost)
                )
            )
            vhost = ""
    found.extend(await _user(client, name, user, vhost, url))
    found.append(await _snippet(client, name, facts, user))
    return found


def reachable(name: str, overview: dict[str, Any]) -> Check:
    """The product and version ``GET /api/overview`` names (LavinMQ: ``lavinmq_version``)."""
    product, version = product_and_version(overview)
    return Check(name, "ok", f"reachable, {product} {version}")


async def _user(
    client: ManagementClient, name: str, user: str, vhost: str, url: str
) -> list[Check]:
    try:
        whoami = await _get(client, "/api/whoami")
    except ReaperError as exc:
        return [Check(f"{name} user", "fail", exc.reason, broker_fix(exc.reason, url, user))]
    tags = whoami.get("tags") or []
    tags = tags.split(",") if isinstance(tags, str) else list(tags)
    reads = {"monitoring", "administrator"} & set(tags)
    writes = {"policymaker", "administrator"} & set(tags)
    shown = ", ".join(tags) or "none"
    found = [
        Check(f"{name} tags", "ok", f"{user!r} has {shown}: reads queues, nodes and channels")
        if reads
        else Check(
            f"{name} tags",
            "fail",
            f"{user!r} has {shown}, not 'monitoring': the pass cannot read nodes, channels or "
            "every queue",
            tags_fix(user),
        ),
        Check(
            f"{name} policies", "ok", f"{user!r} may write policies ({', '.join(sorted(writes))})"
        )
        if writes
        else Check(
            f"{name} policies",
            "fail",
            f"{user!r} has no 'policymaker' tag: every policy write will be refused",
            tags_fix(user),
        ),
    ]
    if vhost:  # "": it does not exist, said on its own line
        found.append(await _permissions(client, name, user, vhost, admin="administrator" in tags))
    return found


async def _permissions(
    client: ManagementClient, name: str, user: str, vhost: str, *, admin: bool
) -> Check:
    fix = (
        f"rabbitmqctl set_permissions -p {vhost} {user} '^$' '^amq\\.default$' '.*' "
        "(read: every queue; write: the default exchange, for replays)"
    )
    try:
        permissions = await _get(client, api_path("permissions", vhost, user))
    except BrokerUnavailable as exc:
        if exc.status == 404:
            return Check(
                f"{name} permissions", "fail", f"{user!r} has no permissions on {vhost!r}", fix
            )
        if admin or exc.status not in (401, 403):
            return Check(f"{name} permissions", "fail", exc.reason, fix)
        visible = await _get(client, "/api/vhosts")
        if vhost in {v.get("name") for v in visible}:
            return Check(
                f"{name} permissions",
                "ok",
                f"{user!r} has permissions on {vhost!r} (their patterns are shown only to an "
                "administrator)",
            )
        return Check(
            f"{name} permissions", "fail", f"{user!r} has no permissions on {vhost!r}", fix
        )
    read, write = permissions.get("read", ""), permissions.get("write", "")
    detail = (
        f"on {vhost!r}: read {read!r}, write {write!r}, configure {permissions.get('configure')!r}"
    )
    if not read:
        return Check(f"{name} permissions", "fail", f"{detail}: dead letters cannot be read", fix)
    if not write:
        return Check(f"{name} permissions", "warn", f"{detail}: a replay cannot publish", fix)
    return Check(f"{name} permissions", "ok", detail)


async def _snippet(client: ManagementClient, name: str, facts: BrokerFacts, user: str) -> Check:
    if _snippet_not_needed(facts) is not None:
        return snippet_check(name, [], facts)  # no node need be asked
    try:
        nodes = await _get(client, "/api/nodes", {"memory": "false", "binary": "false"})
    except ReaperError as exc:  # the user may not read the nodes: the fix is the tag
        return Check(f"{name} conf.d", "fail", f"not checked: {exc.reason}", tags_fix(user))
    return snippet_check(name, nodes, facts)


def snippet_check(name: str, nodes: Any, facts: BrokerFacts) -> Check:
    """Whether every node loaded the conf.d snippet (the broker-wide consumer timeout), where
    the version enforces that value on some queue type; where it enforces it on none (LavinMQ
    2.9 enforces only the queue argument x-consumer-timeout), the snippet bounds nothing and is
    not asked for: the pass finds each owned queue declared without the argument."""
    not_needed = _snippet_not_needed(facts)
    if not_needed is not None:
        return Check(f"{name} conf.d", "ok", not_needed)
    fix = (
        f"install conf.d/rabbitmq/{SNIPPET} as /etc/rabbitmq/conf.d/{SNIPPET} on each node and "
        "restart it (read at boot only)"
    )
    listed = nodes if isinstance(nodes, list) else []
    lacking = [
        str(n.get("name"))
        for n in listed
        if not any(str(f).endswith(f"/{SNIPPET}") for f in n.get("config_files") or [])
    ]
    if lacking:
        return Check(
            f"{name} conf.d",
            "fail",
            f"{len(lacking)} of {len(listed)} node(s) did not load {SNIPPET}: {', '.join(lacking)}",
            fix,
        )
    return Check(f"{name} conf.d", "ok", f"every node ({len(listed)}) loaded {SNIPPET}")


def _snippet_not_needed(facts: BrokerFacts) -> str | None:
    """Why the snippet is not needed on this version: it enforces the broker-wide consumer
    timeout on no queue type, as measured with real consumers. None where it does, or where
    nothing was measured (an unpinned version keeps the check)."""
    enforcement = facts.consumer_timeout_enforcement
    if not enforcement or any(e.enforces(TimeoutSetting.BROKER_WIDE) for e in enforcement):
        return None
    enforced = {s for e in enforcement for s in e.enforced}
    named = [_SETTING_NAMES[s] for s in TimeoutSetting if s in enforced]
    only = f"only {' and '.join(named)}" if named else "no consumer timeout at all"
    return (
        f"not needed: {facts.name} enforces no broker-wide consumer_timeout, {only}; each "
        "pass checks every owned queue's own bound (one without it is an unbounded finding)"
    )


_SETTING_NAMES: Final = {
    TimeoutSetting.POLICY: "the policy key consumer-timeout",
    TimeoutSetting.ARGUMENT: "the queue argument x-consumer-timeout",
    TimeoutSetting.BROKER_WIDE: "the broker-wide consumer_timeout",
}
