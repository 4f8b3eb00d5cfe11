"""What the log holds (``Entry``), what a caller appends (``NewEntry``), and the canonical JSON and hash chain
of the stored columns."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from decklog.core.clock import iso
from decklog.core.entries.base import Actor, Payload
from decklog.core.entries.registry import parse_payload
from decklog.core.entries.render import render_text


class NewEntry(BaseModel):
    """What a caller asks to append. The store assigns seq, id, time and hashes."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    kind: str
    actor: Actor
    payload: Payload
    refs: tuple[int, ...] = ()
    idempotency_key: str | None = None
    #: Only a fork's copies set it (core/fork.py): the original entry's time. The store never lets a scope's
    #: times go backwards (an earlier ``at`` is raised to the head's); unset = the store's clock.
    at: datetime | None = None

    @classmethod
    def make(
        cls,
        kind: str,
        actor: Actor,
        payload: Payload | dict[str, Any],
        *,
        refs: tuple[int, ...] | list[int] = (),
        idempotency_key: str | None = None,
    ) -> NewEntry:
        return cls(
            kind=kind,
            actor=actor,
            payload=parse_payload(kind, payload),
            refs=tuple(refs),
            idempotency_key=idempotency_key,
        )


class Entry(BaseModel):
    """One record of the log, as stored."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    scope: str
    seq: int
    id: str
    kind: str
    at: datetime
    actor: Actor
    payload: Payload
    refs: tuple[int, ...] = ()
    idempotency_key: str | None = None
    prev_hash: str = ""
    hash: str = ""

    @property
    def text(self) -> str:
        return render_text(self.kind, self.payload, self.actor)

    def to_json(self) -> dict[str, Any]:
        """The external JSON shape of ``decklog timeline --json`` and the REST API."""
        return {
            "scope": self.scope,
            "seq": self.seq,
            "id": self.id,
            "kind": self.kind,
            "at": iso(self.at),
            "actor": self.actor.model_dump(),
            "text": self.text,
            "payload": self.payload.model_dump(mode="json"),
            "refs": list(self.refs),
            "idempotency_key": self.idempotency_key,
            "hash": self.hash,
        }


_ENTRY_FIELDS = frozenset(Entry.model_fields)
_set = object.__setattr__


def trusted_entry(
    *,
    scope: str,
    seq: int,
    id: str,
    kind: str,
    at: datetime,
    actor: Actor,
    payload: Payload,
    refs: tuple[int, ...],
    idempotency_key: str | None,
    prev_hash: str,
    hash: str,
) -> Entry:
    """An ``Entry`` from parts that are already the right types (a validated ``NewEntry``'s, or a row this store
    wrote, parsed by ``trusted_payload``): what ``Entry.model_construct`` builds (every field set, no
    validation), without its per-field loop over defaults and aliases (~20 µs)."""
    entry = Entry.__new__(Entry)
    _set(
        entry,
        "__dict__",
        {
            "scope": scope,
            "seq": seq,
            "id": id,
            "kind": kind,
            "at": at,
            "actor": actor,
            "payload": payload,
            "refs": refs,
            "idempotency_key": idempotency_key,
            "prev_hash": prev_hash,
            "hash": hash,
        },
    )
    _set(entry, "__pydantic_fields_set__", set(_ENTRY_FIELDS))
    _set(entry, "__pydantic_extra__", None)
    _set(entry, "__pydantic_private__", None)
    return entry


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def payload_json(payload: Payload) -> str:
    return canonical_json(payload.model_dump(mode="json"))


def actor_json(actor: Actor) -> str:
    """The stored text of an actor (three strings: the fields themselves, as ``model_dump()`` gives them)."""
    return canonical_json(actor.__dict__)


def chain_hash(
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
    """sha256 over the previous hash and the entry's stored columns: altering, removing or reordering breaks it."""
    material = canonical_json([prev_hash, seq, entry_id, kind, at, actor_json, payload, refs_json, idempotency_key])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
