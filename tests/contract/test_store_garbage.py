"""An append leaves nothing for the garbage collector: its batch, its lookups and the states it folded are freed by
reference counting the moment the batch is settled (decision 134). A reference cycle there once put every batch's
objects (about 18 per alert) in the collector's hands, which doubled its pauses in the alert storm."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from decklog.core.entries import Actor, NewEntry
from decklog.core.state import ScopeState
from decklog.core.store.sqlite.log_store import SqliteLogStore
from decklog.core.store.staging import Batch, Lookups

ALICE = Actor.human("U0ALICE", "alice")


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _alive(kind: type) -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, kind))


@pytest.mark.parametrize("on_loop", [True, False], ids=["staged-on-loop", "on-a-worker"])
async def test_settled_append_batches_are_freed_without_the_collector(
    tmp_path: Path, collector_off: None, on_loop: bool
) -> None:
    store = SqliteLogStore(tmp_path, topics=("index", "slack"), stage_on_loop=on_loop)
    try:
        await store.append("incident/gc", [NewEntry.make("declared", ALICE, {"title": "gc"})], create=True)
        batches, lookups, states = _alive(Batch), _alive(Lookups), _alive(ScopeState)
        for i in range(50):
            entry = NewEntry.make("message", ALICE, {"text": f"m{i}"}, idempotency_key=f"k{i}")
            await store.append("incident/gc", [entry])
        # counted against what was alive before (other tests of this process may hold some): nothing per batch
        assert _alive(Batch) == batches
        assert _alive(Lookups) == lookups
        assert _alive(ScopeState) <= states + 1  # the file's cached state moves on; the folded ones are gone
    finally:
        await store.close()
