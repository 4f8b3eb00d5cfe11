"""The hash chain of a scope, plain or keyed, the same for every backend (staging writes it, verify checks it).

Plain (no key): an entry's ``hash`` is sha256 over the previous hash and its stored columns
(``core.entries.chain_hash``, 64 hex digits). It catches accidental change and a careless edit, but anyone with
write access can rewrite the tail and the state row consistently.

Keyed (``DECKLOG_LOG_KEY``): the same material under HMAC-SHA256 with the key, stored as
``hmac:<key id>:<64 hex>``. The key id (8 hex digits of an HMAC of a constant) names which key made it without
revealing it, so verify and append can tell "another key" from "altered". Without the key nobody can make a
hash that verifies.

A scope's kind is fixed by its first entry: a scope declared with a key is keyed for ever, one declared without
stays plain (an append keeps the scope's kind; a keyed scope refuses appends without its key). Verify refuses a
scope that mixes the two kinds or two keys.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from decklog.core.entries import canonical_json, chain_hash
from decklog.core.errors import Conflict

KEYED_PREFIX = "hmac:"
KEY_SETTING = "DECKLOG_LOG_KEY"


@dataclass(frozen=True)
class ChainKey:
    """An HMAC key for the chain, with its public id."""

    secret: bytes
    key_id: str

    @classmethod
    def of(cls, secret: str | bytes | None) -> ChainKey | None:
        if secret is None:
            return None
        raw = secret.encode("utf-8") if isinstance(secret, str) else secret
        if not raw:
            return None
        return cls(raw, hmac.new(raw, b"decklog log key id", hashlib.sha256).hexdigest()[:8])

    def __repr__(self) -> str:  # never print the secret
        return f"ChainKey(key_id={self.key_id!r})"


def key_id_of(stored_hash: str) -> str | None:
    """The key id a stored hash was made with; None for a plain (unkeyed) hash."""
    if not stored_hash.startswith(KEYED_PREFIX):
        return None
    return stored_hash[len(KEYED_PREFIX) :].split(":", 1)[0]


def link_hash(
    key: ChainKey | None,
    *,
    prev_hash: str,
    seq: int,
    entry_id: str,
    kind: str,
    at: str,
    actor_json: str,
    payload: str,
    refs_json: str,
    idempotency_key: str | None,
) -> str:
    """The stored hash of one entry: plain sha256 without a key, ``hmac:<id>:<hex>`` with one."""
    if key is None:
        return chain_hash(
            prev_hash=prev_hash,
            seq=seq,
            entry_id=entry_id,
            kind=kind,
            at=at,
            actor_json=actor_json,
            payload=payload,
            refs_json=refs_json,
            idempotency_key=idempotency_key,
        )
    material = canonical_json([prev_hash, seq, entry_id, kind, at, actor_json, payload, refs_json, idempotency_key])
    digest = hmac.digest(key.secret, material.encode("utf-8"), "sha256").hex()
    return f"{KEYED_PREFIX}{key.key_id}:{digest}"


def key_for_append(scope: str, head_hash: str, new_scope: bool, key: ChainKey | None) -> ChainKey | None:
    """The key the next entries of a scope are chained with: the scope keeps the kind its first entry gave it.

    A new scope is keyed when a key is set. A plain scope stays plain (a key set later does not mix kinds into
    it). A keyed scope needs its own key: without one, or with another, the append is refused.
    """
    if new_scope:
        return key
    stored_id = key_id_of(head_hash)
    if stored_id is None:
        return None
    if key is None:
        raise Conflict(f"{scope} has a keyed hash chain: set {KEY_SETTING} to append to it")
    if key.key_id != stored_id:
        raise Conflict(f"{scope} is chained with another {KEY_SETTING} (key id {stored_id}, this one is {key.key_id})")
    return key
