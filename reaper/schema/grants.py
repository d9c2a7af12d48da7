"""The least privileges the reaper needs in PostgreSQL.

The least privileges the reaper needs in PostgreSQL (SPEC §10): each table it reads or
writes, what it does there and why, as ``GRANT`` statements (``reaper db grants ROLE``) and as
the checks ``reaper doctor`` makes (``has_table_privilege``).

Nothing more is granted: no DELETE on the ledger (``event``) or on any host table, no
TRUNCATE, no DDL. The schema itself is the owner's: ``reaper db migrate`` runs as the owner,
and the reaper's everyday role needs only these. ``SELECT ... FOR UPDATE`` needs UPDATE on the
table it locks, and ``INSERT ... ON CONFLICT DO UPDATE`` needs UPDATE too: both are counted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from reaper.errors import StoreUnavailable
from reaper.jobqueue.database import Database
from reaper.schema.sql import GRANTS

__all__ = ["NEEDED", "Grant", "Privilege", "TableNeed", "grants_for", "privileges_held"]


@dataclass(frozen=True)
class TableNeed:
    """One table, the privileges the reaper needs on it, and why."""

    table: str
    privileges: tuple[str, ...]
    why: str
    #: Present only where the host dispatches through an outbox.
    optional: bool = False


NEEDED: Final = (
    TableNeed(
        "job",
        ("SELECT", "INSERT", "UPDATE"),
        "reads leases and ready work; requeues and parks (UPDATE, row locks); a parked dead "
        "letter becomes a job (INSERT)",
    ),
    TableNeed("job_dependency", ("SELECT",), "a job is claimable once its dependencies succeeded"),
    TableNeed(
        "human_gate",
        ("SELECT", "INSERT", "UPDATE"),
        "opens a gate for what waits for a person; an answer closes it",
    ),
    TableNeed(
        "event",
        ("SELECT", "INSERT"),
        "the ledger: appended to, never updated or deleted (the database refuses both too)",
    ),
    TableNeed(
        "dead_letter",
        ("SELECT", "INSERT", "UPDATE"),
        "each parked dead letter once, by its identity; a replay or dismissal settles it",
    ),
    TableNeed(
        "reaper_open_sighting",
        ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "which surfaced conditions are open: opened, refreshed, closed when they clear",
    ),
    TableNeed(
        "reaper_observation",
        ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "what is measured across passes (a consumer holding deliveries); forgotten when gone",
    ),
    TableNeed(
        "reaper_quiet_mark",
        ("SELECT", "INSERT", "UPDATE"),
        "what an owned dead-letter queue showed when its letters were last found parked, so "
        "a quiet pass need not fetch them",
    ),
    TableNeed(
        "reaper_turn", ("SELECT", "INSERT", "UPDATE"), "the fleet's turn: one pass per interval"
    ),
    TableNeed("reaper_migration", ("SELECT",), "which migrations are applied (reaper doctor)"),
    TableNeed(
        "job_outbox",
        ("SELECT", "INSERT"),
        "outbox dispatch: a requeue or an answer writes the dispatch row",
        optional=True,
    ),
)

_PLAIN_ROLE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_$-]{0,62}$")


def quote_ident(name: str) -> str:
    """A PostgreSQL identifier, double-quoted."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Privilege:
    """One privilege on one object: ``table``, ``sequence`` or ``schema``."""

    kind: str
    object: str
    privilege: str
    why: str


@dataclass(frozen=True)
class Grant:
    """One ``GRANT`` statement and why it is needed."""

    statement: str
    why: str
    privileges: tuple[Privilege, ...]


def check_role(role: str) -> str:
    """The role name, refused when it is not a plain one (the statements quote it anyway)."""
    if not _PLAIN_ROLE.match(role):
        raise ValueError(f"not a plain role name (letters, digits, _ $ -, at most 63): {role!r}")
    return role


async def grants_for(database: Database, role: str) -> list[Grant]:
    """The GRANTs that give ``role`` exactly what the reaper needs in this database (an
    optional table that is absent is left out)."""
    check_role(role)
    who = quote_ident(role)
    async with database.session("reading which tables the reaper needs") as conn:
        rows = await conn.fetch(GRANTS["grant_tables"], [n.table for n in NEEDED])
    found = {r["name"]: r for r in rows}
    missing = [n.table for n in NEEDED if not n.optional and not found[n.table]["present"]]
    if missing:
        raise StoreUnavailable(
            f"PostgreSQL at {database.where} has no {', '.join(missing)}: the schema is "
            "missing or old, run `reaper db migrate` (as the tables' owner) first"
        )
    grants: list[Grant] = []
    schemas = sorted({r["schema"] for r in rows if r["present"]})
    for schema in schemas:
        grants.append(
            Grant(
                f"GRANT USAGE ON SCHEMA {quote_ident(schema)} TO {who};",
                "to reach the tables in it",
                (Privilege("schema", schema, "USAGE", "to reach the tables in it"),),
            )
        )
    for need in NEEDED:
        row = found[need.table]
        if not row["present"]:
            continue
        table = f"{quote_ident(row['schema'])}.{quote_ident(need.table)}"
        grants.append(
            Grant(
                f"GRANT {', '.join(need.privileges)} ON TABLE {table} TO {who};",
                need.why,
                tuple(
                    Privilege("table", f"{row['schema']}.{need.table}", p, need.why)
                    for p in need.privileges
                ),
            )
        )
        if "INSERT" not in need.privileges:
            continue
        for sequence, schema in zip(row["sequences"], row["sequence_schemas"], strict=True):
            why = f"{need.table}'s ids (INSERT draws from it)"
            grants.append(
                Grant(
                    f"GRANT USAGE ON SEQUENCE {quote_ident(schema)}.{quote_ident(sequence)} "
                    f"TO {who};",
                    why,
                    (Privilege("sequence", f"{schema}.{sequence}", "USAGE", why),),
                )
            )
    return grants


async def role_exists(database: Database, role: str) -> bool:
    async with database.session("looking the role up") as conn:
        return bool(await conn.fetchval(GRANTS["role_exists"], role))


async def apply_grants(database: Database, grants: Sequence[Grant]) -> None:
    """Run every GRANT in one transaction: all of them or none."""
    async with database.session("granting the reaper's privileges") as conn, conn.transaction():
        for grant in grants:
            await conn.execute(grant.statement)


async def privileges_held(
    database: Database, role: str, privileges: Sequence[Privilege]
) -> list[tuple[Privilege, bool]]:
    """Whether ``role`` holds each privilege, as PostgreSQL's ``has_*_privilege`` says."""
    async with database.session("checking the reaper's privileges") as conn:
        rows = await conn.fetch(
            GRANTS["privileges_held"],
            role,
            [p.object for p in privileges],
            [p.kind for p in privileges],
            [p.privilege for p in privileges],
        )
    return [(p, bool(r["held"])) for p, r in zip(privileges, rows, strict=True)]
