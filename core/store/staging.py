"""Staging an append, the same for every backend: duplicates, compare-and-set, decide, the hash chain, the fold.

A backend opens a transaction, builds a ``Batch`` from the stored head, calls ``stage`` once per request (in
arrival order; a later request sees the state an earlier one left), writes ``batch.entry_rows`` /
``batch.outbox_rows`` / the state and commits. ``stage`` raises before touching the batch on any error, so a
refused request leaves no trace in its neighbours' transaction.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from decklog.core.clock import iso, parse_iso
from decklog.core.entries import Entry, NewEntry, actor_json, canonical_json, payload_json, trusted_entry
from decklog.core.errors import Conflict, InvalidInput, NotFound
from decklog.core.state import ScopeState, fold_many
from decklog.core.store.chain import ChainKey, key_for_append, link_hash
from decklog.core.store.ports import AppendResult, Decide

# The stored entries a backend finds for a request key (the key itself and ``key#n``) or for entry keys.
ByRequestKey = Callable[[str], list[Entry]]
ByEntryKeys = Callable[[list[str]], list[Entry]]


def new_entry_id() -> str:
    """A unique, roughly time-ordered entry id: ``e`` + 12 hex digits of ms time + 10 random hex digits.

    The ids are not secrets. The random part comes from ``random.getrandbits`` (seeded from the OS at start and again
    in a forked child), not from the OS each time: that system call lets another thread take the GIL in the middle of
    an append's staging (decision 134)."""
    return f"e{int(time.time() * 1000):012x}{random.getrandbits(40):010x}"


@dataclass
class Batch:
    """Per-transaction context: the state as of the last staged entry, and the rows to write at commit."""

    scope: str
    state: ScopeState
    head_hash: str
    head_at: str
    existed: bool
    entry_rows: list[dict[str, Any]] = field(default_factory=list)
    outbox_rows: list[dict[str, Any]] = field(default_factory=list)
    staged_keys: dict[str, Entry] = field(default_factory=dict)
    lookups: Lookups | None = None  # built by the backend for the first request of the batch, reused after


@dataclass(frozen=True)
class Lookups:
    """How a backend reads stored entries by key inside the transaction, and which topics an entry kind feeds."""

    by_request_key: ByRequestKey
    by_entry_keys: ByEntryKeys
    topics_for: Callable[[str], tuple[str, ...]]
    new_id: Callable[[], str] = new_entry_id
    chain_key: ChainKey | None = None  # DECKLOG_LOG_KEY: keyed chains for new scopes (core/store/chain.py)


def find_duplicates(
    b: Batch, entries: Sequence[NewEntry] | Decide, request_key: str | None, look: Lookups
) -> list[Entry] | None:
    if request_key is not None:
        staged = [e for k, e in b.staged_keys.items() if k == request_key or k.startswith(request_key + "#")]
        if staged:
            return sorted(staged, key=lambda e: e.seq)
        return (look.by_request_key(request_key) or None) if b.existed else None
    if callable(entries):
        return None
    keys = [e.idempotency_key for e in entries if e.idempotency_key]
    if not keys:
        return None
    if len(set(keys)) != len(keys):  # would fail the whole group commit at INSERT time
        raise InvalidInput("the same idempotency key appears twice in one request", field="idempotency_key")
    found = [b.staged_keys[k] for k in keys if k in b.staged_keys]
    if b.existed:
        found.extend(look.by_entry_keys(keys))
    return sorted(found, key=lambda e: e.seq) or None


def stage(
    b: Batch,
    entries: Sequence[NewEntry] | Decide,
    expected_version: int | None,
    request_key: str | None,
    *,
    now: datetime,
    look: Lookups,
) -> AppendResult:
    """Duplicates are recognised before the compare-and-set: a request retried after a lost response gets its
    original entries back, not a Conflict. Entry keys that ``decide`` chooses are checked once it has run."""
    if request_key is not None or not callable(entries):
        existing = find_duplicates(b, entries, request_key, look)
        if existing is not None:
            return AppendResult(tuple(existing), b.state, duplicate=True)
    if expected_version is not None and b.state.version != expected_version:
        raise Conflict(f"{b.scope} is at version {b.state.version}, not {expected_version}: re-read and decide again")
    new = list(entries(b.state) if callable(entries) else entries)
    if request_key is None and callable(entries):
        existing = find_duplicates(b, new, None, look)
        if existing is not None:
            return AppendResult(tuple(existing), b.state, duplicate=True)
    if not new:
        if b.state.version == 0:
            raise NotFound(f"no such scope: {b.scope} (a scope starts with a declared entry)")
        return AppendResult((), b.state)
    if request_key is not None:
        new = [
            e.model_copy(update={"idempotency_key": request_key if i == 0 else f"{request_key}#{i + 1}"})
            for i, e in enumerate(new)
        ]
    if b.state.version == 0 and new[0].kind != "declared":
        raise NotFound(f"no such scope: {b.scope} (a scope starts with a declared entry)")
    if any(e.kind == "declared" for e in (new if b.state.version else new[1:])):
        raise Conflict(f"{b.scope} is already declared")
    if b.head_at:
        now = max(now, parse_iso(b.head_at))
    return _chain(b, new, now, look)


def _chain(b: Batch, new: list[NewEntry], now: datetime, look: Lookups) -> AppendResult:
    """Number, hash and fold the new entries; commit them to the batch only at the end."""
    key = key_for_append(b.scope, b.head_hash, b.state.version == 0, look.chain_key)
    state, head_hash, at_text = b.state, b.head_hash, iso(now)
    made: list[Entry] = []
    rows: list[dict[str, Any]] = []
    outbox_rows: list[dict[str, Any]] = []
    floor, request_now = (parse_iso(b.head_at) if b.head_at else None), now
    for seq, ne in enumerate(new, start=state.version + 1):
        if ne.at is not None:  # a fork's copy keeps its original time, never earlier than the entry before it
            now = ne.at if floor is None else max(ne.at, floor)
        else:
            now = request_now if floor is None else max(request_now, floor)
        floor, at_text = now, iso(now)
        row, entry = _link(b.scope, ne, seq, now, at_text, head_hash, key, look)
        rows.append(row)
        outbox_rows.extend({"topic": topic, "seq": entry.seq} for topic in look.topics_for(ne.kind))
        head_hash = entry.hash
        made.append(entry)
    state = fold_many(state, made)
    b.state, b.head_hash, b.head_at = state, head_hash, at_text
    b.entry_rows.extend(rows)
    b.outbox_rows.extend(outbox_rows)
    for entry in made:
        if entry.idempotency_key:
            b.staged_keys[entry.idempotency_key] = entry
    return AppendResult(tuple(made), state)


def _link(
    scope: str,
    ne: NewEntry,
    seq: int,
    now: datetime,
    at_text: str,
    prev_hash: str,
    key: ChainKey | None,
    look: Lookups,
) -> tuple[dict[str, Any], Entry]:
    """One new entry as its stored row (hashed onto ``prev_hash``) and as the ``Entry`` the fold sees."""
    for ref in ne.refs:
        if not 0 < ref < seq:
            raise InvalidInput(f"ref {ref} does not point to an earlier entry of {scope}", field="refs")
    entry_id, actor_text = look.new_id(), actor_json(ne.actor)
    payload_text, refs_json = payload_json(ne.payload), canonical_json(list(ne.refs))
    digest = link_hash(
        key,
        prev_hash=prev_hash,
        seq=seq,
        entry_id=entry_id,
        kind=ne.kind,
        at=at_text,
        actor_json=actor_text,
        payload=payload_text,
        refs_json=refs_json,
        idempotency_key=ne.idempotency_key,
    )
    row = {
        "seq": seq,
        "id": entry_id,
        "kind": ne.kind,
        "at": at_text,
        "actor": actor_text,
        "payload": payload_text,
        "refs": refs_json,
        "idempotency_key": ne.idempotency_key,
        "prev_hash": prev_hash,
        "hash": digest,
    }
    entry = trusted_entry(  # every field comes from a validated NewEntry or was just made here
        scope=scope,
        seq=seq,
        id=entry_id,
        kind=ne.kind,
        at=now,
        actor=ne.actor,
        payload=ne.payload,
        refs=ne.refs,
        idempotency_key=ne.idempotency_key,
        prev_hash=prev_hash,
        hash=digest,
    )
    return row, entry
