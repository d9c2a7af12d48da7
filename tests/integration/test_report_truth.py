"""Done means committed, on real PostgreSQL: a pass run as a role that may read but not write
lists nothing under Done, names each write it could not make under NOT DONE with the
database's reason and the fix, never files a write as unreadable, and is not ok. The role is
created by the test and dropped after it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import asyncpg
import pytest

from reaper.config import Settings
from reaper.edges.report import render_text, to_json
from reaper.jobqueue.postgres import PostgresStore
from reaper.reap.run import run_pass
from reaper.reap.sources import Sources
from tests.support.accounts import as_role, login_role
from tests.support.store import Job, fetch_job, insert_jobs, leased

pytestmark = [pytest.mark.postgres]


@pytest.fixture
async def read_only_dsn(pg_dsn: str) -> AsyncIterator[str]:
    """``pg_dsn`` as a role of this test's own that may SELECT every table and write none."""
    database = urlsplit(pg_dsn).path.lstrip("/")
    async with login_role(pg_dsn, "qr_read_only") as role:
        admin = await asyncpg.connect(pg_dsn)
        try:
            await admin.execute(f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"')
            await admin.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
            await admin.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
        finally:
            await admin.close()
        yield as_role(pg_dsn, role)


async def test_a_write_the_database_refuses_is_not_done_never_done_nor_unreadable(
    pg_dsn: str, read_only_dsn: str
) -> None:
    project = uuid.uuid4()
    now = datetime.now(UTC)
    lease = leased(project, expired_seconds_ago=600, now=now)
    stale = Job(project_id=project, run_after=now - timedelta(hours=2))
    await insert_jobs(pg_dsn, [lease, stale])

    store = await PostgresStore.connect(read_only_dsn, pool_size=2)
    try:
        settings = Settings.model_validate({"database": {"dsn": read_only_dsn}})
        result = await run_pass(
            settings, Sources(store=store, broker=None, broker_error="not asked")
        )
    finally:
        await store.close()

    # the job is still leased: nothing committed
    row = await fetch_job(pg_dsn, lease.id)
    assert (row["state"], row["lease_owner"]) == ("leased", "worker-1")

    report = to_json(result)
    # the move that did not commit is not listed as a verdict: it is named under NOT DONE
    assert not [v for v in report["verdicts"] if v["object"] == str(lease.id)]  # type: ignore[attr-defined]
    assert all(not v["applied"] for v in report["verdicts"])  # type: ignore[attr-defined]

    assert not result.ok
    kinds = [(p.kind, p.subject) for p in result.problems()]
    # the database was read: only the broker (not asked) is unreadable
    assert [s for k, s in kinds if k == "unreadable"] == ["broker"]
    not_done = {s: p for p in result.problems() if p.kind == "row_not_moved" for s in [p.subject]}
    assert set(not_done) == {f"job {lease.id}", "the sightings' ledger events"}
    for problem in not_done.values():
        assert "permission denied" in problem.detail and "42501" in problem.fix
        assert problem.fix.startswith("grant the reaper's database role INSERT and UPDATE on ")

    text = render_text(result)
    lines = text.splitlines()
    assert lines[0].startswith("queue-reaper pass: NOT OK: 1 source unreadable, 2 writes not done")
    assert f"  NOT DONE    job {str(lease.id)[:8]}: permission denied for table job" in text
    assert "  fix: grant the reaper's database role INSERT and UPDATE on job (it lacks" in text
    assert "Done (" not in text
    assert "UNREADABLE  job_queue" not in text
    # the sighting could not be recorded, and the report does not pretend it was
    assert "stale_ready" in text and "[not recorded]" in text and "[seen]" not in text
    assert "Every verdict is a QueueReaped event" not in text
