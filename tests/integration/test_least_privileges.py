"""Least privileges (SPEC §10): ``reaper db grants ROLE`` prints exactly the GRANTs the reaper
needs; a whole pass runs as a role holding only those (``--apply``), on one broker version,
and that role can neither UPDATE nor DELETE a ledger row: PostgreSQL refuses it for want of
the privilege, before the ledger's own trigger is reached."""

from __future__ import annotations

import json

import asyncpg
import pytest

from tests.support.accounts import as_role
from tests.support.cli import (
    Cli,
    Seeded,
    assert_ok_but_for_what_the_version_does_not_enforce,
    event_count,
    seed_scenario,
    verdicts,
)
from tests.support.services import BrokerUnderTest, on_one_broker
from tests.support.store import query

pytestmark = [pytest.mark.broker, pytest.mark.postgres]

#: What `reaper db grants` prints on the reaper's schema (polling dispatch), in order.
EXPECTED_GRANTS = [
    'GRANT USAGE ON SCHEMA "public" TO "{role}";',
    'GRANT SELECT, INSERT, UPDATE ON TABLE "public"."job" TO "{role}";',
    'GRANT SELECT ON TABLE "public"."job_dependency" TO "{role}";',
    'GRANT SELECT, INSERT, UPDATE ON TABLE "public"."human_gate" TO "{role}";',
    'GRANT SELECT, INSERT ON TABLE "public"."event" TO "{role}";',
    'GRANT SELECT, INSERT, UPDATE ON TABLE "public"."dead_letter" TO "{role}";',
    'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "public"."reaper_open_sighting" TO "{role}";',
    'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "public"."reaper_observation" TO "{role}";',
    'GRANT SELECT, INSERT, UPDATE ON TABLE "public"."reaper_quiet_mark" TO "{role}";',
    'GRANT SELECT, INSERT, UPDATE ON TABLE "public"."reaper_turn" TO "{role}";',
    'GRANT SELECT ON TABLE "public"."reaper_migration" TO "{role}";',
]


async def test_the_grants_printed_are_exactly_what_is_needed(
    pg_dsn: str,
    bare_role: str,
    cli: Cli,
) -> None:
    lines = (
        await cli.on({"REAPER_DATABASE__DSN": pg_dsn}).out("db", "grants", bare_role)
    ).splitlines()
    statements = [line.split("  -- ")[0] for line in lines if line.startswith("GRANT")]
    assert statements == [g.format(role=bare_role) for g in EXPECTED_GRANTS]
    # Printing grants nothing.
    held = await query(
        pg_dsn, "SELECT has_table_privilege($1, 'event', 'INSERT') AS insert", bare_role
    )
    assert held[0]["insert"] is False


@on_one_broker  # the privileges are PostgreSQL's
async def test_a_whole_pass_runs_as_the_least_privileged_role(
    pg_dsn: str,
    broker: BrokerUnderTest,
    bare_role: str,
    readme_user: tuple[str, str],
    cli: Cli,
) -> None:
    seeded: Seeded = await seed_scenario(pg_dsn, broker)
    said = await cli.on({"REAPER_DATABASE__DSN": pg_dsn})("db", "grants", bare_role, "--apply")
    assert said.code == 0, said
    assert f"granted {bare_role} the {len(EXPECTED_GRANTS)} privileges" in said.out

    env = {
        **seeded.env,
        "REAPER_DATABASE__DSN": as_role(pg_dsn, bare_role),
        "REAPER_BUS__USERNAME": readme_user[0],
        "REAPER_BUS__PASSWORD": readme_user[1],
    }
    cli = cli.on(env)
    said = await cli("reap", "--json")
    report = json.loads(said.out)
    assert_ok_but_for_what_the_version_does_not_enforce(said.code, report, broker)
    assert report["unreadable"] == []
    assert {p["action"] for p in report["policies"]} >= {"updated"}
    expected = seeded.scenario.expected
    assert {v["object"] for v in verdicts(report, condition="lease_expired", action="requeue")} == (
        expected.requeued
    )
    assert {v["object"] for v in verdicts(report, condition="poison", action="park")} == (
        expected.parked
    )
    parked = verdicts(report, condition="dead_letter", action="park")
    assert len(parked) == len(seeded.scenario.dead_letters)
    assert all(v["recorded"] for v in parked)
    recorded = sum(1 for v in report["verdicts"] if v["recorded"])
    assert recorded > 0 and await event_count(pg_dsn) == recorded

    # A replay, as that user and role: the one write it makes on the broker's default exchange.
    gates = await query(
        pg_dsn,
        "SELECT g.id::text AS id FROM human_gate AS g JOIN job AS j ON j.id = g.job_id "
        "WHERE g.kind = 'bus_dead_lettered' AND g.answer IS NULL ORDER BY g.id",
    )
    replayed = 0
    for gate in gates:
        out = await cli("gates", "answer", gate["id"], "--choice", "replay")
        if out.code == 0:
            assert "answered 'replay'" in out.out and "published to" in out.out
            replayed += 1
            break
        assert "permission" not in (out.out + out.err).lower(), out
    assert replayed == 1
    events = await event_count(pg_dsn)

    # The same role cannot rewrite or remove the ledger: no privilege to (42501).
    conn = await asyncpg.connect(as_role(pg_dsn, bare_role))
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await conn.execute("UPDATE event SET trusted = NOT trusted")
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await conn.execute("DELETE FROM event")
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await conn.execute("TRUNCATE event")
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await conn.execute("DELETE FROM job")
    finally:
        await conn.close()
    assert await event_count(pg_dsn) == events >= recorded


async def test_apply_names_a_role_that_does_not_exist(pg_dsn: str, cli: Cli) -> None:
    cli = cli.on({"REAPER_DATABASE__DSN": pg_dsn})
    err = await cli.err("db", "grants", "qr_nobody_here", "--apply", code=1)
    assert "role 'qr_nobody_here' does not exist" in err


@on_one_broker  # the privileges are PostgreSQL's
async def test_outbox_dispatch_adds_the_outbox_and_its_sequence(
    pg_dsn: str,
    broker: BrokerUnderTest,
    bare_role: str,
    cli: Cli,
) -> None:
    """Where the host dispatches through an outbox, a requeue writes a ``job_outbox`` row: the
    grants add the outbox and its id sequence, and a pass runs with them."""
    owner = cli.on({"REAPER_DATABASE__DSN": pg_dsn})
    await owner.out("db", "migrate", "--outbox")
    lines = (await owner.out("db", "grants", bare_role)).splitlines()
    statements = [line.split("  -- ")[0] for line in lines if line.startswith("GRANT")]
    assert statements == [
        *(g.format(role=bare_role) for g in EXPECTED_GRANTS),
        f'GRANT SELECT, INSERT ON TABLE "public"."job_outbox" TO "{bare_role}";',
        f'GRANT USAGE ON SEQUENCE "public"."job_outbox_id_seq" TO "{bare_role}";',
    ]
    seeded = await seed_scenario(pg_dsn, broker)
    await owner.out("db", "grants", bare_role, "--apply")
    said = await cli.on({**seeded.env, "REAPER_DATABASE__DSN": as_role(pg_dsn, bare_role)})(
        "reap", "--json"
    )
    report = json.loads(said.out)
    assert_ok_but_for_what_the_version_does_not_enforce(said.code, report, broker)
    requeued = verdicts(report, condition="lease_expired", action="requeue")
    assert {v["object"] for v in requeued} == seeded.scenario.expected.requeued
    rows = await query(pg_dsn, "SELECT job_id::text AS job FROM job_outbox")
    assert {r["job"] for r in rows} >= seeded.scenario.expected.requeued


@on_one_broker  # the privileges are PostgreSQL's
async def test_a_read_only_role_is_told_which_command_grants_the_rest(
    pg_dsn: str,
    broker: BrokerUnderTest,
    bare_role: str,
    cli: Cli,
) -> None:
    seeded = await seed_scenario(pg_dsn, broker)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{bare_role}"')
    finally:
        await conn.close()
    out = await cli.on({**seeded.env, "REAPER_DATABASE__DSN": as_role(pg_dsn, bare_role)}).out(
        "reap", code=1
    )
    assert "permission denied" in out
    assert f"run `reaper db grants {bare_role} --apply` as the tables' owner" in out
