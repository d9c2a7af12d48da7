"""The declared configuration's model: every key, its default, its bounds and why.

The declared configuration's model (SPEC §2): every key, its default, its bounds and why
each bound exists, side by side.

The judging thresholds take their defaults from :class:`reaper.core.domain.Thresholds`, the one
home of those values; a bound's reasons (``below``/``above``) travel with its field, and
:mod:`reaper.config.problems` reads them from there when it tells an operator what is wrong.
Sections are strict (``"600"`` is not a number in a file) and forbid unknown keys: a typo is a
problem, never a silent default. ``[bus]`` and ``[database]`` are in
:mod:`reaper.config.connections`, the pieces of every section in :mod:`reaper.config.fields`.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Final, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from reaper.config.connections import BusSettings, DatabaseSettings
from reaper.config.fields import (
    MAX_COUNT,
    SECTION,
    YEAR,
    bound_reasons,
    bounded,
    cross_field,
    refused,
)
from reaper.config.sources import ENV_DELIMITER, ENV_PREFIX, EnvironSource
from reaper.core.domain import Thresholds

__all__ = [
    "FOREIGN_QUEUE_NAMES",
    "BusSettings",
    "DatabaseSettings",
    "QueueReapSettings",
    "QueueSettings",
    "Settings",
    "bound_reasons",
]

#: Queues of other systems on a shared broker: Celery's default queue, a server-named queue,
#: an agent's inbox. An owned pattern matching one of them would reap what is not ours.
FOREIGN_QUEUE_NAMES: Final = ("celery", "amq.gen-JzTY20BRgKO-HjmUJj0wLg", "agent.x.inbox")

#: Varied queue names (short, so a careless pattern cannot backtrack for long). A pattern
#: matching every one of them is a catch-all. Queue names are never empty, so ``""`` is not
#: among them: ``.`` matches every real queue and is refused as a catch-all.
_PROBE_QUEUE_NAMES: Final = (
    "x",
    "Q",
    "7",
    "_",
    "-",
    ".",
    "celery",
    "zz.top",
    "amq.gen-abc",
    "agent.x.inbox",
    "vibey.jobs",
    "vibey.jobs.dlq",
    "vibey.wait.30s",
    "jobs.dead",
    "UPPER_CASE",
    "a b",
    "очередь",
    "队列",
    "ü-β.λ",
)

_DEFAULTS = Thresholds()


class QueueReapSettings(BaseModel):
    """``[queue.reap]``: the thresholds the pass judges against and how it runs."""

    model_config = SECTION

    enabled: bool = Field(
        default=True,
        description="run the automatic hook in workers' idle loops "
        "(on-demand passes and the lease reap always run)",
    )
    interval_seconds: int = bounded(
        60,
        ge=1,
        le=86400,
        description="a pass every so often; also the consumerless slack",
        below="a pass needs a period of at least a second",
        above="a pass less than daily would leave stuck work unseen for days",
    )
    lease_reap_budget_seconds: float | None = bounded(
        None,
        gt=0,
        le=86400,
        finite=True,
        description="how long one pass's lease reap may page through expired leases before it "
        "stops and hands the rest to the next turn, which comes at once; default: half of "
        "interval_seconds",
        below="a lease reap needs some time to move anything",
        above="a budget over a day is a typo, not a budget",
    )
    lease_grace_seconds: int = bounded(
        _DEFAULTS.lease_grace_seconds,
        ge=0,
        le=86400,
        description="how long past its expiry a lease is left alone",
        below="a grace cannot be negative",
        above="a grace over a day leaves a dead holder's job unreaped for longer than anyone waits",
    )
    stale_ready_seconds: int = bounded(
        _DEFAULTS.stale_ready_seconds,
        ge=1,
        le=YEAR,
        description="a claimable job unclaimed this long (or a head message) is stale",
        below="every claimable job would be stale the moment it became claimable",
        above="a threshold over a year is a typo, not a threshold",
    )
    longest_lease_seconds: int = bounded(
        _DEFAULTS.longest_lease_seconds,
        ge=1,
        le=YEAR,
        description="the longest lease a handler holds",
        below="a lease lasts at least a second",
        above="a lease over a year is a typo, not a lease",
    )
    consumer_timeout_seconds: int = bounded(
        _DEFAULTS.consumer_timeout_seconds,
        ge=1,
        le=YEAR,
        description="the broker's consumer timeout on owned queues (by policy)",
        below="the broker would cancel every consumer at once",
        above="a timeout over a year is no bound at all",
    )
    delivery_limit: int = bounded(
        _DEFAULTS.delivery_limit,
        ge=1,
        le=MAX_COUNT,
        description="deliveries of a quorum message before it dies",
        below="a message must be deliverable at least once",
        above="the broker's limit is a 32-bit integer",
    )
    owned_queue_pattern: str = Field(
        default=_DEFAULTS.owned_queue_pattern,
        description="queues we own (re.search): their dead letters are parked",
    )
    dead_letter_queue_pattern: str = Field(
        default=_DEFAULTS.dead_letter_queue_pattern, description="dead-letter queues (re.search)"
    )
    consumerless_queue_pattern: str = Field(
        default=_DEFAULTS.consumerless_queue_pattern,
        description="queues that hold messages with no consumer on purpose",
    )
    dead_letter_min_depth: int = bounded(
        _DEFAULTS.dead_letter_min_depth,
        ge=1,
        le=MAX_COUNT,
        description="a dead-letter queue this deep is reported",
        below="a depth of 0 would report every empty dead-letter queue",
        above="the depth is a 32-bit integer",
    )
    dead_letter_peek_limit: int = bounded(
        _DEFAULTS.dead_letter_peek_limit,
        ge=1,
        le=1000,
        description="new dead letters parked per queue per pass",
        below="a pass must be able to park at least one dead letter",
        above="a pass reads at most 1000 dead letters per queue, so that it stays bounded",
    )
    policy_priority: int = bounded(
        0,
        ge=0,
        le=MAX_COUNT,
        description="priority of the reconciled broker policies",
        below="RabbitMQ policy priorities are not negative",
        above="the priority is a 32-bit integer",
    )
    policy_verify_wait_seconds: float = bounded(
        10.0,
        ge=0,
        le=120,
        finite=True,
        description="how long verification waits for the broker's statistics",
        below="a wait cannot be negative",
        above="a pass waits at most two minutes for the broker's statistics",
    )
    known_phases: list[str] = Field(
        default_factory=list,
        description="only jobs in these phases are claimable; empty: every phase",
    )
    dispatch: Literal["auto", "polling", "outbox"] = Field(
        default="auto",
        description="how the host hands ready work to its workers: polling the job table, or an "
        "outbox a relay publishes to RabbitMQ (job.dispatch_seq, job_outbox); auto: as the "
        "schema shows, at each pass",
    )

    @field_validator("owned_queue_pattern")
    @classmethod
    def _owned_pattern(cls, pattern: str) -> str:
        rx = _compiled(pattern)
        _refuse_catch_all(rx, "every queue would be ours, another system's included")
        for foreign in FOREIGN_QUEUE_NAMES:
            if rx.search(foreign):
                raise refused(
                    f"matches the foreign queue '{foreign}': the reaper would treat another "
                    "system's queue as its own and park its dead letters"
                )
        return pattern

    @field_validator("dead_letter_queue_pattern")
    @classmethod
    def _dead_letter_pattern(cls, pattern: str) -> str:
        _refuse_catch_all(_compiled(pattern), "every queue would be read as a dead-letter queue")
        return pattern

    @field_validator("consumerless_queue_pattern")
    @classmethod
    def _consumerless_pattern(cls, pattern: str) -> str:
        _refuse_catch_all(
            _compiled(pattern),
            "no queue would ever be judged stale (to declare no consumerless queue, "
            "use a pattern that matches nothing, such as '(?!)')",
        )
        return pattern

    @field_validator("policy_verify_wait_seconds")
    @classmethod
    def _wait_fits_the_interval(cls, wait: float, info: ValidationInfo) -> float:
        # interval_seconds comes first: it is in info.data only when valid itself.
        interval = info.data.get("interval_seconds")
        if isinstance(interval, int) and wait * 2 > interval:
            raise cross_field(
                "queue.reap.policy_verify_wait_seconds = {wait} is more than half of "
                "queue.reap.interval_seconds = {interval}: a pass is cut at its interval, so "
                "a pass that writes a policy and waits this long could be cut before it verifies "
                "or parks anything; lower the wait to at most {most} or raise the interval",
                wait=wait,
                interval=interval,
                most=interval / 2,
            )
        return wait

    @field_validator("lease_reap_budget_seconds")
    @classmethod
    def _budget_fits_the_interval(cls, budget: float | None, info: ValidationInfo) -> float | None:
        # interval_seconds comes first: it is in info.data only when valid itself.
        interval = info.data.get("interval_seconds")
        if not isinstance(interval, int):
            return budget
        if budget is None:
            return interval / 2
        if budget > interval:
            raise cross_field(
                "queue.reap.lease_reap_budget_seconds = {budget} is more than "
                "queue.reap.interval_seconds = {interval}: a pass is cut at its interval, so "
                "the lease reap would be cut before its budget is spent and before it reports "
                "what remains; lower the budget to at most {interval} or raise the interval",
                budget=budget,
                interval=interval,
            )
        return budget

    def lease_reap_budget(self) -> float:
        """The lease reap's time budget in seconds (half of the interval unless declared)."""
        budget = self.lease_reap_budget_seconds
        return budget if budget is not None else self.interval_seconds / 2

    @field_validator("known_phases")
    @classmethod
    def _phases(cls, phases: list[str]) -> list[str]:
        if any(not phase.strip() for phase in phases):
            raise refused("holds an empty phase name, which no job has")
        return phases

    @field_validator("consumer_timeout_seconds")
    @classmethod
    def _timeout_outlasts_lease(cls, timeout: int, info: ValidationInfo) -> int:
        # Fields validate in order and longest_lease_seconds comes first: it is in info.data
        # only when it is valid itself, so this runs beside every other key's problems.
        lease = info.data.get("longest_lease_seconds")
        if isinstance(lease, int) and timeout < lease:
            raise cross_field(
                "queue.reap.consumer_timeout_seconds = {timeout} is below "
                "queue.reap.longest_lease_seconds = {lease}: the broker would cancel a "
                "consumer still inside its lease",
                timeout=timeout,
                lease=lease,
            )
        return timeout

    def thresholds(self) -> Thresholds:
        """The judging subset, as the pure judge takes it."""
        return Thresholds(
            lease_grace_seconds=self.lease_grace_seconds,
            stale_ready_seconds=self.stale_ready_seconds,
            longest_lease_seconds=self.longest_lease_seconds,
            consumer_timeout_seconds=self.consumer_timeout_seconds,
            delivery_limit=self.delivery_limit,
            owned_queue_pattern=self.owned_queue_pattern,
            dead_letter_queue_pattern=self.dead_letter_queue_pattern,
            consumerless_queue_pattern=self.consumerless_queue_pattern,
            dead_letter_min_depth=self.dead_letter_min_depth,
            dead_letter_peek_limit=self.dead_letter_peek_limit,
            consumerless_slack_seconds=self.interval_seconds,
            known_phases=frozenset(self.known_phases),
        )


class QueueSettings(BaseModel):
    """``[queue]``: holds only ``[queue.reap]``."""

    model_config = SECTION

    reap: QueueReapSettings = Field(default_factory=lambda: QueueReapSettings())


class Settings(BaseSettings):
    """The effective configuration. ``Settings()`` alone reads only the process environment;
    :func:`reaper.config.load_config` adds the drop-ins and reports every problem."""

    # Each section is strict itself; the environment's strings are converted by
    # ``EnvironSource`` before they reach it.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        case_sensitive=False,
        extra="forbid",
        frozen=True,
    )

    queue: QueueSettings = Field(default_factory=lambda: QueueSettings())
    bus: BusSettings = Field(default_factory=lambda: BusSettings())
    database: DatabaseSettings = Field(default_factory=lambda: DatabaseSettings())

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Earlier wins: the arguments, then the process environment. No dotenv file, no
        # secrets directory of pydantic-settings' own: load_config reads those itself.
        return (init_settings, EnvironSource(settings_cls, os.environ))

    def thresholds(self) -> Thresholds:
        """The judging subset, as the pure judge takes it."""
        return self.queue.reap.thresholds()


# --------------------------------------------------------------------------- refusals


def _compiled(pattern: str) -> re.Pattern[str]:
    """The compiled pattern, or a refusal naming why it is not one."""
    if pattern == "":
        raise refused("is empty: an empty pattern matches every queue name")
    try:
        # A pattern Python warns about (a possible nested set) means something else in a
        # later Python: ambiguous, so refused rather than guessed.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return re.compile(pattern)
    except re.error as exc:
        raise refused(f"is not a valid regular expression ({exc})") from None
    except Warning as exc:
        raise refused(f"is an ambiguous regular expression ({exc})") from None
    except (OverflowError, RecursionError, ValueError, MemoryError) as exc:
        raise refused(f"is not a valid regular expression ({type(exc).__name__})") from None


def _refuse_catch_all(rx: re.Pattern[str], consequence: str) -> None:
    if all(rx.search(name) for name in _PROBE_QUEUE_NAMES):
        raise refused(f"matches every queue name: {consequence}")
