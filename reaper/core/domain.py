"""The reaper's vocabulary: what is measured, what is judged, what is recorded.

Everything here is a frozen value. Nothing in this module reads a clock, logs or does I/O;
the adapters (:mod:`reaper.jobqueue`, :mod:`reaper.broker`) build these values and the pure
judge (:mod:`reaper.core.judge`) reads them.
The string values of the enums are the exact words that appear in ledger events, reports
and metric labels (SPEC §1), so they must never be renamed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final
from uuid import UUID

from reaper.core.enforcement import TimeoutEnforcement
from reaper.core.letters import Letter
from reaper.core.observation import Observed
from reaper.core.values import mapping

#: The reserved project id of the fleet stream: broker sightings and dead-letter parks,
#: which belong to no single project, are recorded here.
FLEET_PROJECT_ID = UUID("00000000-0000-0000-0000-000000000000")

#: The ledger event kind every verdict is recorded as.
EVENT_KIND = "QueueReaped"

#: Gate kinds the reaper raises.
GATE_DELIVERY_EXHAUSTED = "delivery_exhausted"
GATE_BUS_DEAD_LETTERED = "bus_dead_lettered"

#: The kind of the parked job a dead letter becomes.
DEAD_LETTER_JOB_KIND = "bus.dead_letter"


class Source(StrEnum):
    JOB_QUEUE = "job_queue"
    BROKER = "broker"


class Condition(StrEnum):
    HUNG_HANDLER = "hung_handler"
    LEASE_EXPIRED = "lease_expired"
    HOLDER_GONE = "holder_gone"
    POISON = "poison"
    STALE_READY = "stale_ready"
    DEAD_LETTER = "dead_letter"
    UNBOUNDED = "unbounded"
    #: A ready job whose dispatch message was never sent (the host's outbox relay is down).
    LOST_DISPATCH = "lost_dispatch"


#: The conditions each source can surface (an open finding): the judge's surface verdicts. A
#: lease is requeued or parked, never surfaced, and a job queue has no holder, unbounded queue
#: or dead letter: ``reaper_conditions_open`` exports only these pairs.
SURFACED_CONDITIONS: Final = {
    "job_queue": ("stale_ready", "lost_dispatch"),
    "broker": ("hung_handler", "holder_gone", "stale_ready", "dead_letter", "unbounded"),
}


class Dispatch(StrEnum):
    """How the host hands ready work to its workers (SPEC §3): its workers poll ``job``, or
    each new dispatch episode bumps ``job.dispatch_seq`` and writes a ``job_outbox`` row that a
    relay publishes to RabbitMQ (ADR-0044 §4)."""

    POLLING = "polling"
    OUTBOX = "outbox"


class Action(StrEnum):
    REQUEUE = "requeue"
    PARK = "park"
    SURFACE = "surface"
    CLEARED = "cleared"
    NONE = "none"


class Unit(StrEnum):
    SECONDS = "seconds"
    ATTEMPTS = "attempts"
    MESSAGES = "messages"


@dataclass(frozen=True)
class Thresholds:
    """The judging subset of ``[queue.reap]`` (SPEC §2), already validated. These defaults are
    the defaults: :mod:`reaper.config` declares each key with the value given here, beside its
    bounds and the reason for each."""

    lease_grace_seconds: int = 0
    stale_ready_seconds: int = 900
    longest_lease_seconds: int = 7200
    consumer_timeout_seconds: int = 21600
    delivery_limit: int = 20
    owned_queue_pattern: str = r"^vibey\."
    dead_letter_queue_pattern: str = r"(\.dlq|\.dead)$"
    consumerless_queue_pattern: str = r"\.wait\."
    dead_letter_min_depth: int = 1
    dead_letter_peek_limit: int = 100
    #: Slack granted to a consumerless-by-design queue beyond its own ``x-message-ttl``:
    #: one pass period, since a message can expire just after a pass looked at it.
    consumerless_slack_seconds: int = 60
    known_phases: frozenset[str] = frozenset()


# --------------------------------------------------------------------------- measurements


@dataclass(frozen=True)
class HeldLease:
    """A ``leased`` job as read from PostgreSQL (normally only those already expired)."""

    job_id: UUID
    project_id: UUID
    kind: str
    lease_owner: str | None
    lease_expires_at: datetime
    attempts: int
    max_attempts: int


@dataclass(frozen=True)
class ClaimableHead:
    """The oldest claimable job of one project and the moment it became claimable:
    the later of its ``run_after`` and its last dependency's success."""

    project_id: UUID
    job_id: UUID
    kind: str
    claimable_since: datetime


@dataclass(frozen=True)
class QueueCounters:
    """A queue's counters as the management API lists them, each None where it lists none:
    a counter not listed is unknown, never zero (RabbitMQ lists none before the first event it
    counts, and none again after a restart or a new declaration; LavinMQ lists only what was
    asked for at the top level). Measured on RabbitMQ 3.10, 4.0 and 4.3: a requeueing ``get``
    adds one to ``deliver_get`` per message returned, and a letter the broker dead-letters into
    a queue adds nothing to its ``publish`` (only a publisher's message does)."""

    #: ``message_stats.publish``: messages published to the queue by a publisher.
    published: int | None = None
    #: ``message_stats.deliver_get``: deliveries and gets of every kind, requeued ones too.
    fetched: int | None = None
    #: ``message_stats.ack``: deliveries acknowledged (each one removed a message).
    acknowledged: int | None = None
    #: ``message_bytes``: the bodies' bytes on the queue, ready and unacknowledged.
    message_bytes: int | None = None


@dataclass(frozen=True)
class QueueStats:
    """One queue as the management API lists it (column-projected).

    ``type`` is None where the broker does not say (LavinMQ). ``effective_policy`` is the
    ``effective_policy_definition`` the broker reports as in force (empty when none or not
    reported); ``arguments`` are the queue's declared ``x-`` arguments.
    """

    vhost: str
    name: str
    type: str | None
    messages_ready: int
    messages_unacknowledged: int
    consumers: int
    head_message_timestamp: int | None = None
    policy: str | None = None
    effective_policy: Mapping[str, Any] = field(default_factory=dict)
    arguments: Mapping[str, Any] = field(default_factory=dict)
    #: False when the broker listed the queue before its statistics arrived (a queue a few
    #: seconds old): it then shows no message or consumer counts, and the zeros above are not
    #: a measurement.
    counts_known: bool = True
    #: False when the broker did not list ``policy``/``effective_policy_definition`` for the
    #: queue: on RabbitMQ these arrive with the statistics too, so a fresh queue's ``policy``
    #: of None means "not yet known", not "no policy".
    policy_known: bool = True
    #: The delivery limit in force as the broker itself reports it on the queue (RabbitMQ 4.x
    #: lists ``delivery_limit``: the resolved value of policy, argument and the default 20;
    #: ``"unlimited"`` is given here as -1). None where the broker does not report it (3.x,
    #: classic queues, LavinMQ).
    reported_delivery_limit: int | None = None
    #: ``message_stats.deliver_get``: deliveries and gets from the queue so far (0 where the
    #: broker lists none: nothing delivered yet, or a node restarted and its counters began
    #: again); None when the queue's counts are not known.
    deliveries: int | None = None
    #: Where the queue lives in a cluster, as listed: its ``state`` (``running``; ``down``
    #: when its node is gone, ``minority`` when a replicated queue lost its majority), the
    #: node that serves it (a replicated queue's leader), and a replicated queue's members
    #: and the members online (None where the broker does not list them: classic queues).
    #: Read through :func:`reaper.core.cluster.queue_unavailable`.
    state: str | None = None
    node: str | None = None
    members: tuple[str, ...] | None = None
    online: tuple[str, ...] | None = None
    #: The counters a quiet pass is decided from (:mod:`reaper.core.dead_letters.quiet`).
    counters: QueueCounters = field(default_factory=QueueCounters)

    @property
    def messages(self) -> int:
        return self.messages_ready + self.messages_unacknowledged

    @property
    def kind(self) -> str:
        """The queue's type as the reaper reads it: the type listed, else the declared
        ``x-queue-type`` argument, else ``classic`` (LavinMQ lists no type; its queues are
        classic ones)."""
        if self.type is not None:
            return self.type
        declared = mapping(self.arguments).get("x-queue-type")
        return declared if isinstance(declared, str) and declared else "classic"


@dataclass(frozen=True)
class BrokerNode:
    """One node of the broker as ``/api/nodes`` lists it. A stopped node is listed with
    ``running: false`` and nothing else (measured on a 4.3 cluster), so its ``config_files``
    are None: unknown, never empty."""

    name: str
    running: bool
    config_files: tuple[str, ...] | None = None


@dataclass(frozen=True)
class BrokerFacts:
    """What the broker is, what it accepts and enforces, and what is in force broker-wide,
    read from ``/api/overview`` and the node. The version's profile comes from
    :func:`reaper.broker.capabilities.capabilities_for`."""

    product: str  # "RabbitMQ" or "LavinMQ"
    version: str
    #: Whether the policy key ``consumer-timeout`` is accepted.
    policy_consumer_timeout: bool
    #: Whether ``apply-to`` accepts ``classic_queues``/``quorum_queues``.
    policy_apply_to_queue_type: bool
    #: Whether ``delivery-limit: -1`` is accepted and means unlimited.
    unlimited_delivery_limit: bool
    #: Whether quorum queues get a delivery limit (20) with no policy at all (4.x).
    default_quorum_delivery_limit: int | None
    #: The broker-wide ``consumer_timeout`` in force, milliseconds; None when unknown/none.
    consumer_timeout_ms: int | None = None
    #: How the broker-wide timeout was established (e.g. the loaded config file).
    consumer_timeout_evidence: str | None = None
    #: Per queue type, which consumer-timeout settings this version enforces and how, as
    #: pinned with real consumers. A queue type not listed (every type, for a version never
    #: pinned) claims nothing: no consumer timeout counts as in force on it.
    consumer_timeout_enforcement: tuple[TimeoutEnforcement, ...] = ()
    #: Queue types on which a ``basic.get`` delivery still held counts in the queue's
    #: ``consumers``; on the others such a holder shows as unacknowledged messages with no
    #: consumer. None: not pinned for this version.
    get_holder_counted_as_consumer: frozenset[str] | None = None
    #: Every node of the broker (one, or a cluster's), as read at the start of the pass; None
    #: when the user may not list them.
    nodes: tuple[BrokerNode, ...] | None = None
    #: Whether the broker has quorum queues at all (LavinMQ has none: a queue declared with
    #: ``x-queue-type: quorum`` is one of its ordinary queues, and a policy's
    #: ``apply-to: quorum_queues`` reaches every non-stream queue).
    quorum_queues: bool = True
    #: Whether a policy ``delivery-limit: -1`` is accepted but, instead of lifting the limit,
    #: makes the broker drop every message on the queue (LavinMQ 2.9.1: a delivery count of 0
    #: is "greater than -1"). Such a value is never written.
    unlimited_delivery_limit_empties: bool = False

    @property
    def name(self) -> str:
        """Product and version, as a person reads them: ``RabbitMQ 4.0.5``."""
        return f"{self.product} {self.version}".strip()

    def timeout_enforcement(self, queue_type: str) -> TimeoutEnforcement | None:
        """How this version enforces a consumer timeout on ``queue_type``; None: not pinned."""
        return next(
            (e for e in self.consumer_timeout_enforcement if e.queue_type == queue_type), None
        )

    def capabilities(self) -> dict[str, Any]:
        return {
            "policy_consumer_timeout": self.policy_consumer_timeout,
            "policy_apply_to_queue_type": self.policy_apply_to_queue_type,
            "unlimited_delivery_limit": self.unlimited_delivery_limit,
            "default_quorum_delivery_limit": self.default_quorum_delivery_limit,
            "consumer_timeout_ms": self.consumer_timeout_ms,
            "consumer_timeout_evidence": self.consumer_timeout_evidence,
            "consumer_timeout_enforced": {
                e.queue_type: sorted(s.value for s in e.enforced)
                for e in self.consumer_timeout_enforcement
            },
            "get_holder_counted_as_consumer": (
                None
                if self.get_holder_counted_as_consumer is None
                else sorted(self.get_holder_counted_as_consumer)
            ),
            "quorum_queues": self.quorum_queues,
            "unlimited_delivery_limit_empties": self.unlimited_delivery_limit_empties,
        }


@dataclass(frozen=True)
class DeadLetter(Letter):
    """One message read (and requeued) from a dead-letter queue, decoded by
    :mod:`reaper.core.dead_letters.decode`. ``delivery_count`` and ``redelivered`` change from
    one read to the next, and are never part of its identity."""

    delivery_count: int | None
    redelivered: bool
    #: What identifies it from its properties and headers alone, without its body
    #: (``reaper.core.dead_letters.envelope``); None when they do not carry enough to.
    envelope: str | None = None
    cut: str | None = None  #: what was cut on reading, in words (never whole then)


@dataclass(frozen=True)
class UnsentDispatch:
    """Per project, the oldest outbox row of a ready job's current dispatch episode that the
    host's relay has not sent (outbox dispatch only)."""

    project_id: UUID
    job_id: UUID
    kind: str
    dispatch_seq: int
    written_at: datetime


@dataclass(frozen=True)
class Measurements:
    """Everything one pass read but its expired leases (judged a page at a time by
    :mod:`reaper.core.judge_leases`). A source that could not be read is ``None`` (its list is
    not empty: it is unknown), so nothing is concluded from it."""

    claimable: tuple[ClaimableHead, ...] | None = ()
    queues: tuple[QueueStats, ...] | None = ()
    broker: BrokerFacts | None = None
    #: Unsent dispatches (outbox dispatch); empty when the host polls.
    unsent: tuple[UnsentDispatch, ...] | None = ()
    #: What was measured across passes (held deliveries, stalled queues); None when it could
    #: not be (the broker or the store unread), and then nothing is concluded from it.
    observed: Observed | None = None
    #: Queues listed without their statistics that the listing did not keep (nothing else to
    #: say of them), by name: judged only as one note with those kept.
    without_statistics: tuple[str, ...] = ()


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    """One judged measurement. ``object`` is a job id or a queue name (SPEC §1)."""

    source: Source
    object: str
    condition: Condition
    measured: float | int | None
    threshold: float | int | None
    unit: Unit
    action: Action
    queue: str | None = None
    project_id: UUID | None = None
    detail: str = ""
    trusted: bool = True
    #: For lease verdicts: the row as read, so the write can re-check it (still leased,
    #: still expired, same owner).
    lease: HeldLease | None = None
    #: For a measure recorded by order of magnitude (a dead-letter queue's unread remainder:
    #: ``reaper.core.dead_letters.remainder_bucket``), the bucket's threshold (1, 10, 100, ...):
    #: part of the sighting's scope, so crossing into a higher bucket is a new sighting.
    bucket: int | None = None
    #: For an ``unbounded`` queue: the broker would drop its messages (a finite delivery limit
    #: in force with no dead-letter target), which makes the pass not ok (SPEC §1 (c), §5).
    drops: bool = False

    @property
    def sighting_key(self) -> SightingKey:
        scope = sighting_scope(self.source, self.stream, self.queue, self.object, self.bucket)
        return SightingKey(self.source, self.condition, scope)

    @property
    def subject(self) -> str:
        """What a broker verdict is about: its queue, else its object."""
        return self.queue or self.object

    @property
    def stream(self) -> UUID:
        """The ledger stream this verdict is recorded on."""
        if self.source is Source.BROKER or self.project_id is None:
            return FLEET_PROJECT_ID
        return self.project_id

    def payload(self) -> dict[str, Any]:
        """The ``QueueReaped`` event payload (SPEC §3)."""
        return {
            "object": self.object,
            "queue": self.queue,
            "source": self.source.value,
            "condition": self.condition.value,
            "measured": self.measured,
            "threshold": self.threshold,
            "unit": self.unit.value,
            "action": self.action.value,
            "detail": self.detail,
        } | ({} if self.bucket is None else {"bucket": self.bucket})


def sighting_scope(
    source: Source, stream: UUID, queue: str | None, object_: str, bucket: int | None = None
) -> str:
    """What one sighting is about within its stream and condition: on the broker, the queue
    (its ``queue``, else its ``object``), followed by ``#<bucket>`` for a bucketed measure
    (``vibey.jobs.dead#10``); on the job queue, the project whose stream holds it.
    The SQL function ``reaper_sighting_scope_v2`` (migration 0008) computes the same from a
    stored event, and a test holds the two to the same answers."""
    if source is Source.BROKER:
        subject = queue or object_
        return subject if bucket is None else f"{subject}#{bucket}"
    return str(stream)


@dataclass(frozen=True, order=True)
class SightingKey:
    """What makes two surfaced verdicts the same sighting: a broker queue's condition, or a
    project's condition on the job queue."""

    source: Source
    condition: Condition
    scope: str


@dataclass(frozen=True)
class Judgement:
    verdicts: tuple[Verdict, ...]
    notes: tuple[str, ...] = ()
