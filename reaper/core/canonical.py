"""The canonical JSON of a ledger event and its digest, computed purely (SPEC §3).

An event's ``digest`` is the sha256 of its payload's canonical JSON: sorted keys, compact
separators, UTF-8, no NaN. Every writer of the ledger (the PostgreSQL store and the in-memory
double) encodes through here, so the same verdict always has the same digest.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Final

from reaper.core.domain import Verdict

__all__ = ["canonical_json", "canonical_payload", "digest_of", "lease_payload", "quote_owner"]

_quote = encode_basestring  # json's own string quoting (C), as the encoder uses it

_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


#: The most of a lease holder's name a detail or a prompt quotes.
OWNER_QUOTED: Final = 200


def quote_owner(owner: str | None, absent: str, *, more: str = "") -> str:
    """A lease holder's name as a detail or a gate's prompt quotes it: its first
    :data:`OWNER_QUOTED` characters as a JSON string (the quoting canonical JSON gives it, which
    PostgreSQL's ``to_json`` gives as well, so the lease reap's SQL builds the same text), then
    ``more`` if it was cut; ``absent`` when there is none."""
    if owner is None:
        return absent
    return _quote(owner[:OWNER_QUOTED]) + (more if len(owner) > OWNER_QUOTED else "")


def canonical_json(payload: Mapping[str, object]) -> str:
    """The canonical JSON of an event payload: sorted keys, compact separators, UTF-8."""
    return _CANONICAL.encode(payload)


def canonical_payload(verdict: Verdict) -> str:
    """``canonical_json(verdict.payload())``, built directly: the lease reap writes one per
    lease, and the general encoder is most of its cost in Python. A payload value of any
    other shape than a verdict's usual ones takes the general path; a property test holds
    the two to the same bytes."""
    measured, threshold = verdict.measured, verdict.threshold
    if verdict.bucket is not None or not (_plain_number(measured) and _plain_number(threshold)):
        return canonical_json(verdict.payload())
    queue = "null" if verdict.queue is None else _quote(verdict.queue)
    return (
        f'{{"action":{_quote(verdict.action)},"condition":{_quote(verdict.condition)},'
        f'"detail":{_quote(verdict.detail)},"measured":{_number(measured)},'
        f'"object":{_quote(verdict.object)},"queue":{queue},'
        f'"source":{_quote(verdict.source)},"threshold":{_number(threshold)},'
        f'"unit":{_quote(verdict.unit)}}}'
    )


def _plain_number(value: object) -> bool:
    if value is None or type(value) is int:
        return True
    return isinstance(value, float) and type(value) is float and math.isfinite(value)


def _number(value: float | int | None) -> str:
    # what json's encoder writes: int.__repr__ / float.__repr__
    if value is None:
        return "null"
    return int.__repr__(value) if type(value) is int else float.__repr__(value)


def digest_of(canonical: str) -> str:
    """The ledger digest: sha256 hex of the canonical JSON."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def lease_payload(
    object_: str,
    condition: str,
    action: str,
    measured: float | int,
    threshold: int,
    unit: str,
    detail: str,
) -> str:
    """``canonical_payload`` of a lease verdict (a job queue source, no queue), from its parts,
    with no verdict built: the lease reap writes one per lease. ``measured`` and ``threshold``
    are plain finite numbers, as the lease judge gives them; a test holds the two paths to the
    same bytes."""
    return (
        f'{{"action":"{action}","condition":"{condition}",'
        f'"detail":{_quote(detail)},"measured":{_number(measured)},'
        f'"object":{_quote(object_)},"queue":null,'
        f'"source":"job_queue","threshold":{_number(threshold)},'
        f'"unit":"{unit}"}}'
    )
