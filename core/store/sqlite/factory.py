"""The SQLite backend's factory (the embedded default): one data directory, one process that serves it.

Scope files under ``DATA_DIR/scopes/``, the index in ``DATA_DIR/index.db`` and the Slack inbox in
``DATA_DIR/inbox.db``, the alert inbox in ``DATA_DIR/alert_inbox.db``. One server owns a data directory (the CLI may write beside it), so the ports that exist
only for several processes on one database are ``None``: the callers use their in-process ways (the router's
asyncio locks and limiter, one pacer per channel, the scheduler's own timers, an asyncio lock per run target).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from decklog.core.alarm import Alarm
from decklog.core.clock import Clock
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
from decklog.core.store.sqlite.alert_inbox import SqliteAlertInbox
from decklog.core.store.sqlite.api_keys import SqliteApiKeys
from decklog.core.store.sqlite.inbox import SqliteInbox
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore


class SqliteFactory:
    """``SqliteFactory(data_dir)``: the ports of a SQLite data directory."""

    name = "sqlite"

    def __init__(
        self, data_dir: Path, *, log_key: str | bytes | None = None, max_open: int = 64, spare_files: int = 3
    ) -> None:
        """``max_open``: scope files a store holds open at most; ``spare_files``: empty ones it keeps ready."""
        self.data_dir = Path(data_dir)
        self.log_key = log_key
        self.max_open = max_open
        self.spare_files = spare_files
        self._store: SqliteLogStore | None = None  # the first store made: the index runs on its worker threads

    async def log_store(
        self,
        *,
        topics: Sequence[str] = ("index",),
        topic_kinds: Mapping[str, Collection[str]] | None = None,
        clock: Clock | None = None,
    ) -> LogStore:
        store = SqliteLogStore(
            self.data_dir,
            topics=topics,
            topic_kinds=topic_kinds,
            clock=clock,
            log_key=self.log_key,
            max_open=self.max_open,
            spare_files=self.spare_files,
        )
        if self._store is None:
            self._store = store
        return store

    async def index(self) -> IndexPort:
        if self._store is None:
            raise RuntimeError("open the log store first: the index runs on its worker threads")
        index = SqliteIndex(self.data_dir / "index.db", self._store.executor)
        await index.open()
        return index

    async def inbox(self) -> Inbox:
        return await SqliteInbox.open(self.data_dir)

    async def alert_inbox(self) -> AlertInbox:
        return await SqliteAlertInbox.open(self.data_dir)

    def inbox_exists(self) -> bool:
        return (self.data_dir / "inbox.db").is_file()

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
        return await SqliteApiKeys.open(self.data_dir)

    async def health(self) -> dict[str, str]:
        return {}

    async def close(self) -> None:
        return None
