"""Dead letters, the pure half: decoding, untrusted text, reading safely, and parking.

No I/O, no clock, no logging. The pass asks :func:`read_plan` what it may read,
:func:`quiet_decision` whether the listing proves nothing arrived since a pass left its
:func:`quiet_mark` (then the queue is not read at all), :func:`header_read` and
:func:`quiet_read` whether a read without bodies saw only letters already parked,
:func:`decode_read` turns each message read into a ``DeadLetter``, :func:`select_new` says
which are new, :func:`remainder_bucket` how far the unread remainder has grown, and
:func:`park_fields`, :func:`gate_prompt` and :func:`park_verdict` say what a park keeps, asks
and records; when a person answers, :func:`replay_decision` says whether the body may go back.
"""

from reaper.core.dead_letters.decode import (
    DIGEST_BODY_LIMIT,
    MESSAGE_ID_LIMIT,
    TWIN_SEPARATOR,
    VOLATILE_HEADERS,
    HeldBody,
    decode,
    decode_read,
    decoded_body,
    envelope,
    header_identity,
)
from reaper.core.dead_letters.parking import (
    EVENT_TRUSTED,
    GATE_CHOICES,
    ParkedLetter,
    gate_prompt,
    park_fields,
    park_verdict,
    replay_decision,
)
from reaper.core.dead_letters.pointer import (
    DISPATCH_SCHEMA,
    DispatchPointer,
    dispatch_pointer,
    pointer_prompt,
    pointer_verdict,
)
from reaper.core.dead_letters.quiet import (
    QUIET_PROOF_SECONDS,
    UNCOUNTED_REMOVALS,
    QuietDecision,
    QuietMark,
    quiet_decision,
    quiet_mark,
)
from reaper.core.dead_letters.reading import (
    READ_PAST_PARKED_CAP,
    HeaderRead,
    QuietRead,
    ReadPlan,
    header_read,
    quiet_read,
    read_plan,
    remainder_bucket,
    select_new,
    unread_count,
)
from reaper.core.dead_letters.untrusted import CUT_MARKER, UNTRUSTED_LIMIT, quote_untrusted

__all__ = [
    "CUT_MARKER",
    "DIGEST_BODY_LIMIT",
    "DISPATCH_SCHEMA",
    "EVENT_TRUSTED",
    "GATE_CHOICES",
    "MESSAGE_ID_LIMIT",
    "QUIET_PROOF_SECONDS",
    "READ_PAST_PARKED_CAP",
    "TWIN_SEPARATOR",
    "UNCOUNTED_REMOVALS",
    "UNTRUSTED_LIMIT",
    "VOLATILE_HEADERS",
    "DispatchPointer",
    "HeaderRead",
    "HeldBody",
    "ParkedLetter",
    "QuietDecision",
    "QuietMark",
    "QuietRead",
    "ReadPlan",
    "decode",
    "decode_read",
    "decoded_body",
    "dispatch_pointer",
    "envelope",
    "gate_prompt",
    "header_identity",
    "header_read",
    "park_fields",
    "park_verdict",
    "pointer_prompt",
    "pointer_verdict",
    "quiet_decision",
    "quiet_mark",
    "quiet_read",
    "quote_untrusted",
    "read_plan",
    "remainder_bucket",
    "replay_decision",
    "select_new",
    "unread_count",
]
