"""``reaper doctor`` on the real services (SPEC §10): healthy on every broker version (exit 0),
and each broken set-up named on its own line with the fix (exit 1): a vhost that does not
exist, a user without tags, a role without grants. The pass says the same words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reaper.schema.grants import NEEDED
from tests.support.accounts import (
    README_PERMISSIONS,
    README_TAGS,
    as_role,
    broker_user,
    set_user,
)
from tests.support.cli import CLOSED_PG_DSN, Cli, reaper_env
from tests.support.services import BrokerUnderTest, on_one_broker

pytestmark = [pytest.mark.broker, pytest.mark.postgres]


async def doctor(cli: Cli) -> tuple[int, dict[str, Any], str]:
    """The doctor's exit code, its JSON, and its text (run twice: both forms)."""
    said = await cli("doctor", "--json")
    code, report = said.code, json.loads(said.out)
    said = await cli("doctor")
    text_code, text = said.code, said.out
    assert text_code == code
    assert report["ok"] is (code == 0)
    # every line that is not ok carries a fix, in both forms; an ok line's fix is empty
    for check in report["checks"]:
        assert isinstance(check["fix"], str)
        assert bool(check["fix"]) or check["status"] == "ok", check
        assert "see the reason" not in check["fix"]
    assert all(" -> fix: " in line for line in text.splitlines() if line[:4] in ("FAIL", "WARN"))
    return code, report, text


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture
def user(broker: BrokerUnderTest) -> Iterator[tuple[str, str]]:
    """A user with permissions on the test's vhost and only the 'management' tag."""
    read_only = {"configure": "", "write": "", "read": ".*"}
    with broker_user(broker, "qr-mgmt", "management", read_only) as name_and_password:
        yield name_and_password


async def test_healthy(broker: BrokerUnderTest, broker_cli: Cli) -> None:
    code, report, text = await doctor(broker_cli)
    assert code == 0, text
    checks = by_name(report)
    url = broker.management_url
    assert checks["postgresql"]["detail"].startswith("reachable at 127.0.0.1:5432/")
    assert checks["schema"]["status"] == "ok"
    assert checks["privileges"]["status"] == "ok"
    assert checks["clock"]["status"] == "ok"
    assert checks[f"broker {url}"]["detail"].startswith(f"reachable, RabbitMQ {broker.version}.")
    assert checks[f"broker {url} vhost"]["detail"] == f"{broker.vhost!r} exists"
    assert checks[f"broker {url} tags"]["status"] == "ok"
    assert checks[f"broker {url} policies"]["status"] == "ok"
    assert checks[f"broker {url} conf.d"]["detail"] == "every node (1) loaded 20-vibey-reap.conf"
    assert checks["dispatch"]["detail"].startswith("polling")
    assert not [c for c in report["checks"] if c["status"] == "fail"]
    assert text.splitlines()[-1].endswith("0 failed: ready")


async def test_a_vhost_that_does_not_exist(pg_dsn: str, broker: BrokerUnderTest, cli: Cli) -> None:
    cli = cli.on(reaper_env(pg_dsn, broker.management_url, "qr-doctor-no-such-vhost"))
    code, report, text = await doctor(cli)
    assert code == 1
    checks = by_name(report)
    vhost = checks[f"broker {broker.management_url} vhost"]
    assert vhost["status"] == "fail"
    assert vhost["detail"].startswith("'qr-doctor-no-such-vhost' does not exist on this broker")
    assert vhost["fix"].endswith("or create it: rabbitmqctl add_vhost qr-doctor-no-such-vhost")
    assert f"FAIL  broker {broker.management_url} vhost: " in text
    # its permissions are not checked, and no fix names a vhost that does not exist to grant on
    assert f"broker {broker.management_url} permissions" not in checks
    assert "set_permissions" not in text
    # -o wide: the fix on a line of its own
    wide = (await cli.out("doctor", "-o", "wide", code=1)).splitlines()
    at = next(
        i
        for i, line in enumerate(wide)
        if line.startswith(f"FAIL  broker {broker.management_url} vhost")
    )
    assert wide[at + 1] == f"      fix: {vhost['fix']}"


async def test_postgresql_down_names_the_fix_for_that(broker: BrokerUnderTest, cli: Cli) -> None:
    code, report, _ = await doctor(
        cli.on(reaper_env(CLOSED_PG_DSN, broker.management_url, broker.vhost))
    )
    assert code == 1
    checks = by_name(report)
    assert checks["postgresql"]["fix"] == (
        "start PostgreSQL on 127.0.0.1:1 (systemctl start postgresql), or set [database] dsn "
        "(REAPER_DATABASE__DSN) to the server that runs"
    )
    assert checks["dispatch"]["fix"] == "fix the postgresql line above: the dispatch is read there"


async def test_a_user_without_the_monitoring_and_policymaker_tags(
    pg_dsn: str, broker: BrokerUnderTest, user: tuple[str, str], cli: Cli
) -> None:
    name, password = user
    env = reaper_env(pg_dsn, broker.management_url, broker.vhost, username=name, password=password)
    code, report, _ = await doctor(cli.on(env))
    assert code == 1
    checks = by_name(report)
    url = broker.management_url
    tags, policies = checks[f"broker {url} tags"], checks[f"broker {url} policies"]
    assert tags["status"] == policies["status"] == "fail"
    assert tags["detail"].startswith(f"{name!r} has management, not 'monitoring'")
    assert tags["fix"] == (
        "add the 'monitoring' tag (and 'policymaker' to write policies): "
        f"rabbitmqctl set_user_tags {name} monitoring policymaker"
    )
    assert checks[f"broker {url} permissions"]["status"] == "ok"
    conf = checks[f"broker {url} conf.d"]
    assert conf["status"] == "fail" and "Not monitor user" in conf["detail"]
    assert (
        conf["detail"].startswith("not checked: ") and "rabbitmqctl set_user_tags" in conf["detail"]
    )
    assert conf["fix"] == tags["fix"]  # the snippet may well be in place: the tag is missing


async def test_a_user_without_any_tag_and_the_pass_says_the_same(
    pg_dsn: str, broker: BrokerUnderTest, user: tuple[str, str], cli: Cli
) -> None:
    name, password = user
    set_user(broker, name, password, "")
    env = reaper_env(pg_dsn, broker.management_url, broker.vhost, username=name, password=password)
    cli = cli.on(env)
    code, report, _ = await doctor(cli)
    assert code == 1
    reached = by_name(report)[f"broker {broker.management_url}"]
    assert reached["status"] == "fail"
    assert f"accepted the password of user {name!r} but its tags do not allow" in reached["detail"]

    pass_report = json.loads(await cli.out("reap", "--json", code=1))
    [unreadable] = [u for u in pass_report["unreadable"] if u["source"] == "broker"]
    assert f"rabbitmqctl set_user_tags {name} monitoring policymaker" in unreadable["error"]
    assert "check [bus] username/password" not in unreadable["error"]


@on_one_broker  # the grants are PostgreSQL's
async def test_a_role_without_grants(
    pg_dsn: str,
    broker: BrokerUnderTest,
    bare_role: str,
    cli: Cli,
) -> None:
    dsn = as_role(pg_dsn, bare_role)
    code, report, text = await doctor(cli.on(reaper_env(dsn, broker.management_url, broker.vhost)))
    assert code == 1
    checks = by_name(report)
    assert checks["postgresql"]["status"] == "ok"
    privileges = checks["privileges"]
    assert privileges["status"] == "fail"
    # Everything but USAGE on the schema public, which PostgreSQL grants to every role: of
    # USAGE and each table's privileges the reaper needs (no outbox here).
    needed = 1 + sum(len(t.privileges) for t in NEEDED if not t.optional)
    assert needed == 28
    assert privileges["detail"].startswith(f"{bare_role} lacks {needed - 1} of {needed}: ")
    assert "INSERT on public.event" in privileges["detail"]
    assert privileges["fix"] == f"reaper db grants {bare_role} --apply (as the tables' owner)"
    schema = checks["schema"]["detail"]
    assert "permission denied for table reaper_migration" in schema
    assert f"run `reaper db grants {bare_role} --apply` as the tables' owner" in schema
    assert f"FAIL  privileges: {bare_role} lacks" in text


async def test_healthy_over_tls_to_both_sources(pg_dsn: str, cli: Cli) -> None:
    """RabbitMQ 3.10's https listener and PostgreSQL with verify-full, from the test CA."""
    ca = "/var/cache/queue-reaper/tls/ca.pem"
    database = pg_dsn.rpartition("/")[2]
    env = {
        **reaper_env(
            f"postgresql://postgres@localhost:5432/{database}", "https://localhost:15671", "/"
        ),
        "REAPER_DATABASE__SSLMODE": "verify-full",
        "REAPER_DATABASE__SSLROOTCERT": ca,
        "REAPER_BUS__CA_FILE": ca,
    }
    code, report, text = await doctor(cli.on(env))
    assert code == 0, text
    checks = by_name(report)
    assert checks["postgresql tls"]["status"] == "ok"
    assert (
        "sslmode=verify-full: the CA and the host name verified"
        in checks["postgresql tls"]["detail"]
    )
    assert checks["broker https://localhost:15671 tls"] == {
        "name": "broker https://localhost:15671 tls",
        "status": "ok",
        "detail": "certificate and name verified",
        "fix": "",
    }


async def test_verify_off_is_a_loud_warning(pg_dsn: str, cli: Cli) -> None:
    cli = cli.on(
        {**reaper_env(pg_dsn, "https://localhost:15671", "/"), "REAPER_BUS__VERIFY": "false"}
    )
    code, report, text = await doctor(cli)
    assert code == 0, text
    assert "WARN  configuration: WARNING: bus.verify = false" in text
    assert by_name(report)["broker https://localhost:15671 tls"]["status"] == "warn"
    assert (await cli.out("config", "show")).startswith("WARNING: bus.verify = false")
    notes = json.loads((await cli("reap", "--dry-run", "--json")).out)["notes"]
    assert any(n.startswith("WARNING: bus.verify = false") for n in notes)


async def test_healthy_as_the_least_privileged_user(
    pg_dsn: str,
    broker: BrokerUnderTest,
    user: tuple[str, str],
    cli: Cli,
) -> None:
    """A user with the README's tags and permissions, not an administrator: every check the
    doctor makes is one such a user may ask."""
    name, password = user
    set_user(broker, name, password, README_TAGS, README_PERMISSIONS)
    env = reaper_env(pg_dsn, broker.management_url, broker.vhost, username=name, password=password)
    code, report, text = await doctor(cli.on(env))
    assert code == 0, text
    checks = by_name(report)
    url = broker.management_url
    assert checks[f"broker {url} vhost"]["status"] == "ok"
    assert checks[f"broker {url} tags"]["detail"].startswith(
        f"{name!r} has monitoring, policymaker"
    )
    assert checks[f"broker {url} permissions"]["detail"] == (
        f"{name!r} has permissions on {broker.vhost!r} (their patterns are shown only to an "
        "administrator)"
    )


async def test_verbose_shows_what_the_doctor_and_a_pass_read_and_decide(
    pg_dsn: str, broker: BrokerUnderTest, tmp_path: Path
) -> None:
    """``-v``: each request to the broker and each PostgreSQL session, with what came back
    and how long it took, and for a pass what it decided; on stderr, the output unchanged."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REAPER_")}
    env.update(reaper_env(pg_dsn, broker.management_url, broker.vhost))

    def reaper(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "reaper", "--config-dir", str(tmp_path), *argv]
        return subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
        )

    quiet, verbose = reaper("doctor"), reaper("doctor", "-v")
    assert quiet.returncode == verbose.returncode == 0 and quiet.stderr == ""
    assert "DEBUG reaper.broker: broker GET " in verbose.stderr
    assert "/api/overview: HTTP 200, " in verbose.stderr
    assert "DEBUG reaper.postgresql: postgresql 127.0.0.1:5432/" in verbose.stderr
    assert "DEBUG" not in verbose.stdout
    run = reaper("reap", "--dry-run", "-v")
    assert run.returncode in (0, 1), run.stderr
    assert "decided: policy vibey-reap-" in run.stderr
    assert "/api/queues/" in run.stderr and "reading" in run.stderr
