"""The memory backend's factory: every part on one ``MemoryStorage`` (tests; nothing survives the process).

Several stores, indexes and inboxes made on one storage behave like several processes on one database. Nothing is
shared with another process, so the ports that exist only for replicas are ``None``, as on SQLite.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from decklog.core.alarm import Alarm
from decklog.core.clock import Clock
from decklog.core.store.memory.alert_inbox import MemoryAlertInbox
from decklog.core.store.memory.api_keys import MemoryApiKeys
from decklog.core.store.memory.inbox import MemoryInbox
from decklog.core.store.memory.index import MemoryIndex
from decklog.core.store.memory.log_store import MemoryLogStore, MemoryStorage
from decklog.core.store.ports import (
    AlertInbox,
    ApiKeys,
    CursorClaims,
    DueTurns,
    Inbox,
    IndexPort,
    Leases,
    LogStore,
    PaceSlots,
    RateCounter,
    RouteLocks,
)


class MemoryFactory:
    """``MemoryFactory(storage)``: the ports of one in-memory storage (a new one when not given)."""

    name = "memory"

    def __init__(self, storage: MemoryStorage | None = None, *, log_key: str | bytes | None = None) -> None:
        self.storage = storage or MemoryStorage()
        self.log_key = log_key

    async def log_store(
        self,
        *,
        topics: Sequence[str] = ("index",),
        topic_kinds: Mapping[str, Collection[str]] | None = None,
        clock: Clock | None = None,
    ) -> LogStore:
        return MemoryLogStore(self.storage, topics=topics, topic_kinds=topic_kinds, clock=clock, log_key=self.log_key)

    async def index(self) -> IndexPort:
        return MemoryIndex(self.storage.index)

    async def inbox(self) -> Inbox:
        return MemoryInbox(self.storage.inbox)

    async def alert_inbox(self) -> AlertInbox:
        return MemoryAlertInbox(self.storage.alert_inbox)

    def inbox_exists(self) -> bool:
        return bool(self.storage.inbox.rows)

    def cursor_claims(self) -> CursorClaims | None:
        return None

    def leases(self) -> Leases | None:
        return None

    def route_locks(self) -> RouteLocks | None:
        return None

    def rate_counter(self) -> RateCounter | None:
        return None

    def pace_slots(self) -> PaceSlots | None:
        return None

    def due_turns(self, alarm: Alarm, owner: str, *, max_wait: float, lease_s: float, poll_s: float) -> DueTurns | None:
        return None

    async def api_keys(self) -> ApiKeys:
        return MemoryApiKeys(self.storage.api)

    async def health(self) -> dict[str, str]:
        return {}

    async def close(self) -> None:
        return None
