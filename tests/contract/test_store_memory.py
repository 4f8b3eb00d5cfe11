"""The in-memory backend passes the same storage contract as SQLite and PostgreSQL: the ports do not leak SQL."""

from __future__ import annotations

import pytest

from decklog.core.store.memory.factory import MemoryFactory
from decklog.core.store.memory.log_store import MemoryLogStore, MemoryStorage
from decklog.core.store.ports import CommitFeed, DeliveryStore, EntryLog, Outbox, SenderMemos, StorageFactory
from tests.store_contract import TOPICS, MakeFactory, StorageContract, declare, message


class TestMemoryStorage(StorageContract):
    @pytest.fixture
    def make_factory(self) -> MakeFactory:
        storage = MemoryStorage()  # one "database": a second factory on it is a restart or a second process

        def make(*, max_open: int | None = None) -> StorageFactory:
            return MemoryFactory(storage)

        return make


async def test_a_narrow_port_is_enough_for_its_callers() -> None:
    store = MemoryLogStore(MemoryStorage(), topics=TOPICS)
    log: EntryLog = store
    outbox: Outbox = store
    memos: SenderMemos = store
    feed: CommitFeed = store
    delivery: DeliveryStore = store
    heard: list[int] = []
    feed.subscribe(lambda _scope, entries: heard.extend(e.seq for e in entries))
    await declare(log)
    await log.append("incident/payments-5xx", [message("hi")])
    assert [i.entry.seq for i in await outbox.outbox_pending("incident/payments-5xx", "slack")] == [1, 2]
    await memos.memo_put("incident/payments-5xx", "slack", "k", {"ts": "1.2"})
    assert await delivery.memo_all("incident/payments-5xx", "slack") == {"k": {"ts": "1.2"}}
    assert heard == [1, 2]
