"""The declared configuration (SPEC §2): drop-ins, the environment overlay, every refusal,
provenance, and no password anywhere it could be read. Pure: files under tmp_path, the
environment passed explicitly."""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from reaper.config import (
    FOREIGN_QUEUE_NAMES,
    LoadedConfig,
    QueueReapSettings,
    Settings,
    load_config,
    show,
)
from reaper.config.loading import resolve_config_dir
from reaper.config.provenance import ConfigValue
from reaper.core.domain import Thresholds
from reaper.errors import ConfigError, scrub
from tests.support.config_dirs import isolate_config

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "conf.d"

LEAF_KEYS = [
    *(f"queue.reap.{name}" for name in QueueReapSettings.model_fields),
    "bus.management_url",
    "bus.management_urls",
    "bus.username",
    "bus.password",
    "bus.vhost",
    "bus.prefix",
    "bus.password_file",
    "bus.timeout_seconds",
    "bus.ca_file",
    "bus.client_cert_file",
    "bus.client_key_file",
    "bus.verify",
    "database.dsn",
    "database.password",
    "database.password_file",
    "database.sslmode",
    "database.sslrootcert",
    "database.sslcert",
    "database.sslkey",
    "database.pool_size",
    "database.statement_timeout_seconds",
    "database.lock_timeout_seconds",
    "database.hook_connections",
    "database.keep_connections",
]
SECRET_KEYS = {"bus.password", "database.password"}
#: Keys with no value by default (TOML has no null): the shipped defaults show them commented.
UNSET_KEYS = {
    "bus.management_urls",
    "bus.password_file",
    "bus.ca_file",
    "bus.client_cert_file",
    "bus.client_key_file",
    "database.password_file",
    "database.sslmode",
    "database.sslrootcert",
    "database.sslcert",
    "database.sslkey",
    "queue.reap.lease_reap_budget_seconds",
}


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolate_config(tmp_path, monkeypatch)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return str(value)


def drop_in(directory: Path, name: str, tables: Mapping[str, Mapping[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for table, keys in tables.items():
        lines.append(f"[{table}]")
        lines.extend(f"{key} = {toml_value(value)}" for key, value in keys.items())
    path = directory / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def problems_of(directory: Path | None, environ: Mapping[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(directory, environ=environ or {})
    return caught.value.problems


def reap_problems(tmp_path: Path, **keys: Any) -> list[str]:
    directory = tmp_path / "conf.d"
    drop_in(directory, "50-test.toml", {"queue.reap": keys})
    return problems_of(directory)


def value_of(loaded: LoadedConfig, key: str) -> ConfigValue:
    return next(v for v in loaded.values if v.key == key)


# --------------------------------------------------------------------------- defaults


def test_defaults_with_nothing_declared() -> None:
    loaded = load_config(None, environ={})

    assert loaded.config_dir is None
    assert loaded.files == ()
    reap = loaded.settings.queue.reap
    assert (reap.enabled, reap.interval_seconds, reap.lease_grace_seconds) == (True, 60, 0)
    assert (reap.stale_ready_seconds, reap.longest_lease_seconds) == (900, 7200)
    assert (reap.consumer_timeout_seconds, reap.delivery_limit) == (21600, 20)
    assert reap.owned_queue_pattern == r"^vibey\."
    assert reap.dead_letter_queue_pattern == r"(\.dlq|\.dead)$"
    assert reap.consumerless_queue_pattern == r"\.wait\."
    assert (reap.dead_letter_min_depth, reap.dead_letter_peek_limit) == (1, 100)
    assert (reap.policy_priority, reap.policy_verify_wait_seconds) == (0, 10)
    assert reap.known_phases == []
    bus = loaded.settings.bus
    assert bus.management_url == "http://127.0.0.1:15672"
    assert (bus.username, bus.password.get_secret_value()) == ("guest", "guest")
    assert (bus.vhost, bus.prefix, bus.timeout_seconds) == ("/", "vibey", 10)
    database = loaded.settings.database
    assert database.dsn == "postgresql://127.0.0.1:5432/postgres"
    assert database.password is None
    assert (database.pool_size, database.statement_timeout_seconds) == (4, 30)
    assert database.lock_timeout_seconds == 2
    assert [v.key for v in loaded.values] == LEAF_KEYS
    assert {v.origin for v in loaded.values} == {"default"}


def test_thresholds_are_the_judging_subset() -> None:
    assert load_config(None, environ={}).settings.thresholds() == Thresholds()

    loaded = load_config(
        None,
        environ={
            "REAPER_QUEUE__REAP__INTERVAL_SECONDS": "25",
            "REAPER_QUEUE__REAP__KNOWN_PHASES": '["build", "test", "build"]',
            "REAPER_QUEUE__REAP__LEASE_GRACE_SECONDS": "30",
            "REAPER_QUEUE__REAP__DEAD_LETTER_PEEK_LIMIT": "7",
        },
    )
    thresholds = loaded.settings.thresholds()

    assert thresholds.consumerless_slack_seconds == 25
    assert thresholds.known_phases == frozenset({"build", "test"})
    assert thresholds.lease_grace_seconds == 30
    assert thresholds.dead_letter_peek_limit == 7
    assert thresholds.consumer_timeout_seconds == 21600


# --------------------------------------------------------------------------- sources


def test_drop_ins_apply_in_lexical_order(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    first = drop_in(
        directory, "10-site.toml", {"queue.reap": {"stale_ready_seconds": 100, "delivery_limit": 5}}
    )
    second = drop_in(directory, "20-local.toml", {"queue.reap": {"stale_ready_seconds": 200}})
    (directory / "README.md").write_text("not a drop-in")
    (directory / ".20-editor.toml").write_text("this is not toml [")

    loaded = load_config(directory, environ={})

    assert loaded.files == (first, second)
    assert loaded.settings.queue.reap.stale_ready_seconds == 200
    assert loaded.settings.queue.reap.delivery_limit == 5
    assert value_of(loaded, "queue.reap.stale_ready_seconds").origin == f"file:{second}"
    assert value_of(loaded, "queue.reap.delivery_limit").origin == f"file:{first}"
    assert value_of(loaded, "queue.reap.interval_seconds").origin == "default"


def test_order_is_lexical_not_numeric(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    drop_in(directory, "9-later.toml", {"bus": {"vhost": "nine"}})
    drop_in(directory, "10-earlier.toml", {"bus": {"vhost": "ten"}})

    assert load_config(directory, environ={}).settings.bus.vhost == "nine"


def test_environment_overrides_files(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    path = drop_in(
        directory, "10-site.toml", {"queue.reap": {"stale_ready_seconds": 100, "enabled": True}}
    )
    environ = {
        "REAPER_QUEUE__REAP__STALE_READY_SECONDS": "600",
        "reaper_queue__reap__enabled": "false",
        "REAPER_BUS__PASSWORD": "from-the-environment",
    }

    loaded = load_config(directory, environ=environ)

    assert loaded.settings.queue.reap.stale_ready_seconds == 600
    assert loaded.settings.queue.reap.enabled is False
    assert loaded.settings.bus.password.get_secret_value() == "from-the-environment"
    assert value_of(loaded, "queue.reap.stale_ready_seconds").origin == (
        "env:REAPER_QUEUE__REAP__STALE_READY_SECONDS"
    )
    assert value_of(loaded, "queue.reap.enabled").origin == "env:reaper_queue__reap__enabled"
    assert loaded.files == (path,)


def test_environment_alone_configures_everything() -> None:
    environ = {
        "REAPER_QUEUE__REAP__DELIVERY_LIMIT": "3",
        "REAPER_QUEUE__REAP__POLICY_VERIFY_WAIT_SECONDS": "2.5",
        "REAPER_BUS__MANAGEMENT_URL": "https://rabbit.internal:15671",
        "REAPER_BUS__USERNAME": "reaper",
        "REAPER_BUS__VHOST": "jobs",
        "REAPER_DATABASE__DSN": "postgresql://reaper@db:5432/jobs",
        "REAPER_DATABASE__PASSWORD": "db-secret",
        "REAPER_DATABASE__POOL_SIZE": "8",
        "REAPER_CONFIG_DIR": "",
        "UNRELATED": "ignored",
    }

    loaded = load_config(None, environ=environ)

    assert loaded.config_dir is None
    settings = loaded.settings
    assert settings.queue.reap.delivery_limit == 3
    assert settings.queue.reap.policy_verify_wait_seconds == 2.5
    assert settings.bus.management_url == "https://rabbit.internal:15671"
    assert (settings.bus.username, settings.bus.vhost) == ("reaper", "jobs")
    assert settings.database.dsn == "postgresql://reaper@db:5432/jobs"
    assert settings.database.password is not None
    assert settings.database.password.get_secret_value() == "db-secret"
    assert settings.database.pool_size == 8
    assert value_of(loaded, "database.pool_size").origin == "env:REAPER_DATABASE__POOL_SIZE"


def test_a_whole_table_may_come_from_one_json_variable() -> None:
    loaded = load_config(
        None, environ={"REAPER_BUS": '{"vhost": "jobs", "timeout_seconds": "2.5"}'}
    )

    assert (loaded.settings.bus.vhost, loaded.settings.bus.timeout_seconds) == ("jobs", 2.5)
    assert value_of(loaded, "bus.vhost").origin == "env:REAPER_BUS"
    assert value_of(loaded, "bus.username").origin == "default"


@pytest.mark.parametrize(
    ("name", "nearest"),
    [
        ("REAPER_DATABASE_DSN", "REAPER_DATABASE__DSN"),
        ("REAPER_BUS_VHOST", "REAPER_BUS__VHOST"),
        ("REAPER_BUSS__VHOST", "REAPER_BUS__VHOST"),
        ("REAPER_QUEUE_REAP__STALE_READY_SECONDS", "REAPER_QUEUE__REAP__STALE_READY_SECONDS"),
        ("REAPER_CONFIGDIR", "REAPER_CONFIG_DIR"),
        ("reaper_database_dsn", "REAPER_DATABASE__DSN"),
    ],
)
def test_a_variable_that_names_no_key_is_refused_with_the_nearest_name(
    name: str, nearest: str
) -> None:
    """Ignored in silence, ``REAPER_DATABASE_DSN`` would leave the default database in force:
    ``config check`` would say valid and ``db migrate`` would create the schema there."""
    with pytest.raises(ConfigError) as refused:
        load_config(None, environ={name: "postgresql://127.0.0.1:5432/jobs"})
    assert refused.value.problems == [
        f"{name} names no key, so it would be ignored (did you mean {nearest}?)"
    ]


def test_a_variable_near_no_key_is_refused_with_the_rule() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, environ={"REAPER_ZZZZZZ": "1", "OTHER_DSN": "x"})
    assert refused.value.problems == [
        "REAPER_ZZZZZZ names no key, so it would be ignored (a table's keys join with '__': "
        "REAPER_DATABASE__DSN)"
    ]


def test_every_key_table_and_directory_variable_is_taken(tmp_path: Path) -> None:
    environ = {
        "REAPER_CONFIG_DIR": str(tmp_path),
        "REAPER_SECRETS_DIR": str(tmp_path),
        "REAPER_QUEUE__REAP__STALE_READY_SECONDS": "600",
        "reaper_bus__vhost": "jobs",
        "REAPER_DATABASE": '{"statement_timeout_seconds": 5}',
        "REAPER_QUEUE__REAP": '{"interval_seconds": 30}',
    }
    loaded = load_config(None, environ=environ)
    assert loaded.settings.bus.vhost == "jobs"
    assert loaded.settings.queue.reap.interval_seconds == 30


def test_config_dir_is_resolved_explicit_then_environment_then_defaults(
    tmp_path: Path,
) -> None:
    explicit = tmp_path / "explicit"
    named = tmp_path / "named"
    etc = tmp_path / "etc"
    for directory in (explicit, named, etc):
        directory.mkdir()

    assert resolve_config_dir(explicit, {"REAPER_CONFIG_DIR": str(named)}) == explicit
    assert resolve_config_dir(None, {"REAPER_CONFIG_DIR": str(named)}) == named
    assert resolve_config_dir(None, {}) == etc
    Path("conf.d").mkdir()
    assert resolve_config_dir(None, {}) == Path("conf.d")


def test_config_dir_without_any_directory_is_environment_only(tmp_path: Path) -> None:
    assert resolve_config_dir(None, {}) is None


@pytest.mark.parametrize("how", ["explicit", "environment"])
def test_a_named_config_dir_that_does_not_exist_is_refused(tmp_path: Path, how: str) -> None:
    missing = tmp_path / "missing"
    explicit = missing if how == "explicit" else None
    environ = {"REAPER_CONFIG_DIR": str(missing)} if how == "environment" else {}

    with pytest.raises(ConfigError, match="does not exist"):
        resolve_config_dir(explicit, environ)
    assert any(str(missing) in p for p in problems_of(explicit, environ))


def test_load_config_finds_the_default_directory(tmp_path: Path) -> None:
    drop_in(Path("conf.d"), "10-site.toml", {"bus": {"prefix": "found"}})

    loaded = load_config(environ={})

    assert loaded.config_dir == Path("conf.d")
    assert loaded.settings.bus.prefix == "found"


# --------------------------------------------------------------------------- refusals

REFUSALS = [
    # (key, value, what is wrong, why it is refused)
    ("interval_seconds", 0, "is below 1", "a pass needs a period"),
    ("lease_grace_seconds", -1, "is below 0", "cannot be negative"),
    ("lease_grace_seconds", 86401, "is above 86400", "a grace over a day"),
    ("stale_ready_seconds", 0, "is below 1", "stale the moment it became claimable"),
    ("longest_lease_seconds", 0, "is below 1", "a lease lasts at least a second"),
    ("delivery_limit", 0, "is below 1", "deliverable at least once"),
    ("owned_queue_pattern", "", "is empty", "matches every queue name"),
    ("owned_queue_pattern", ".*", "matches every queue name", "another system's included"),
    ("owned_queue_pattern", ".", "matches every queue name", "another system's included"),
    ("owned_queue_pattern", "^cel", "matches the foreign queue 'celery'", "as its own"),
    ("owned_queue_pattern", r"^amq\.gen-", "matches the foreign queue 'amq.gen-", "as its own"),
    ("owned_queue_pattern", r"\.inbox$", "matches the foreign queue 'agent.x", "as its own"),
    ("owned_queue_pattern", "(", "is not a valid regular expression", "missing )"),
    ("dead_letter_queue_pattern", "", "is empty", "matches every queue name"),
    ("dead_letter_queue_pattern", "(?s).*", "matches every queue name", "dead-letter queue"),
    ("dead_letter_queue_pattern", r"\w|\W", "matches every queue name", "dead-letter queue"),
    ("dead_letter_queue_pattern", "[", "is not a valid regular expression", "unterminated"),
    ("consumerless_queue_pattern", "", "is empty", "matches every queue name"),
    ("consumerless_queue_pattern", "^", "matches every queue name", "would ever be judged stale"),
    ("consumerless_queue_pattern", "a{2,1}", "is not a valid regular expression", "min repeat"),
    ("dead_letter_min_depth", 0, "is below 1", "every empty dead-letter queue"),
    ("dead_letter_peek_limit", 0, "is below 1", "at least one dead letter"),
    ("dead_letter_peek_limit", 1001, "is above 1000", "stays bounded"),
    ("policy_priority", -1, "is below 0", "not negative"),
    ("policy_verify_wait_seconds", -1, "is below 0", "cannot be negative"),
    ("policy_verify_wait_seconds", 121, "is above 120", "at most two minutes"),
    ("lease_reap_budget_seconds", 0, "must be above 0", "some time to move anything"),
    ("lease_reap_budget_seconds", -1.5, "must be above 0", "some time to move anything"),
    ("consumerless_queue_pattern", "x[[]", "is an ambiguous regular expression", "nested set"),
    ("known_phases", ["build", ""], "holds an empty phase name", "which no job has"),
]


@pytest.mark.parametrize(("key", "value", "what", "why"), REFUSALS)
def test_every_refusal_names_the_key_the_value_and_why(
    tmp_path: Path, key: str, value: Any, what: str, why: str
) -> None:
    problems = reap_problems(tmp_path, **{key: value})

    assert len(problems) == 1, problems
    (problem,) = problems
    shown = f"'{value}'" if isinstance(value, str) else repr(value)
    assert problem.startswith(f"queue.reap.{key} = {shown} {what}"), problem
    assert why in problem.split(what, 1)[1], problem
    assert problem.endswith("50-test.toml)"), problem


def test_a_consumer_timeout_below_the_longest_lease_is_refused(tmp_path: Path) -> None:
    problems = reap_problems(tmp_path, consumer_timeout_seconds=3600)

    assert problems == [
        "queue.reap.consumer_timeout_seconds = 3600 is below queue.reap.longest_lease_seconds "
        "= 7200: the broker would cancel a consumer still inside its lease"
    ]


def test_a_verify_wait_the_interval_cannot_hold_is_refused(tmp_path: Path) -> None:
    problems = reap_problems(tmp_path, interval_seconds=15)

    assert len(problems) == 1, problems
    assert problems[0].startswith(
        "queue.reap.policy_verify_wait_seconds = 10.0 is more than half of "
        "queue.reap.interval_seconds = 15: a pass is cut at its interval"
    ), problems
    assert "at most 7.5" in problems[0]
    for fits in (
        {"interval_seconds": 20},
        {"interval_seconds": 15, "policy_verify_wait_seconds": 7.5},
    ):
        directory = tmp_path / "fits"
        drop_in(directory, "50-test.toml", {"queue.reap": fits})
        assert (
            load_config(directory, environ={}).settings.queue.reap.interval_seconds
            == fits["interval_seconds"]
        )


def test_the_lease_reap_budget_is_half_the_interval_unless_declared(tmp_path: Path) -> None:
    default = load_config(None, environ={})
    assert default.settings.queue.reap.lease_reap_budget() == 30.0
    assert value_of(default, "queue.reap.lease_reap_budget_seconds").value == 30.0
    assert value_of(default, "queue.reap.lease_reap_budget_seconds").origin == "default"
    directory = tmp_path / "conf.d"
    drop_in(
        directory,
        "50-test.toml",
        {"queue.reap": {"interval_seconds": 25, "policy_verify_wait_seconds": 1}},
    )
    follows = load_config(directory, environ={})
    assert follows.settings.queue.reap.lease_reap_budget() == 12.5
    assert value_of(follows, "queue.reap.lease_reap_budget_seconds").value == 12.5
    drop_in(directory, "60-test.toml", {"queue.reap": {"lease_reap_budget_seconds": 25}})
    declared = load_config(directory, environ={})
    assert declared.settings.queue.reap.lease_reap_budget() == 25
    assert value_of(declared, "queue.reap.lease_reap_budget_seconds").origin.startswith("file:")


def test_a_lease_reap_budget_above_the_interval_is_refused(tmp_path: Path) -> None:
    problems = reap_problems(tmp_path, lease_reap_budget_seconds=61)

    assert len(problems) == 1, problems
    assert problems[0].startswith(
        "queue.reap.lease_reap_budget_seconds = 61.0 is more than queue.reap.interval_seconds "
        "= 60: a pass is cut at its interval"
    ), problems
    assert "lower the budget to at most 60" in problems[0]
    fits = tmp_path / "fits"
    drop_in(fits, "50-test.toml", {"queue.reap": {"lease_reap_budget_seconds": 60}})
    assert load_config(fits, environ={}).settings.queue.reap.lease_reap_budget() == 60


def test_the_timeout_check_runs_even_when_another_key_is_invalid(tmp_path: Path) -> None:
    problems = reap_problems(
        tmp_path, consumer_timeout_seconds=100, longest_lease_seconds=200, interval_seconds=0
    )

    assert any(p.startswith("queue.reap.interval_seconds = 0") for p in problems)
    assert any(p.startswith("queue.reap.consumer_timeout_seconds = 100 is below") for p in problems)
    assert len(problems) == 2


def test_a_timeout_equal_to_the_lease_is_accepted(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    drop_in(
        directory,
        "10.toml",
        {"queue.reap": {"consumer_timeout_seconds": 600, "longest_lease_seconds": 600}},
    )

    assert load_config(directory, environ={}).settings.queue.reap.consumer_timeout_seconds == 600


def test_a_pattern_that_matches_nothing_declares_no_consumerless_queue(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    drop_in(directory, "10.toml", {"queue.reap": {"consumerless_queue_pattern": "(?!)"}})

    assert load_config(directory, environ={}).settings.thresholds().consumerless_queue_pattern == (
        "(?!)"
    )


def test_every_foreign_name_is_checked() -> None:
    assert FOREIGN_QUEUE_NAMES == ("celery", "amq.gen-JzTY20BRgKO-HjmUJj0wLg", "agent.x.inbox")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("stale_ready_seconds", "600", "must be an integer, not a string"),
        ("stale_ready_seconds", True, "must be an integer, not a boolean"),
        ("stale_ready_seconds", 600.0, "must be an integer, not a float"),
        ("stale_ready_seconds", 10**30, "is above 31536000"),
        ("stale_ready_seconds", -5, "is below 1"),
        ("stale_ready_seconds", ["600"], "must be an integer, not an array"),
        ("enabled", 1, "must be true or false, not an integer"),
        ("enabled", "yes", "must be true or false, not a string"),
        ("policy_verify_wait_seconds", float("nan"), "must be a finite number"),
        ("policy_verify_wait_seconds", True, "must be a number, not a boolean"),
        ("owned_queue_pattern", 5, "must be a string, not an integer"),
        ("known_phases", "build", "must be a list of strings, not a string"),
    ],
)
def test_wrong_types_and_numbers_are_problems(
    tmp_path: Path, key: str, value: Any, expected: str
) -> None:
    (problem,) = reap_problems(tmp_path, **{key: value})

    assert problem.startswith(f"queue.reap.{key} = "), problem
    assert expected in problem


def test_infinity_and_huge_floats_are_refused(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    directory.mkdir()
    (directory / "10.toml").write_text(
        "[queue.reap]\npolicy_verify_wait_seconds = inf\n[bus]\ntimeout_seconds = 1e300\n"
        "[database]\nstatement_timeout_seconds = -inf\npool_size = 0\n"
    )

    problems = problems_of(directory)

    assert len(problems) == 4
    assert "queue.reap.policy_verify_wait_seconds = inf must be a finite number" in problems[0]
    assert problems[1].startswith("bus.timeout_seconds = 1e+300 is above 600")
    assert problems[2].startswith("database.pool_size = 0 is below 1")
    assert problems[3].startswith("database.statement_timeout_seconds = -inf must be a finite")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "is below 0.1: 0 means no timeout at all to PostgreSQL"),
        (0.05, "is below 0.1"),
        (31, "is above 30.0: the host's traffic queues behind a migration"),
    ],
)
def test_the_migration_lock_timeout_is_short_and_never_none(
    tmp_path: Path, value: float, expected: str
) -> None:
    directory = tmp_path / "conf.d"
    drop_in(directory, "50-test.toml", {"database": {"lock_timeout_seconds": value}})

    (problem,) = problems_of(directory)

    assert problem.startswith(f"database.lock_timeout_seconds = {value} "), problem
    assert expected in problem
    loaded = load_config(None, environ={"REAPER_DATABASE__LOCK_TIMEOUT_SECONDS": "0.5"})
    assert loaded.settings.database.lock_timeout_seconds == 0.5


def test_environment_values_are_converted_then_validated_strictly() -> None:
    problems = problems_of(
        None,
        {
            "REAPER_QUEUE__REAP__STALE_READY_SECONDS": "true",
            "REAPER_QUEUE__REAP__INTERVAL_SECONDS": "1.5",
            "REAPER_QUEUE__REAP__ENABLED": "maybe",
            "REAPER_QUEUE__REAP__KNOWN_PHASES": "build,test",
            "REAPER_BUS__TIMEOUT_SECONDS": "nan",
        },
    )

    assert problems == [
        "queue.reap.enabled = 'maybe' must be true or false (from env:REAPER_QUEUE__REAP__ENABLED)",
        "queue.reap.interval_seconds = '1.5' must be an integer "
        "(from env:REAPER_QUEUE__REAP__INTERVAL_SECONDS)",
        "queue.reap.stale_ready_seconds = 'true' must be an integer "
        "(from env:REAPER_QUEUE__REAP__STALE_READY_SECONDS)",
        "queue.reap.known_phases = 'build,test' must be a list of strings "
        "(from env:REAPER_QUEUE__REAP__KNOWN_PHASES)",
        "bus.timeout_seconds = nan must be a finite number (from env:REAPER_BUS__TIMEOUT_SECONDS)",
    ]


def test_unknown_keys_and_tables_are_problems_not_defaults(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    path = drop_in(
        directory,
        "10-typo.toml",
        {"queue.reap": {"stale_ready_secs": 5}, "queue.rep": {"x": 1}, "busses": {"vhost": "/"}},
    )

    problems = problems_of(directory, {"REAPER_BUS__PASWORD": "x"})

    assert problems == [
        "queue.reap.stale_ready_secs is not a known key of [queue.reap] "
        f"(did you mean stale_ready_seconds?) (from file:{path})",
        f"queue.rep is not a known key of [queue] (did you mean reap?) (from file:{path})",
        "bus.pasword is not a known key of [bus] (did you mean password?) "
        "(from env:REAPER_BUS__PASWORD)",
        "[busses] is not a known table (the tables are [queue.reap], [bus], [database]) "
        f"(from file:{path})",
    ]


def test_malformed_toml_names_the_file_and_the_line(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    directory.mkdir()
    good = drop_in(directory, "10-good.toml", {"queue.reap": {"interval_seconds": 0}})
    bad = directory / "20-bad.toml"
    bad.write_text('[queue.reap]\nstale_ready_seconds = 60\nowned_queue_pattern = "unclosed\n')
    (directory / "30-binary.toml").write_bytes(b"\xff\xfe[bus]")

    problems = problems_of(directory)

    assert problems[0].startswith(f"{bad}: not valid TOML: ")
    assert "line 3" in problems[0]
    assert problems[1].startswith(f"{directory / '30-binary.toml'}: not UTF-8")
    assert problems[2].startswith("queue.reap.interval_seconds = 0 is below 1: ")
    assert problems[2].endswith(f"(from file:{good})")


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    drop_in(
        directory,
        "10.toml",
        {
            "queue.reap": {
                "interval_seconds": 0,
                "owned_queue_pattern": ".*",
                "dead_letter_peek_limit": 5000,
                "consumer_timeout_seconds": 60,
            },
            "bus": {"management_url": "amqp://broker:5672", "username": ""},
            "database": {"dsn": "mysql://db/x", "pool_size": "4"},
        },
    )

    with pytest.raises(ConfigError) as caught:
        load_config(directory, environ={"REAPER_QUEUE__REAP__DELIVERY_LIMIT": "-1"})

    named = [p.split(" ", 1)[0] for p in caught.value.problems]
    # the cross-field problem is reported with its key, in declaration order
    assert named == [
        "queue.reap.interval_seconds",
        "queue.reap.consumer_timeout_seconds",
        "queue.reap.delivery_limit",
        "queue.reap.owned_queue_pattern",
        "queue.reap.dead_letter_peek_limit",
        "bus.management_url",
        "bus.username",
        "database.dsn",
        "database.pool_size",
    ]
    assert all(p in str(caught.value) for p in caught.value.problems)


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("bus.management_url", "http://admin:Pw-9f2c1e77aa@rabbit:15672"),
        ("bus.management_url", "https://admin:Pw-9f2c1e77aa@rabbit/"),
        ("database.dsn", "postgresql://reaper:Pw-9f2c1e77aa@db:5432/jobs"),
        ("database.dsn", "postgresql://db:5432/jobs?sslmode=require&password=Pw-9f2c1e77aa"),
    ],
)
@pytest.mark.parametrize("source", ["file", "env"])
def test_credentials_in_a_url_are_refused_without_echoing_them(
    tmp_path: Path, key: str, value: str, source: str
) -> None:
    table, name = key.split(".")
    directory = tmp_path / "conf.d"
    environ = {}
    if source == "file":
        drop_in(directory, "10.toml", {table: {name: value}})
    else:
        directory.mkdir()
        environ[f"REAPER_{table.upper()}__{name.upper()}"] = value

    with pytest.raises(ConfigError) as caught:
        load_config(directory, environ=environ)

    (problem,) = caught.value.problems
    assert problem.startswith(key)
    assert "password" in problem
    for text in (problem, str(caught.value), repr(caught.value), repr(caught.value.args)):
        assert "Pw-9f2c1e77aa" not in text


def test_a_dsn_with_only_a_user_is_fine(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    drop_in(directory, "10.toml", {"database": {"dsn": "postgres://reaper@db/jobs"}})

    assert load_config(directory, environ={}).settings.database.dsn == "postgres://reaper@db/jobs"


@pytest.mark.parametrize("url", ["amqp://rabbit:5672", "rabbit:15672", "http://", "http://h:x/"])
def test_a_management_url_must_be_http(tmp_path: Path, url: str) -> None:
    (problem,) = problems_of(None, {"REAPER_BUS__MANAGEMENT_URL": url})

    assert problem.startswith(f"bus.management_url = '{url}' ")


def test_no_problem_echoes_a_password(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    drop_in(
        directory,
        "10.toml",
        {
            "bus": {"password": "Pw-bus-4417", "passwd": "Pw-typo-5521"},
            "database": {"password": 123456789},
            "queue.reap": {"owned_queue_pattern": "Pw-bus-4417|.*"},
        },
    )

    with pytest.raises(ConfigError) as caught:
        load_config(directory, environ={"REAPER_DATABASE__PASSWORD": "Pw-db-7730"})

    text = "\n".join([*caught.value.problems, str(caught.value), repr(caught.value)])
    for secret in ("Pw-bus-4417", "Pw-typo-5521", "Pw-db-7730"):
        assert secret not in text
    assert "bus.passwd is not a known key of [bus]" in text


def test_a_password_of_the_wrong_type_is_not_shown(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    drop_in(directory, "10.toml", {"database": {"password": 987654321}})

    (problem,) = problems_of(directory)

    assert problem.startswith("database.password must be a string")
    assert "987654321" not in problem


def test_a_successful_load_registers_the_passwords_for_scrubbing() -> None:
    load_config(
        None,
        environ={"REAPER_BUS__PASSWORD": "Pw-bus-1001", "REAPER_DATABASE__PASSWORD": "Pw-db-2002"},
    )

    assert scrub("connect failed with Pw-bus-1001 and Pw-db-2002") == (
        "connect failed with *** and ***"
    )


def test_show_masks_secrets_and_names_origins(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    path = drop_in(directory, "10.toml", {"bus": {"password": "Pw-file-3003", "vhost": "jobs"}})
    environ = {"REAPER_DATABASE__PASSWORD": "Pw-env-4004"}

    loaded = load_config(directory, environ=environ)
    shown = {v.key: v for v in show(loaded)}

    assert list(shown) == LEAF_KEYS
    assert shown["bus.password"] == ConfigValue("bus.password", "***", f"file:{path}")
    assert shown["database.password"] == ConfigValue(
        "database.password", "***", "env:REAPER_DATABASE__PASSWORD"
    )
    assert shown["bus.vhost"] == ConfigValue("bus.vhost", "jobs", f"file:{path}")
    assert shown["bus.username"] == ConfigValue("bus.username", "guest", "default")
    for text in (repr(loaded), str(loaded), repr(show(loaded)), repr(loaded.settings)):
        assert "Pw-file-3003" not in text
        assert "Pw-env-4004" not in text

    unmasked = {v.key: v.value for v in show(loaded, masked=False)}
    assert unmasked["bus.password"] == "Pw-file-3003"
    assert unmasked["database.password"] == "Pw-env-4004"


def test_show_leaves_an_unset_password_unset() -> None:
    shown = {v.key: v.value for v in show(load_config(None, environ={}))}

    assert shown["database.password"] is None
    assert shown["bus.password"] == "***"


# --------------------------------------------------------------------------- shipped files


def test_the_shipped_defaults_equal_the_code_defaults() -> None:
    shipped = load_config(SHIPPED, environ={})

    assert shipped.settings == load_config(None, environ={}).settings
    assert shipped.files == (SHIPPED / "10-defaults.toml",)
    origins = {v.key: v.origin for v in shipped.values}
    for key in LEAF_KEYS:
        unset = key in SECRET_KEYS | UNSET_KEYS
        expected = "default" if unset else f"file:{SHIPPED / '10-defaults.toml'}"
        assert origins[key] == expected, key


def test_the_shipped_defaults_document_every_key() -> None:
    text = (SHIPPED / "10-defaults.toml").read_text(encoding="utf-8")
    declared = tomllib.loads(text)
    leaves = {
        f"{table}.{key}"
        for table, keys in [
            ("queue.reap", declared["queue"]["reap"]),
            ("bus", declared["bus"]),
            ("database", declared["database"]),
        ]
        for key in keys
    }

    assert leaves == set(LEAF_KEYS) - SECRET_KEYS - UNSET_KEYS
    assert text.count('# password = "..."') == 2
    assert "\n# management_urls = [" in text
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line and not line.startswith(("#", "[")):
            assert lines[number - 1].startswith("#"), f"undocumented: {line}"


def test_the_broker_snippet_matches_the_default_consumer_timeout() -> None:
    text = (SHIPPED / "rabbitmq" / "20-vibey-reap.conf").read_text(encoding="utf-8")
    settings = {
        key.strip(): value.strip()
        for key, _, value in (
            line.partition("=") for line in text.splitlines() if line and not line.startswith("#")
        )
    }

    default = QueueReapSettings.model_fields["consumer_timeout_seconds"].default
    assert settings == {"consumer_timeout": str(default * 1000)}


def test_settings_alone_reads_only_its_defaults_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.upper().startswith("REAPER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("REAPER_QUEUE__REAP__STALE_READY_SECONDS", "321")

    settings = Settings()

    assert settings.queue.reap.stale_ready_seconds == 321
    assert isinstance(settings.bus.password, SecretStr)
