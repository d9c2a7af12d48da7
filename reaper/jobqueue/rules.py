"""What any job-queue store writes when a pass parks, whichever store it is: the gate a park
raises, its identity and its answers, a dead letter's key, a lease page a move can trust. Shared
by :class:`~reaper.jobqueue.postgres.PostgresStore` and
:class:`~reaper.testing.memory.MemoryJobQueue`, so the two cannot drift apart; what an answer
does is the desk's (:mod:`reaper.desk.rules`). Pure."""

from __future__ import annotations

from collections import Counter
from datetime import UTC
from operator import ge
from typing import Final

from reaper.core.canonical import quote_owner
from reaper.core.domain import GATE_DELIVERY_EXHAUSTED, HeldLease
from reaper.core.judge_leases import LeaseColumns, LeaseRulings
from reaper.core.moments import utc

__all__ = [
    "DEAD_LETTER_KEY_PREFIX",
    "DELIVERY_CANCEL",
    "DELIVERY_EXHAUSTED_CHOICES",
    "DELIVERY_RETRY",
    "check_lease_page",
    "dead_letter_key",
    "park_identity",
    "park_prompt",
]

#: The answers a ``delivery_exhausted`` gate offers: deliver it once more, or give it up.
DELIVERY_RETRY, DELIVERY_CANCEL = DELIVERY_EXHAUSTED_CHOICES = ("retry", "cancel")

#: A parked dead letter's job idempotency key and gate identity: this prefix and its identity.
DEAD_LETTER_KEY_PREFIX: Final = "dead_letter:"


def dead_letter_key(identity: str) -> str:
    """The job idempotency key and gate identity of the dead letter ``identity``."""
    return DEAD_LETTER_KEY_PREFIX + identity


def check_lease_page(page: LeaseColumns, rulings: LeaseRulings) -> None:
    """``ValueError`` for a page a move cannot trust: one naming a job twice (a page read by
    its key never does, and which of the two leases would a move guard on?), or rulings that
    are not this page's (a row outside it, or rows out of order)."""
    if len(set(page.job_ids)) < len(page):
        [twice] = [job for job, n in Counter(page.job_ids).most_common(1)]
        raise ValueError(f"not a lease page: job {twice} is in it twice; nothing was moved")
    rows = rulings.rows
    if rows and (rows[0] < 0 or rows[-1] >= len(page) or any(map(ge, rows, rows[1:]))):
        raise ValueError(
            f"not this page's rulings: rows {rows[0]}..{rows[-1]} of a page of {len(page)}, "
            "or out of order; nothing was moved"
        )


def park_identity(lease: HeldLease) -> str:
    """One gate per episode: the job and the lease that ran out (a later lease of the same
    job, after an answer, is a new episode with a new expiry)."""
    # the form first written, not core.moments.utc: another form would raise a second gate
    expired = lease.lease_expires_at.astimezone(UTC).isoformat()
    return f"{GATE_DELIVERY_EXHAUSTED}:{lease.job_id}:{expired}"


def park_prompt(lease: HeldLease) -> str:
    """The ``delivery_exhausted`` gate's question, for a person."""
    owner = quote_owner(lease.lease_owner, "an unknown holder")
    expired = utc(lease.lease_expires_at)
    return (
        f"Job {lease.job_id} ({lease.kind[:200]}) has been delivered {lease.attempts} times, "
        f"its limit of {lease.max_attempts}, and its last lease, held by {owner}, expired at "
        f"{expired} without the job finishing. It is parked and will not be delivered again "
        f"on its own. Answer 'retry' to deliver it exactly once more (one attempt was "
        f"refunded when it was parked), or 'cancel' to give it up (it ends cancelled and is "
        f"never delivered again); leave this gate open to keep it parked."
    )
