"""Stored entry rows back into ``Entry`` values, the same for every backend (they all store the same columns).

A row is anything with the ``entries`` columns as attributes (``seq``, ``id``, ``kind``, ``at``, ``actor``,
``payload``, ``refs``, ``idempotency_key``, ``prev_hash``, ``hash``): a SQLAlchemy row, a named tuple, a dataclass.
"""

from __future__ import annotations

import json
from typing import Any

from decklog.core.clock import parse_iso
from decklog.core.entries import Actor, Entry, parse_payload, trusted_entry, trusted_payload


def row_to_entry(scope: str, row: Any) -> Entry:
    """An ``Entry`` from a stored row (anything with the ``entries`` columns as attributes), validated as if it
    came from outside: what ``verify`` and the audit read, where the row may have been edited behind the store."""
    kind = row.kind
    return Entry.model_construct(  # every field is parsed here, from columns this store wrote
        scope=scope,
        seq=row.seq,
        id=row.id,
        kind=kind,
        at=parse_iso(row.at),
        actor=Actor.model_validate_json(row.actor),
        payload=parse_payload(kind, json.loads(row.payload)),
        refs=tuple(json.loads(row.refs)),
        idempotency_key=row.idempotency_key,
        prev_hash=row.prev_hash,
        hash=row.hash,
    )


def trusted_row_to_entry(scope: str, row: Any) -> Entry:
    """An ``Entry`` from a row this store wrote (the read and delivery paths): the payload was validated and
    checked for NaN/Infinity before it was stored, so it is only parsed into its type (``trusted_payload``), and
    the entry is assembled without a second validation. Same value as ``row_to_entry`` for any such row."""
    kind = row.kind
    return trusted_entry(
        scope=scope,
        seq=row.seq,
        id=row.id,
        kind=kind,
        at=parse_iso(row.at),
        actor=Actor.model_validate_json(row.actor),
        payload=trusted_payload(kind, row.payload),
        refs=tuple(json.loads(row.refs)),
        idempotency_key=row.idempotency_key,
        prev_hash=row.prev_hash,
        hash=row.hash,
    )
