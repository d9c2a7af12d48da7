"""The reaper's schema as ordered migrations of steps, each step one statement of its
migration's file (``sql/migrations/NNNN_*.sql``, or the optional ``sql/outbox/*.sql``) with the
catalog check that says whether it is needed. :mod:`reaper.jobqueue.schema` plans from these.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from reaper.jobqueue.sql import migrations, without_description

__all__ = [
    "HOST_TABLES",
    "MIGRATIONS",
    "OUTBOX_MIGRATIONS",
    "Check",
    "ColumnAdded",
    "ColumnExists",
    "ColumnNullable",
    "ConstraintAbsent",
    "FleetProjectExists",
    "FleetStreamExists",
    "FunctionInPlace",
    "IndexValid",
    "Migration",
    "Step",
    "TableCreatedNow",
    "TableExists",
    "TriggerInPlace",
    "declared_functions",
    "declared_tables",
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


@dataclass(frozen=True)
class TableExists:
    table: str


@dataclass(frozen=True)
class ColumnExists:
    """The column exists on a table that existed before this run (a table this run creates
    is created with it)."""

    table: str
    column: str


@dataclass(frozen=True)
class ColumnAdded:
    """The column exists, on a table of the host's that no statement of the reaper creates
    with it: needed wherever it is missing, the table created by this run included."""

    table: str
    column: str


@dataclass(frozen=True)
class ColumnNullable:
    """The column ``table.column`` takes NULL (needed only where it exists NOT NULL)."""

    table: str
    column: str


@dataclass(frozen=True)
class ConstraintAbsent:
    """The table has no constraint named ``name`` (needed only where it has one)."""

    table: str
    name: str


@dataclass(frozen=True)
class IndexValid:
    """The index ``name`` on ``table`` exists and is valid; or, where ``columns`` is given,
    any valid index on exactly those plain key columns (unique, where ``unique``) serves."""

    name: str
    table: str
    columns: tuple[str, ...] | None = None
    unique: bool = False


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
class TableCreatedNow:
    """Data that goes with a new table: needed only in the run that creates ``table``."""

    table: str


@dataclass(frozen=True)
class FleetStreamExists:
    """The fleet stream has its ``ledger_stream`` row."""


@dataclass(frozen=True)
class FleetProjectExists:
    """Every project table a ``project_id`` must exist in holds the fleet's project row."""


Check = (
    TableExists
    | ColumnExists
    | ColumnAdded
    | ColumnNullable
    | ConstraintAbsent
    | IndexValid
    | FunctionInPlace
    | TriggerInPlace
    | TableCreatedNow
    | FleetStreamExists
    | FleetProjectExists
)


@dataclass(frozen=True)
class Step:
    """One statement of a migration and the check that says whether it is needed."""

    statement: str
    check: Check
    sql: str

    @property
    def concurrent(self) -> bool:
        """Run outside a transaction (``CREATE INDEX CONCURRENTLY``)."""
        return isinstance(self.check, IndexValid)


@dataclass(frozen=True)
class Migration:
    name: str
    steps: tuple[Step, ...]


_DECLARED: Final[dict[str, tuple[tuple[str, Check], ...]]] = {
    "0001_job_queue": (
        ("create_job", TableExists("job")),
        ("add_job_max_attempts", ColumnExists("job", "max_attempts")),
        ("add_job_finished_at", ColumnExists("job", "finished_at")),
        ("add_job_phase", ColumnExists("job", "phase")),
        ("create_job_dependency", TableExists("job_dependency")),
        ("create_human_gate", TableExists("human_gate")),
        ("add_human_gate_answered_by", ColumnExists("human_gate", "answered_by")),
        ("add_human_gate_identity", ColumnExists("human_gate", "identity")),
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
        ("create_event", TableExists("event")),
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
        ("create_ledger_stream", TableExists("ledger_stream")),
        ("continue_existing_streams", TableCreatedNow("ledger_stream")),
        ("create_fleet_stream", FleetStreamExists()),
        ("create_fleet_project", FleetProjectExists()),
    ),
    "0003_reaper_indexes": (
        ("index_job_leased_expiry", IndexValid("job_leased_expiry_idx", "job")),
        ("index_job_ready_project_run_after", IndexValid("job_ready_project_run_after_idx", "job")),
        ("create_sighting_scope", FunctionInPlace("reaper_sighting_scope(uuid,jsonb)")),
        ("index_event_sighting_latest", IndexValid("event_sighting_latest_idx", "event")),
    ),
    "0004_dead_letters": (
        ("create_dead_letter", TableExists("dead_letter")),
        (
            "index_dead_letter_queue",
            IndexValid("dead_letter_queue_idx", "dead_letter", columns=("queue",)),
        ),
    ),
    "0005_dispatch_pointers": (
        ("add_dead_letter_disposition", ColumnExists("dead_letter", "disposition")),
        ("let_dead_letter_job_id_be_null", ColumnNullable("dead_letter", "job_id")),
        (
            "drop_dead_letter_job_id_unique",
            ConstraintAbsent("dead_letter", "dead_letter_job_id_key"),
        ),
        (
            "index_dead_letter_job",
            IndexValid("dead_letter_job_idx", "dead_letter", columns=("job_id",)),
        ),
    ),
    "0006_reaper_turn": (("create_reaper_turn", TableExists("reaper_turn")),),
    "0007_dead_letter_envelopes": (
        ("add_dead_letter_envelope", ColumnExists("dead_letter", "envelope")),
        ("index_dead_letter_envelope", IndexValid("dead_letter_envelope_idx", "dead_letter")),
    ),
    "0008_sighting_buckets": (
        ("create_sighting_scope_v2", FunctionInPlace("reaper_sighting_scope_v2(uuid,jsonb)")),
        ("index_event_sighting_latest_v2", IndexValid("event_sighting_latest_v2_idx", "event")),
    ),
    "0009_open_sightings": (
        ("create_open_sighting", TableExists("reaper_open_sighting")),
        ("fill_open_sightings", TableCreatedNow("reaper_open_sighting")),
    ),
    "0010_observations": (("create_observation", TableExists("reaper_observation")),),
    "0011_quiet_marks": (("create_quiet_mark", TableExists("reaper_quiet_mark")),),
    "0012_reading_gates_and_ledger": (
        ("index_human_gate_job", IndexValid("human_gate_job_idx", "human_gate")),
        ("index_event_created", IndexValid("event_created_idx", "event")),
        ("index_event_project_created", IndexValid("event_project_created_idx", "event")),
        ("index_event_object", IndexValid("event_object_idx", "event")),
        ("index_event_condition", IndexValid("event_condition_idx", "event")),
        ("index_event_answers", IndexValid("event_not_verdict_idx", "event")),
    ),
}

#: The optional outbox dispatch schema (``reaper db migrate --outbox``), by migration name.
_OUTBOX: Final[dict[str, tuple[tuple[str, Check], ...]]] = {
    "outbox_dispatch": (
        ("add_job_dispatch_seq", ColumnAdded("job", "dispatch_seq")),
        ("add_job_dispatched_at", ColumnAdded("job", "dispatched_at")),
        ("create_job_outbox", TableExists("job_outbox")),
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


def declared_tables() -> tuple[str, ...]:
    """Every table a step checks or creates, in declaration order."""
    found: dict[str, None] = {}
    for migration in (*MIGRATIONS, *OUTBOX_MIGRATIONS):
        for step in migration.steps:
            table = getattr(step.check, "table", None)
            if isinstance(table, str):
                found[table] = None
    return tuple(found)


def declared_functions() -> tuple[str, ...]:
    """Every function a step checks, by signature."""
    return tuple(
        s.check.signature
        for m in (*MIGRATIONS, *OUTBOX_MIGRATIONS)
        for s in m.steps
        if isinstance(s.check, FunctionInPlace)
    )
