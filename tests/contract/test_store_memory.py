"""The in-memory backend passes the same ``LogStore`` contract as SQLite: the ports do not leak SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.store import LogStore, MemoryLogStore
from core.store.memory import MemoryStorage
from core.store.ports import CommitFeed, DeliveryStore, EntryLog, Outbox, SenderMemos
from tests.store_contract import LogStoreContract, OpenStore, declare, message

TOPICS = ("index", "slack")


@pytest.fixture
async def memory_stores() -> AsyncIterator[OpenStore]:
    storage = MemoryStorage()  # one "database": a second store on it is a restart or a second process
    made: list[MemoryLogStore] = []

    async def open_store(*, max_open: int | None = None, **_options: Any) -> LogStore:
        store = MemoryLogStore(storage, topics=TOPICS)
        made.append(store)
        return store

    yield open_store
    for store in made:
        await store.close()


class TestMemoryLogStoreContract(LogStoreContract):
    @pytest.fixture
    def open_store(self, memory_stores: OpenStore) -> OpenStore:
        return memory_stores


async def test_a_narrow_port_is_enough_for_its_callers(memory_stores: OpenStore) -> None:
    store = await memory_stores()
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
