"""The reaper's schema as ordered migrations of steps, each with its catalog check.

The reaper's schema as ordered migrations of steps, each step one statement of its
migration's file (``sql/migrations/NNNN_*.sql``, or the optional ``sql/outbox/*.sql``) with the
catalog check that says whether it is needed. :mod:`reaper.schema.plan` plans from these.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Final

from reaper.schema.sql import migrations, without_description

__all__ = [
    "HOST_TABLES",
    "MIGRATIONS",
    "OUTBOX_MIGRATIONS",
    "Check",
    "FleetRow",
    "FunctionInPlace",
    "InCatalog",
    "IndexDropped",
    "IndexValid",
    "Migration",
    "Part",
    "Step",
    "TriggerInPlace",
    "declared_functions",
    "declared_tables",
    "retired_indexes",
    "shipped_migrations",
]

#: The host's tables (SPEC §3): whatever the reaper builds on them must not stall its traffic.
HOST_TABLES: Final = ("job", "job_dependency", "human_gate", "event")

# When a trigger fires, as pg_trigger.tgtype encodes it (PostgreSQL's pg_trigger.h).
_ROW: Final = 1 << 0
_BEFORE: Final = 1 << 1
_DELETE: Final = 1 << 3
_UPDATE: Final = 1 << 4
_TRUNCATE: Final = 1 << 5


# --------------------------------------------------------------------------- checks


class Part(Enum):
    """What of a table the catalog shows: the table itself, a column, a column's NOT NULL, a
    named constraint."""

    TABLE = "table"
    COLUMN = "column"
    NOT_NULL = "NOT NULL"
    CONSTRAINT = "constraint"


@dataclass(frozen=True)
class InCatalog:
    """``table`` (or its column, NOT NULL or constraint ``name``) is in the catalog; or, where
    not ``present``, is not (a NOT NULL to lift, a constraint to drop). Where ``with_table``,
    a table this run creates has it already (a statement of the reaper creates the table with
    it); a column of the host's that no statement creates with its table is added wherever it
    is missing. A statement that fills a table this run creates checks the table too."""

    table: str
    part: Part = Part.TABLE
    name: str = ""
    present: bool = True
    with_table: bool = True


@dataclass(frozen=True)
class IndexValid:
    """The index ``name`` on ``table`` exists and is valid; or, where ``columns`` is given,
    any valid index on exactly those plain key columns (unique, where ``unique``) serves.
    Built ``CONCURRENTLY``, outside a transaction."""

    name: str
    table: str
    columns: tuple[str, ...] | None = None
    unique: bool = False


@dataclass(frozen=True)
class IndexDropped:
    """The index ``name`` on ``table``, built by an earlier migration, is not there: another
    serves its reads as well. Dropped ``CONCURRENTLY``, outside a transaction; the earlier
    migration's build of it is no longer needed."""

    name: str
    table: str


@dataclass(frozen=True)
class FunctionInPlace:
    """The function exists with the body this version ships."""

    signature: str


@dataclass(frozen=True)
class TriggerInPlace:
    """The trigger exists on ``table``, calls ``function`` and fires as ``fires`` says."""

    table: str
    name: str
    function: str
    fires: int


@dataclass(frozen=True)
class FleetRow:
    """The fleet's reserved project has its row: in ``ledger_stream`` (``stream``), or in every
    host table of projects that a ``project_id`` must exist in."""

    stream: bool


Check = InCatalog | IndexValid | IndexDropped | FunctionInPlace | TriggerInPlace | FleetRow


@dataclass(frozen=True)
class Step:
    """One statement of a migration and the check that says whether it is needed."""

    statement: str
    check: Check
    sql: str

    @property
    def concurrent(self) -> bool:
        """Run outside a transaction (``CREATE``/``DROP INDEX CONCURRENTLY``)."""
        return isinstance(self.check, IndexValid | IndexDropped)


@dataclass(frozen=True)
class Migration:
    name: str
    steps: tuple[Step, ...]


def _column(table: str, column: str, *, with_table: bool = True) -> InCatalog:
    return InCatalog(table, Part.COLUMN, column, with_table=with_table)


_DECLARED: Final[dict[str, tuple[tuple[str, Check], ...]]] = {
    "0001_job_queue": (
        ("create_job", InCatalog("job")),
        ("add_job_max_attempts", _column("job", "max_attempts")),
        ("add_job_finished_at", _column("job", "finished_at")),
        ("add_job_phase", _column("job", "phase")),
        ("create_job_dependency", InCatalog("job_dependency")),
        ("create_human_gate", InCatalog("human_gate")),
        ("add_human_gate_answered_by", _column("human_gate", "answered_by")),
        ("add_human_gate_identity", _column("human_gate", "identity")),
        (
            "index_job_idempotency_key",
            IndexValid(
                "job_project_idempotency_key_uq",
                "job",
                columns=("project_id", "idempotency_key"),
                unique=True,
            ),
        ),
        (
            "index_job_dependency_depends_on",
            IndexValid("job_dependency_depends_on_idx", "job_dependency", columns=("depends_on",)),
        ),
        ("index_human_gate_identity", IndexValid("human_gate_identity_uq", "human_gate")),
        ("index_human_gate_open", IndexValid("human_gate_open_idx", "human_gate")),
    ),
    "0002_ledger": (
        ("create_event", InCatalog("event")),
        ("create_refuse_ledger_change", FunctionInPlace("reaper_refuse_ledger_change()")),
        (
            "create_event_append_only",
            TriggerInPlace(
                "event",
                "event_append_only",
                "reaper_refuse_ledger_change()",
                _ROW | _BEFORE | _UPDATE | _DELETE,
            ),
        ),
        (
            "create_event_append_only_truncate",
            TriggerInPlace(
                "event",
                "event_append_only_truncate",
                "reaper_refuse_ledger_change()",
                _BEFORE | _TRUNCATE,
            ),
        ),
        ("create_ledger_stream", InCatalog("ledger_stream")),
        ("continue_existing_streams", InCatalog("ledger_stream")),
        ("create_fleet_stream", FleetRow(stream=True)),
        ("create_fleet_project", FleetRow(stream=False)),
    ),
    "0003_reaper_indexes": (
        ("index_job_leased_expiry", IndexValid("job_leased_expiry_idx", "job")),
        ("index_job_ready_project_run_after", IndexValid("job_ready_project_run_after_idx", "job")),
        ("create_sighting_scope", FunctionInPlace("reaper_sighting_scope(uuid,jsonb)")),
        ("index_event_sighting_latest", IndexValid("event_sighting_latest_idx", "event")),
    ),
    "0004_dead_letters": (
        ("create_dead_letter", InCatalog("dead_letter")),
        (
            "index_dead_letter_queue",
            IndexValid("dead_letter_queue_idx", "dead_letter", columns=("queue",)),
        ),
    ),
    "0005_dispatch_pointers": (
        ("add_dead_letter_disposition", _column("dead_letter", "disposition")),
        (
            "let_dead_letter_job_id_be_null",
            InCatalog("dead_letter", Part.NOT_NULL, "job_id", present=False),
        ),
        (
            "drop_dead_letter_job_id_unique",
            InCatalog("dead_letter", Part.CONSTRAINT, "dead_letter_job_id_key", present=False),
        ),
        (
            "index_dead_letter_job",
            IndexValid("dead_letter_job_idx", "dead_letter", columns=("job_id",)),
        ),
    ),
    "0006_reaper_turn": (("create_reaper_turn", InCatalog("reaper_turn")),),
    "0007_dead_letter_envelopes": (
        ("add_dead_letter_envelope", _column("dead_letter", "envelope")),
        ("index_dead_letter_envelope", IndexValid("dead_letter_envelope_idx", "dead_letter")),
    ),
    "0008_sighting_buckets": (
        ("create_sighting_scope_v2", FunctionInPlace("reaper_sighting_scope_v2(uuid,jsonb)")),
        ("index_event_sighting_latest_v2", IndexValid("event_sighting_latest_v2_idx", "event")),
    ),
    "0009_open_sightings": (
        ("create_open_sighting", InCatalog("reaper_open_sighting")),
        ("fill_open_sightings", InCatalog("reaper_open_sighting")),
    ),
    "0010_observations": (("create_observation", InCatalog("reaper_observation")),),
    "0011_quiet_marks": (("create_quiet_mark", InCatalog("reaper_quiet_mark")),),
    "0012_reading_gates_and_ledger": (
        ("index_human_gate_job", IndexValid("human_gate_job_idx", "human_gate")),
        ("index_event_created", IndexValid("event_created_idx", "event")),
        ("index_event_project_created", IndexValid("event_project_created_idx", "event")),
        ("index_event_object", IndexValid("event_object_idx", "event")),
        ("index_event_condition", IndexValid("event_condition_idx", "event")),
        ("index_event_answers", IndexValid("event_not_verdict_idx", "event")),
    ),
    "0013_retire_sighting_index": (
        ("drop_event_sighting_latest", IndexDropped("event_sighting_latest_idx", "event")),
    ),
}

#: The optional outbox dispatch schema (``reaper db migrate --outbox``), by migration name.
_OUTBOX: Final[dict[str, tuple[tuple[str, Check], ...]]] = {
    "outbox_dispatch": (
        ("add_job_dispatch_seq", _column("job", "dispatch_seq", with_table=False)),
        ("add_job_dispatched_at", _column("job", "dispatched_at", with_table=False)),
        ("create_job_outbox", InCatalog("job_outbox")),
        ("index_job_outbox_unsent", IndexValid("job_outbox_unsent_idx", "job_outbox")),
    ),
}


def _bound(
    folder: str, declared: dict[str, tuple[tuple[str, Check], ...]]
) -> tuple[Migration, ...]:
    """The migrations of ``folder`` (recorded by file name), each step bound to its statement."""
    bound = []
    for name, statements in migrations(folder):
        bound.append(
            Migration(
                name,
                tuple(
                    Step(statement, check, without_description(statements[statement]))
                    for statement, check in declared[name]
                ),
            )
        )
    return tuple(bound)


#: Every migration, in the order they apply, each step bound to its statement.
MIGRATIONS: Final = _bound("migrations", _DECLARED)

#: The optional outbox dispatch schema, applied after :data:`MIGRATIONS` when asked for.
OUTBOX_MIGRATIONS: Final = _bound("outbox", _OUTBOX)


def _checks() -> Iterator[Check]:
    """Every step's check, the reaper's migrations' then the outbox's, in declaration order."""
    for migration in (*MIGRATIONS, *OUTBOX_MIGRATIONS):
        for step in migration.steps:
            yield step.check


def declared_tables() -> tuple[str, ...]:
    """Every table a step checks or creates, in declaration order."""
    found: dict[str, None] = {}
    for check in _checks():
        match check:
            case (
                InCatalog(table)
                | IndexValid(table=table)
                | IndexDropped(table=table)
                | TriggerInPlace(table)
            ):
                found[table] = None
    return tuple(found)


def declared_functions() -> tuple[str, ...]:
    """Every function a step checks, by signature."""
    return tuple(c.signature for c in _checks() if isinstance(c, FunctionInPlace))


def retired_indexes() -> frozenset[str]:
    """The indexes a later migration drops: an earlier one's build of them is not needed."""
    return frozenset(c.name for c in _checks() if isinstance(c, IndexDropped))


def shipped_migrations() -> list[str]:
    """The reaper's own migrations, in order (the outbox's are optional)."""
    return [m.name for m in MIGRATIONS]
