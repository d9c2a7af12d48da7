"""What one pass needs of the configuration, derived once as the pass begins.

What one pass needs of the configuration, derived once as the pass begins (SPEC §2): the
thresholds it judges against, its budgets, the dispatch declared, what the policies are filled
with. The steps take this frozen value, never the whole :class:`~reaper.config.Settings`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from reaper.config import Settings
from reaper.core.domain import Thresholds
from reaper.jobqueue.database import where
from reaper.policies.declarations import DEFAULT_POLICY_DIR, PolicyParameters

__all__ = ["PassConfig", "policy_parameters"]


@dataclass(frozen=True)
class PassConfig:
    thresholds: Thresholds
    #: The vhost the pass reads (its observations and quiet marks are kept under it).
    vhost: str
    #: The broker's user, as a note names it when it cannot see another user's consumers.
    user: str
    #: Where the database is, without credentials (``host:port/name``), for the report.
    database: str
    #: ``[queue.reap] dispatch`` as declared: ``polling``, ``outbox`` or ``auto``.
    dispatch: str
    #: The consumer timeout the reaper declares, in ms, against the broker's own.
    consumer_timeout_ms: int
    lease_reap_budget_seconds: float
    policies: PolicyParameters
    policies_dir: Path
    policy_verify_wait_seconds: float
    #: The warning every report carries while the management API's TLS is not verified.
    tls_warning: str | None
    project_id: UUID | None = None

    @classmethod
    def of(
        cls,
        settings: Settings,
        *,
        project_id: UUID | None = None,
        policies_dir: Path | None = None,
    ) -> PassConfig:
        reap, thresholds = settings.queue.reap, settings.thresholds()
        return cls(
            thresholds=thresholds,
            vhost=settings.bus.vhost,
            user=settings.bus.username,
            database=where(settings.database.dsn),
            dispatch=reap.dispatch,
            consumer_timeout_ms=reap.consumer_timeout_seconds * 1000,
            lease_reap_budget_seconds=reap.lease_reap_budget(),
            policies=policy_parameters(settings),
            policies_dir=policies_dir or DEFAULT_POLICY_DIR,
            policy_verify_wait_seconds=reap.policy_verify_wait_seconds,
            tls_warning=settings.bus.tls_warning(),
            project_id=project_id,
        )


def policy_parameters(settings: Settings) -> PolicyParameters:
    """The values the declarations' placeholders take from ``[queue.reap]`` and ``[bus]``."""
    return PolicyParameters.from_thresholds(
        settings.thresholds(),
        prefix=settings.bus.prefix,
        policy_priority=settings.queue.reap.policy_priority,
    )
