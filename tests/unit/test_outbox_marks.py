"""Done marks: a mark added while the scope's previous flush is writing is written too, without another add."""

from __future__ import annotations

import asyncio
from typing import Any

from decklog.core.outbox.marks import DoneMarks
from tests.conftest import eventually


class SlowStore:
    """Records ``outbox_done`` calls; the first one waits until ``release`` is set."""

    def __init__(self) -> None:
        self.done: list[tuple[str, str, list[int]]] = []
        self.release = asyncio.Event()
        self.writing = asyncio.Event()

    async def outbox_done(self, scope: str, topic: str, seqs: list[int]) -> None:
        self.writing.set()
        if not self.done:
            await self.release.wait()
        self.done.append((scope, topic, list(seqs)))


async def test_a_mark_added_during_a_write_is_written_after_it() -> None:
    store = SlowStore()
    marks = DoneMarks(store, delay=0.001, spacing=0.01)  # type: ignore[arg-type]
    marks.add("incident/a", "slack", [1])
    await asyncio.wait_for(store.writing.wait(), 5)  # the first flush is writing #1
    marks.add("incident/a", "slack", [2])  # its task is still the scope's flush: no new one was made for #2
    store.release.set()

    def written() -> Any:
        return [seq for _scope, _topic, seqs in store.done for seq in seqs] == [1, 2]

    await eventually(written, what="#2 written by a flush of its own", timeout=5)
    assert marks.pending("incident/a", "slack") == 0
