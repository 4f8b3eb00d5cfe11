"""The in-memory log store (tests, and the proof that the ports do not leak SQLite).

``MemoryStorage`` is the "database": several ``MemoryLogStore`` on one storage behave like several processes on
one data directory (a store's ``close`` loses nothing). Staging, the hash chain and verify are the shared,
backend-neutral code (core/store/staging.py, core/store/verify.py); rows are kept as the same stored columns
the SQLite backend writes, and reads parse them back the same way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from decklog.core.clock import Clock, SystemClock
from decklog.core.entries import Actor, DeliveryFailed, Entry, NewEntry, canonical_json
from decklog.core.errors import NotFound
from decklog.core.ids import ScopeId
from decklog.core.state import ScopeState, empty_state
from decklog.core.store.chain import ChainKey
from decklog.core.store.memory.alert_inbox import AlertInboxRows
from decklog.core.store.memory.api_keys import ApiRows
from decklog.core.store.memory.inbox import InboxRows
from decklog.core.store.memory.index import IndexTables
from decklog.core.store.ports import (
    AppendResult,
    Decide,
    Listener,
    OutboxItem,
    OutboxSummary,
    ParkedItem,
    ScopeRef,
    VerifyReport,
    notify_listeners,
)
from decklog.core.store.rows import row_to_entry
from decklog.core.store.staging import Batch, Lookups, stage
from decklog.core.store.verify import verify_rows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredRow:
    seq: int
    id: str
    kind: str
    at: str
    actor: str
    payload: str
    refs: str
    idempotency_key: str | None
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class StateRow:
    version: int
    head_hash: str
    head_at: str
    body: str


@dataclass
class OutboxRow:
    attempts: int = 0
    next_attempt_at: float = 0.0
    published_at: float | None = None
    parked_at: float | None = None
    last_error: str = ""


@dataclass
class MemScope:
    rows: list[StoredRow] = field(default_factory=list)
    state_row: StateRow | None = None
    state: ScopeState | None = None
    outbox: dict[tuple[str, int], OutboxRow] = field(default_factory=dict)
    memos: dict[tuple[str, str], str] = field(default_factory=dict)


@dataclass
class MemoryStorage:
    """The "database": the scope logs, the index's rows and the inbox's, shared by every part made on it."""

    scopes: dict[str, MemScope] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    index: IndexTables = field(default_factory=IndexTables)
    inbox: InboxRows = field(default_factory=InboxRows)
    api: ApiRows = field(default_factory=ApiRows)
    alert_inbox: AlertInboxRows = field(default_factory=AlertInboxRows)


def _key(scope: ScopeRef) -> str:
    return str(scope if isinstance(scope, ScopeId) else ScopeId.parse(scope))


class MemoryLogStore:
    """Every port of ``LogStore`` over a ``MemoryStorage``; each append is one atomic step under its lock."""

    def __init__(
        self,
        storage: MemoryStorage | None = None,
        *,
        topics: Sequence[str] = ("index",),
        topic_kinds: Mapping[str, Collection[str]] | None = None,
        clock: Clock | None = None,
        log_key: str | bytes | None = None,
    ) -> None:
        self.storage = storage or MemoryStorage()
        self.chain_key = ChainKey.of(log_key)
        self.topics = tuple(topics)
        self.topic_kinds = {k: frozenset(v) for k, v in (topic_kinds or {}).items() if k in self.topics}
        self.clock: Clock = clock or SystemClock()
        self._listeners: list[Listener] = []
        self.appended_total = 0

    def topics_for(self, kind: str) -> tuple[str, ...]:
        return tuple(t for t in self.topics if t not in self.topic_kinds or kind in self.topic_kinds[t])

    @property
    def open_files(self) -> int:
        return 0  # nothing is held open

    def refill_spares(self) -> None:
        """Nothing to prepare."""

    def _scope(self, scope: ScopeRef) -> tuple[str, MemScope]:
        key = _key(scope)
        found = self.storage.scopes.get(key)
        if found is None or found.state_row is None:
            raise NotFound(f"no such scope: {key}")
        return key, found

    # -- the entry log ----------------------------------------------------------------------------------------

    async def append(
        self,
        scope: ScopeRef,
        entries: Sequence[NewEntry] | Decide,
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        create: bool = False,
    ) -> AppendResult:
        key = _key(scope)
        async with self.storage.lock:
            found = self.storage.scopes.get(key)
            if (found is None or found.state_row is None) and not create:
                raise NotFound(f"no such scope: {key}")
            ms = found or MemScope()
            b = self._begin(key, ms)
            result = stage(
                b, entries, expected_version, idempotency_key, now=self.clock.now(), look=self._look(key, ms)
            )
            if b.entry_rows:
                self._commit(key, ms, b)
        if not result.duplicate and result.entries:
            self.appended_total += len(result.entries)
            self._notify(key, result.entries)
        return result

    def _begin(self, key: str, ms: MemScope) -> Batch:
        if ms.state_row is None or ms.state is None:
            return Batch(key, empty_state(key), "", "", existed=False)
        return Batch(key, ms.state, ms.state_row.head_hash, ms.state_row.head_at, existed=True)

    def _look(self, key: str, ms: MemScope) -> Lookups:
        def by_request_key(k: str) -> list[Entry]:
            rows = [
                r
                for r in ms.rows
                if r.idempotency_key and (r.idempotency_key == k or r.idempotency_key.startswith(k + "#"))
            ]
            return [row_to_entry(key, r) for r in rows]

        def by_entry_keys(keys: list[str]) -> list[Entry]:
            wanted = set(keys)
            return [row_to_entry(key, r) for r in ms.rows if r.idempotency_key in wanted]

        return Lookups(by_request_key, by_entry_keys, self.topics_for, chain_key=self.chain_key)

    def _commit(self, key: str, ms: MemScope, b: Batch) -> None:
        ms.rows.extend(StoredRow(**row) for row in b.entry_rows)
        for row in b.outbox_rows:
            ms.outbox[(row["topic"], row["seq"])] = OutboxRow()
        ms.state = b.state
        ms.state_row = StateRow(b.state.version, b.head_hash, b.head_at, b.state.model_dump_json())
        self.storage.scopes[key] = ms

    async def read(
        self, scope: ScopeRef, *, after: int = 0, limit: int | None = None, kinds: Sequence[str] = ()
    ) -> list[Entry]:
        key, ms = self._scope(scope)
        rows = [r for r in ms.rows if r.seq > after and (not kinds or r.kind in kinds)]
        return [row_to_entry(key, r) for r in rows[:limit]]

    async def read_seqs(self, scope: ScopeRef, seqs: Sequence[int]) -> list[Entry]:
        key, ms = self._scope(scope)
        wanted = set(seqs)
        return [row_to_entry(key, r) for r in ms.rows if r.seq in wanted]

    async def read_last(self, scope: ScopeRef, *, limit: int, kinds: Sequence[str] = ()) -> list[Entry]:
        key, ms = self._scope(scope)
        rows = [r for r in ms.rows if not kinds or r.kind in kinds]
        return [row_to_entry(key, r) for r in rows[-limit:]] if limit > 0 else []

    async def get_state(self, scope: ScopeRef) -> ScopeState:
        _k, ms = self._scope(scope)
        assert ms.state_row is not None
        return ScopeState.model_validate_json(ms.state_row.body)

    async def exists(self, scope: ScopeRef) -> bool:
        found = self.storage.scopes.get(_key(scope))
        return found is not None and found.state_row is not None and found.state_row.version > 0

    def holds(self, scope: ScopeRef) -> bool:
        return _key(scope) in self.storage.scopes

    async def scope_ids(self) -> list[ScopeId]:
        return sorted(ScopeId.parse(k) for k in self.storage.scopes)

    async def sweep_candidates(self, topics: Collection[str]) -> tuple[list[ScopeId], float]:
        return await self.scope_ids(), 0.0

    async def sweep_checked(self, topics: Collection[str], at: float, pending: Sequence[ScopeRef]) -> None:
        """Nothing outlives the process."""

    async def verify(self, scope: ScopeRef) -> VerifyReport:
        key, ms = self._scope(scope)
        return verify_rows(key, list(ms.rows), ms.state_row, key=self.chain_key)

    # -- the outbox -------------------------------------------------------------------------------------------

    async def outbox_pending(self, scope: ScopeRef, topic: str, *, limit: int = 100) -> list[OutboxItem]:
        key, ms = self._scope(scope)
        by_seq = {r.seq: r for r in ms.rows}
        pending = sorted(
            s for (t, s), o in ms.outbox.items() if t == topic and o.published_at is None and o.parked_at is None
        )
        out = []
        for seq in pending[:limit]:
            o = ms.outbox[(topic, seq)]
            out.append(OutboxItem(topic, row_to_entry(key, by_seq[seq]), o.attempts, o.next_attempt_at))
        return out

    async def outbox_done(self, scope: ScopeRef, topic: str, seqs: Sequence[int]) -> None:
        _k, ms = self._scope(scope)
        now = time.time()
        for seq in seqs:
            if (topic, seq) in ms.outbox:
                ms.outbox[(topic, seq)].published_at = now

    async def outbox_failed(
        self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, next_attempt_at: float, error: str
    ) -> None:
        _k, ms = self._scope(scope)
        row = ms.outbox.get((topic, seq))
        if row is not None:
            row.attempts, row.next_attempt_at, row.last_error = attempts, next_attempt_at, error[:2000]

    async def outbox_park(self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, error: str) -> None:
        """Park a row past its retry budget and append a visible ``delivery_failed`` entry, in one step."""
        key, ms = self._scope(scope)
        row = ms.outbox.get((topic, seq))
        if row is not None:
            row.attempts, row.parked_at, row.last_error = attempts, time.time(), error[:2000]
        kind = next((r.kind for r in ms.rows if r.seq == seq), None)
        if kind == "delivery_failed":
            return  # never a failure about a failure
        note = NewEntry.make(
            "delivery_failed",
            Actor.system("dispatcher"),
            DeliveryFailed(sender=topic, seq=seq, attempts=attempts, error=error[:500]),
            refs=(seq,),
        )
        await self.append(key, [note])

    async def outbox_summary(self, scope: ScopeRef) -> OutboxSummary:
        key, ms = self._scope(scope)
        pending: dict[str, int] = {}
        parked: dict[str, int] = {}
        for (topic, _seq), o in ms.outbox.items():
            if o.parked_at is not None:
                parked[topic] = parked.get(topic, 0) + 1
            elif o.published_at is None:
                pending[topic] = pending.get(topic, 0) + 1
        return OutboxSummary(key, pending, parked)

    async def outbox_parked(self, scope: ScopeRef) -> list[ParkedItem]:
        key, ms = self._scope(scope)
        kinds = {r.seq: r.kind for r in ms.rows}
        return [
            ParkedItem(key, t, s, kinds[s], o.attempts, o.last_error, o.parked_at)
            for (t, s), o in sorted(ms.outbox.items())
            if o.parked_at is not None
        ]

    async def outbox_retry_parked(self, scope: ScopeRef, topic: str | None = None) -> int:
        key, ms = self._scope(scope)
        count = 0
        for (t, _s), o in ms.outbox.items():
            if o.parked_at is not None and (not topic or t == topic):
                o.parked_at, o.attempts, o.next_attempt_at = None, 0, 0.0
                count += 1
        if count:
            self._notify(key, ())
        return count

    # -- sender memos and the commit feed ---------------------------------------------------------------------

    async def memo_get(self, scope: ScopeRef, topic: str, key: str) -> dict[str, Any] | None:
        _k, ms = self._scope(scope)
        value = ms.memos.get((topic, key))
        return json.loads(value) if value is not None else None

    async def memo_put(self, scope: ScopeRef, topic: str, key: str, value: dict[str, Any]) -> None:
        _k, ms = self._scope(scope)
        ms.memos[(topic, key)] = canonical_json(value)

    async def memo_all(self, scope: ScopeRef, topic: str) -> dict[str, dict[str, Any]]:
        _k, ms = self._scope(scope)
        return {k: json.loads(v) for (t, k), v in ms.memos.items() if t == topic}

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _notify(self, scope: str, entries: tuple[Entry, ...]) -> None:
        notify_listeners(self._listeners, scope, entries)

    async def close(self) -> None:
        return None
