"""The index sender paces a scope in an alert storm only (core/index/sender.py): a new incident's first batches,
and any batch with something other than observations, are applied at once; the third observation-only batch in a
row within the interval waits out the rest of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import decklog.core.index.sender as index_sender
from decklog.core.entries import Actor, NewEntry
from decklog.core.index.sender import IndexSender
from decklog.core.store.memory.log_store import MemoryLogStore

SCOPE = "incident/storm"
ALICE = Actor.human("U0ALICE", "alice")


class Recorder:
    def __init__(self) -> None:
        self.applied: list[list[str]] = []

    async def apply(self, _state: Any, entries: Sequence[Any]) -> None:
        self.applied.append([e.kind for e in entries])


def observation(n: int) -> NewEntry:
    payload = {"text": f"alert {n}", "fingerprint": "fp", "alert_status": "firing", "service": "api"}
    return NewEntry.make("observation", Actor.system("alerts"), payload)


async def test_only_a_run_of_observation_batches_is_paced(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(index_sender.asyncio, "sleep", no_sleep)
    store = MemoryLogStore()
    declared = await store.append(SCOPE, [NewEntry.make("declared", ALICE, {"title": "storm"})], create=True)
    index = Recorder()
    sender = IndexSender(index, store, interval=3600.0)  # every batch below comes "within the interval"
    await sender.deliver(SCOPE, declared.entries)
    for n in range(2):  # an incident's first alerts: at once
        await sender.deliver(SCOPE, (await store.append(SCOPE, [observation(n)])).entries)
    assert waits == []
    message = NewEntry.make("message", ALICE, {"text": "looking"})
    await sender.deliver(SCOPE, (await store.append(SCOPE, [message])).entries)  # not an observation: at once
    for n in range(2, 6):
        await sender.deliver(SCOPE, (await store.append(SCOPE, [observation(n)])).entries)
    assert len(waits) == 2 and all(w > 0 for w in waits)  # the 3rd and 4th observation-only batches in a row
    assert len(index.applied) == 8  # nothing is skipped: a paced batch is applied after its wait
