"""Least privileges (SPEC §10): ``reaper db grants ROLE`` prints exactly the GRANTs the reaper
needs; a whole pass runs as a role holding only those (``--apply``), on one broker version,
and that role can neither UPDATE nor DELETE a ledger row: PostgreSQL refuses it for want of
the privilege, before the ledger's own trigger is reached."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.support.accounts import README_PERMISSIONS, README_TAGS, login_role
from tests.support.accounts import broker_user as readme_user
from tests.support.cli import (
    Seeded,
    assert_ok_but_for_what_the_version_does_not_enforce,
    event_count,
    run_cli,
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


def as_role(dsn: str, role: str) -> str:
    return dsn.replace("postgresql://postgres@", f"postgresql://{role}@", 1)


@pytest.fixture
def broker_user(broker: BrokerUnderTest) -> Iterator[tuple[str, str]]:
    """A management user with only the tags and vhost permissions the README lists."""
    with readme_user(broker, "qr-reaper", README_TAGS, README_PERMISSIONS) as name_and_password:
        yield name_and_password


@pytest.fixture
async def role(pg_dsn: str) -> AsyncIterator[str]:
    """A login role of this test's own, holding nothing; dropped afterwards."""
    async with login_role(pg_dsn, "qr_reaper") as name:
        yield name


async def test_the_grants_printed_are_exactly_what_is_needed(
    pg_dsn: str,
    role: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"REAPER_DATABASE__DSN": pg_dsn}
    assert await run_cli(monkeypatch, tmp_path, env, "db", "grants", role) == 0
    lines = capsys.readouterr().out.splitlines()
    statements = [line.split("  -- ")[0] for line in lines if line.startswith("GRANT")]
    assert statements == [g.format(role=role) for g in EXPECTED_GRANTS]
    # Printing grants nothing.
    held = await query(pg_dsn, "SELECT has_table_privilege($1, 'event', 'INSERT') AS insert", role)
    assert held[0]["insert"] is False


@on_one_broker  # the privileges are PostgreSQL's
async def test_a_whole_pass_runs_as_the_least_privileged_role(
    pg_dsn: str,
    broker: BrokerUnderTest,
    role: str,
    broker_user: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seeded: Seeded = await seed_scenario(pg_dsn, broker)
    code = await run_cli(
        monkeypatch, tmp_path, {"REAPER_DATABASE__DSN": pg_dsn}, "db", "grants", role, "--apply"
    )
    assert code == 0, capsys.readouterr()
    assert f"granted {role} the {len(EXPECTED_GRANTS)} privileges" in capsys.readouterr().out

    env = {
        **seeded.env,
        "REAPER_DATABASE__DSN": as_role(pg_dsn, role),
        "REAPER_BUS__USERNAME": broker_user[0],
        "REAPER_BUS__PASSWORD": broker_user[1],
    }
    code = await run_cli(monkeypatch, tmp_path, env, "reap", "--json")
    report = json.loads(capsys.readouterr().out)
    assert_ok_but_for_what_the_version_does_not_enforce(code, report, broker)
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
        code = await run_cli(
            monkeypatch, tmp_path, env, "gates", "answer", gate["id"], "--choice", "replay"
        )
        out = capsys.readouterr()
        if code == 0:
            assert "answered 'replay'" in out.out and "published to" in out.out
            replayed += 1
            break
        assert "permission" not in (out.out + out.err).lower(), out
    assert replayed == 1
    events = await event_count(pg_dsn)

    # The same role cannot rewrite or remove the ledger: no privilege to (42501).
    conn = await asyncpg.connect(as_role(pg_dsn, role))
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


async def test_apply_names_a_role_that_does_not_exist(
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"REAPER_DATABASE__DSN": pg_dsn}
    code = await run_cli(monkeypatch, tmp_path, env, "db", "grants", "qr_nobody_here", "--apply")
    assert code == 1
    assert "role 'qr_nobody_here' does not exist" in capsys.readouterr().err


@on_one_broker  # the privileges are PostgreSQL's
async def test_outbox_dispatch_adds_the_outbox_and_its_sequence(
    pg_dsn: str,
    broker: BrokerUnderTest,
    role: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Where the host dispatches through an outbox, a requeue writes a ``job_outbox`` row: the
    grants add the outbox and its id sequence, and a pass runs with them."""
    env = {"REAPER_DATABASE__DSN": pg_dsn}
    assert await run_cli(monkeypatch, tmp_path, env, "db", "migrate", "--outbox") == 0
    capsys.readouterr()
    assert await run_cli(monkeypatch, tmp_path, env, "db", "grants", role) == 0
    statements = [
        line.split("  -- ")[0]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("GRANT")
    ]
    assert statements == [
        *(g.format(role=role) for g in EXPECTED_GRANTS),
        f'GRANT SELECT, INSERT ON TABLE "public"."job_outbox" TO "{role}";',
        f'GRANT USAGE ON SEQUENCE "public"."job_outbox_id_seq" TO "{role}";',
    ]
    seeded = await seed_scenario(pg_dsn, broker)
    assert await run_cli(monkeypatch, tmp_path, env, "db", "grants", role, "--apply") == 0
    capsys.readouterr()
    env = {**seeded.env, "REAPER_DATABASE__DSN": as_role(pg_dsn, role)}
    code = await run_cli(monkeypatch, tmp_path, env, "reap", "--json")
    report = json.loads(capsys.readouterr().out)
    assert_ok_but_for_what_the_version_does_not_enforce(code, report, broker)
    requeued = verdicts(report, condition="lease_expired", action="requeue")
    assert {v["object"] for v in requeued} == seeded.scenario.expected.requeued
    rows = await query(pg_dsn, "SELECT job_id::text AS job FROM job_outbox")
    assert {r["job"] for r in rows} >= seeded.scenario.expected.requeued


@on_one_broker  # the privileges are PostgreSQL's
async def test_a_read_only_role_is_told_which_command_grants_the_rest(
    pg_dsn: str,
    broker: BrokerUnderTest,
    role: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seeded = await seed_scenario(pg_dsn, broker)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    finally:
        await conn.close()
    env = {**seeded.env, "REAPER_DATABASE__DSN": as_role(pg_dsn, role)}
    code = await run_cli(monkeypatch, tmp_path, env, "reap")
    out = capsys.readouterr().out
    assert code == 1
    assert "permission denied" in out
    assert f"run `reaper db grants {role} --apply` as the tables' owner" in out
