"""The dispatcher hands freshly committed entries to senders from the commit feed once a pair is clean, and falls
back to the durable pending rows on a failure, an explicit wake, or a commit the feed never carried."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import decklog.core.outbox.dispatcher as outbox
from decklog.core.entries import Actor, Entry, NewEntry
from decklog.core.outbox.dispatcher import Dispatcher, RetryPolicy
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually

ACTOR = Actor.system("test")
SCOPE = "incident/fresh"


class Recorder:
    name = "rec"
    batch_size = 8

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.fail_next = 0

    @property
    def seqs(self) -> list[int]:
        return [s for call in self.calls for s in call]

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("boom")
        self.calls.append([e.seq for e in entries])


class CountingStore(SqliteLogStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pending_reads = 0
        self.read_pause = 0.0  # a slow read: commits land while it runs

    async def outbox_pending(self, scope: Any, topic: str, *, limit: int = 100) -> Any:
        self.pending_reads += 1
        if self.read_pause:
            await asyncio.sleep(self.read_pause)
        return await super().outbox_pending(scope, topic, limit=limit)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[CountingStore, Dispatcher, Recorder]]:
    store = CountingStore(tmp_path, topics=("rec",))
    await store.append(SCOPE, [NewEntry.make("declared", ACTOR, {"title": "fresh"})], create=True)
    rec = Recorder()
    dispatcher = Dispatcher(store, [rec], policy=RetryPolicy(base_delay=0.01, max_delay=0.05))
    dispatcher.start()
    await dispatcher.sweep()
    await eventually(lambda: rec.seqs == [1], what="the boot sweep delivers the declaration")
    await dispatcher.idle()
    yield store, dispatcher, rec
    await dispatcher.stop()
    await store.close()


async def message(store: SqliteLogStore, text: str) -> int:
    result = await store.append(SCOPE, [NewEntry.make("message", ACTOR, {"text": text})])
    return result.entries[0].seq


async def pending(store: SqliteLogStore) -> int:
    return (await store.outbox_summary(SCOPE)).pending.get("rec", 0)


async def test_fresh_entries_skip_the_pending_read(world: tuple[CountingStore, Dispatcher, Recorder]) -> None:
    store, dispatcher, rec = world
    before = store.pending_reads
    seqs = [await message(store, f"m{i}") for i in range(5)]
    await eventually(lambda: rec.seqs[1:] == seqs, what="every message delivered once, in order")
    await dispatcher.idle()
    assert store.pending_reads == before
    assert await pending(store) == 0  # and marked done


async def test_a_failure_goes_back_to_the_durable_rows(world: tuple[CountingStore, Dispatcher, Recorder]) -> None:
    store, dispatcher, rec = world
    rec.fail_next = 1
    before = store.pending_reads
    seq = await message(store, "fails once")
    await eventually(lambda: seq in rec.seqs, what="the retry from the pending row")
    await dispatcher.idle()
    assert store.pending_reads > before
    assert rec.seqs.count(seq) == 1
    assert await pending(store) == 0
    later = await message(store, "after the retry")
    await eventually(lambda: later in rec.seqs, what="the next commit")
    assert rec.seqs == sorted(rec.seqs)


async def test_a_commit_the_feed_missed_is_found_when_the_clean_mark_is_stale(
    world: tuple[CountingStore, Dispatcher, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, dispatcher, rec = world
    listeners = list(store._listeners)
    store._listeners.clear()  # this commit reaches the file but not the feed (e.g. another process wrote it)
    missed = await message(store, "missed")
    store._listeners.extend(listeners)
    dispatcher._clean = {key: 0.0 for key in dispatcher._clean}  # the clean mark is past CLEAN_TTL_S
    monkeypatch.setattr(outbox, "CLEAN_TTL_S", 60.0)
    seen = await message(store, "seen")
    await eventually(lambda: rec.seqs[-2:] == [missed, seen], what="both, in order")
    await dispatcher.idle()
    assert await pending(store) == 0


async def test_a_late_feed_item_is_not_delivered_twice(world: tuple[CountingStore, Dispatcher, Recorder]) -> None:
    store, dispatcher, rec = world
    seq = await message(store, "once")
    await eventually(lambda: seq in rec.seqs)
    await dispatcher.idle()
    entry = (await store.read_seqs(SCOPE, [seq]))[0]
    dispatcher._on_commit(SCOPE, (entry,))  # the same entry again (a feed item that raced a pending read)
    await dispatcher.idle()
    assert rec.seqs.count(seq) == 1


async def test_commits_during_a_pending_read_are_queued_and_the_pair_turns_clean(
    world: tuple[CountingStore, Dispatcher, Recorder],
) -> None:
    store, dispatcher, rec = world
    dispatcher.wake(SCOPE)  # back to the durable rows: the next drain reads them while a storm commits
    before = store.pending_reads
    store.read_pause = 0.05
    seqs: list[int] = []
    for burst in range(8):
        seqs += await asyncio.gather(*(message(store, f"storm {burst}.{i}") for i in range(5)))
    await eventually(lambda: sorted(set(rec.seqs[1:])) == sorted(seqs), what="every storm entry delivered")
    await dispatcher.idle()
    assert rec.seqs == sorted(rec.seqs) and len(rec.seqs) == len(set(rec.seqs))  # in order, each once
    assert store.pending_reads - before <= 2  # the commits made while reading were queued, not read again
    assert dispatcher._clean.get((SCOPE, "rec"), 0.0) > 0
    assert await pending(store) == 0


async def test_a_new_scope_is_delivered_from_the_feed_alone(
    world: tuple[CountingStore, Dispatcher, Recorder],
) -> None:
    store, dispatcher, rec = world
    before, delivered = store.pending_reads, len(rec.seqs)
    first = await store.append("incident/brand-new", [NewEntry.make("declared", ACTOR, {"title": "new"})], create=True)
    more = await store.append("incident/brand-new", [NewEntry.make("message", ACTOR, {"text": "next"})])
    await dispatcher.idle()
    assert store.pending_reads == before  # seq 1 came through the feed: nothing of the scope was committed before
    assert (await store.outbox_summary("incident/brand-new")).pending.get("rec", 0) == 0
    assert rec.seqs[delivered:] == [first.entries[0].seq, more.entries[0].seq] == [1, 2]
