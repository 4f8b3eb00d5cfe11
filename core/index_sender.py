"""The outbox sender that keeps the index in step with the scope logs (idempotent by seq)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.entries import Entry
from core.index import Index


class IndexSender:
    """The outbox sender that keeps ``index.db`` in step with the scope logs (idempotent by seq)."""

    name = "index"
    batch_size = 256

    def __init__(self, index: Index, store: Any) -> None:
        self.index = index
        self.store = store

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        state = await self.store.get_state(scope)
        await self.index.apply(state, entries)
