"""The inbox in memory: the ``Inbox`` port over a dict (tests). Several ``MemoryInbox`` on one ``InboxRows`` share
it, as replicas share one database's inbox; every request is pending to each of them (no leases: nothing dies)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decklog.core.store.ports import DONE_RETENTION_S, ERROR_MAX, InboxItem, InboxStats, ParkedRequest


@dataclass
class InboxRow:
    id: int
    source: str
    body: str  # JSON, as stored: a reader gets its own copy
    meta: str
    received_at: float
    attempts: int = 0
    done_at: float | None = None
    parked_at: float | None = None
    error: str | None = None

    @property
    def pending(self) -> bool:
        return self.done_at is None and self.parked_at is None

    @property
    def parked(self) -> bool:
        return self.done_at is None and self.parked_at is not None


@dataclass
class InboxRows:
    rows: dict[str, InboxRow] = field(default_factory=dict)  # key -> row
    next_id: int = 1


class MemoryInbox:
    def __init__(self, rows: InboxRows | None = None, *, now: Callable[[], float] = time.time) -> None:
        self.t = rows or InboxRows()
        self.stats = InboxStats()
        self._now = now

    async def put(self, *, key: str, source: str, body: dict[str, Any], meta: dict[str, Any]) -> bool:
        if key in self.t.rows:
            self.stats.duplicates += 1
            return False
        self.t.rows[key] = InboxRow(self.t.next_id, source, json.dumps(body), json.dumps(meta), self._now())
        self.t.next_id += 1
        self.stats.persisted += 1
        return True

    async def attempt(self, *, key: str) -> int:
        row = self.t.rows.get(key)
        if row is None:
            return 0
        row.attempts += 1
        return row.attempts

    async def done(self, *, key: str) -> None:
        row = self.t.rows.get(key)
        if row is not None and row.done_at is None:
            row.done_at = self._now()

    async def park(self, *, key: str, error: str, attempts: int) -> None:
        row = self.t.rows.get(key)
        if row is not None and row.pending:
            row.parked_at, row.error, row.attempts = self._now(), error[:ERROR_MAX], attempts

    def _by_id(self) -> list[tuple[str, InboxRow]]:
        return sorted(self.t.rows.items(), key=lambda item: item[1].id)

    async def pending(self) -> list[InboxItem]:
        return [
            InboxItem(k, r.source, json.loads(r.body), json.loads(r.meta), r.received_at, r.attempts)
            for k, r in self._by_id()
            if r.pending
        ]

    async def pending_count(self) -> int:
        return sum(1 for r in self.t.rows.values() if r.pending)

    async def parked(self) -> list[ParkedRequest]:
        return [
            ParkedRequest(k, r.source, json.loads(r.body), r.received_at, r.attempts, r.parked_at or 0.0, r.error or "")
            for k, r in self._by_id()
            if r.parked
        ]

    async def parked_count(self) -> int:
        return sum(1 for r in self.t.rows.values() if r.parked)

    async def retry_parked(self) -> int:
        parked = [r for r in self.t.rows.values() if r.parked]
        for r in parked:
            r.parked_at, r.error, r.attempts = None, None, 0
        return len(parked)

    async def prune(self, *, older_than_s: float = DONE_RETENTION_S) -> int:
        cutoff = self._now() - older_than_s
        old = [k for k, r in self.t.rows.items() if r.done_at is not None and r.done_at < cutoff]
        for k in old:
            del self.t.rows[k]
        return len(old)

    async def close(self) -> None:
        return None
