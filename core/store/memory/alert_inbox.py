"""The alert inbox in memory: the ``AlertInbox`` port over a dict (tests). Several ``MemoryAlertInbox`` on one
``AlertInboxRows`` share it, as replicas share one database's; every pending notification is pending to each of
them (no leases: nothing dies)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from decklog.core.store.ports import (
    ERROR_MAX,
    RECEIPT_RETENTION_S,
    AlertReceipt,
    InboxStats,
    StoredNotification,
)


@dataclass
class AlertInboxRows:
    rows: dict[str, tuple[StoredNotification, AlertReceipt]] = field(default_factory=dict)  # receipt → row


class MemoryAlertInbox:
    def __init__(self, rows: AlertInboxRows | None = None, *, now: Callable[[], float] = time.time) -> None:
        self.t = rows if rows is not None else AlertInboxRows()
        self.stats = InboxStats()
        self._now = now

    async def put(self, *, receipt: str, source: str, body: bytes, accepted: int) -> None:
        if receipt in self.t.rows:
            raise ValueError(f"receipt {receipt} is already stored")
        at = self._now()
        self.t.rows[receipt] = (
            StoredNotification(receipt, source, bytes(body), accepted, at),
            AlertReceipt(receipt, source, accepted, at),
        )
        self.stats.persisted += 1
        self.stats.fsyncs += 1

    async def pending(self, *, limit: int = 1000) -> list[StoredNotification]:
        waiting = [stored for stored, receipt in self.t.rows.values() if receipt.routed_at is None]
        return waiting[:limit]

    async def attempt(self, receipts: Sequence[str]) -> None:
        for key in receipts:
            if key in self.t.rows:
                stored, receipt = self.t.rows[key]
                self.t.rows[key] = (replace(stored, attempts=stored.attempts + 1), receipt)

    async def finish(self, results: Sequence[AlertReceipt]) -> None:
        at = self._now()
        for result in results:
            row = self.t.rows.get(result.receipt)
            if row is None or row[1].routed_at is not None:
                continue
            error = None if result.error is None else result.error[:ERROR_MAX]
            outcomes = copy.deepcopy(result.outcomes)
            self.t.rows[result.receipt] = (
                replace(row[0], body=b""),
                replace(row[1], routed_at=at, outcomes=outcomes, error=error),
            )

    async def receipt(self, receipt: str) -> AlertReceipt | None:
        row = self.t.rows.get(receipt)
        return None if row is None else copy.deepcopy(row[1])

    async def pending_count(self) -> int:
        return sum(1 for _, receipt in self.t.rows.values() if receipt.routed_at is None)

    async def prune(self, *, older_than_s: float = RECEIPT_RETENTION_S) -> int:
        cutoff = self._now() - older_than_s
        old = [k for k, (_, r) in self.t.rows.items() if r.routed_at is not None and r.routed_at < cutoff]
        for key in old:
            del self.t.rows[key]
        return len(old)

    async def close(self) -> None:
        return None
