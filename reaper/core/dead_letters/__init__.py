"""Dead letters, the pure half (SPEC §1 (e), §4): decoding and identity, untrusted text,
reading a dead-letter queue without losing a letter, and parking one for a person.

No I/O, no clock, no logging. The pass asks :func:`read_plan` what it may read,
:func:`decode` turns each message read into a ``DeadLetter``, :func:`select_new` says which are
new, and :func:`park_fields`, :func:`gate_prompt` and :func:`park_verdict` say what a park
keeps, asks and records; when a person answers, :func:`replay_decision` says whether the body
may go back.
"""

from reaper.core.dead_letters.decode import (
    DIGEST_BODY_LIMIT,
    MESSAGE_ID_LIMIT,
    HeldBody,
    decode,
    decoded_body,
)
from reaper.core.dead_letters.parking import (
    EVENT_TRUSTED,
    GATE_CHOICES,
    ParkedLetter,
    event_payload,
    gate_prompt,
    park_fields,
    park_verdict,
    replay_decision,
)
from reaper.core.dead_letters.pointer import (
    DISPATCH_SCHEMA,
    DispatchPointer,
    dispatch_body,
    dispatch_pointer,
    pointer_prompt,
    pointer_verdict,
)
from reaper.core.dead_letters.reading import (
    BUDGET_MARGIN,
    READ_PAST_PARKED_CAP,
    ReadPlan,
    read_plan,
    select_new,
    unread_count,
    within_budget,
)
from reaper.core.dead_letters.untrusted import CUT_MARKER, UNTRUSTED_LIMIT, quote_untrusted

__all__ = [
    "BUDGET_MARGIN",
    "CUT_MARKER",
    "DIGEST_BODY_LIMIT",
    "DISPATCH_SCHEMA",
    "EVENT_TRUSTED",
    "GATE_CHOICES",
    "MESSAGE_ID_LIMIT",
    "READ_PAST_PARKED_CAP",
    "UNTRUSTED_LIMIT",
    "DispatchPointer",
    "HeldBody",
    "ParkedLetter",
    "ReadPlan",
    "decode",
    "decoded_body",
    "dispatch_body",
    "dispatch_pointer",
    "event_payload",
    "gate_prompt",
    "park_fields",
    "park_verdict",
    "pointer_prompt",
    "pointer_verdict",
    "quote_untrusted",
    "read_plan",
    "replay_decision",
    "select_new",
    "unread_count",
    "within_budget",
]
