"""The canonical JSON of a ledger event and its digest, computed purely (SPEC §3).

An event's ``digest`` is the sha256 of its payload's canonical JSON: sorted keys, compact
separators, UTF-8, no NaN. Every writer of the ledger (the PostgreSQL store and the in-memory
double) encodes through here, so the same verdict always has the same digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Final

__all__ = ["canonical_json", "digest_of", "quote_owner"]

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


def digest_of(canonical: str) -> str:
    """The ledger digest: sha256 hex of the canonical JSON."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
