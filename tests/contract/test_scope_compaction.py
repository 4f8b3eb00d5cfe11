"""A resolved incident's scope file is made small (core/store/sqlite/compaction.py): new files have 1 KB pages;
once a resolved scope has nothing left to deliver its delivered outbox rows go, and the file is rewritten without
its free pages when it closes. Rows still pending and parked rows are never dropped, the hash chain and the state
are untouched, and a compacted scope takes new entries as any other."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from decklog.core.entries import Actor, NewEntry
from decklog.core.store.sqlite import schema
from decklog.core.store.sqlite.log_store import SqliteLogStore

ALICE = Actor.human("U0ALICE", "alice")
SCOPE = "incident/compaction"
FILE = "incident~compaction.db"
TOPICS = ("index", "slack")


def messages(n: int, start: int = 0) -> list[NewEntry]:
    return [
        NewEntry.make(
            "message",
            ALICE,
            {"text": f"update {i}: " + "the pool is saturated " * 4, "channel": "C0GENERAL", "ts": f"{i}.1"},
        )
        for i in range(start, start + n)
    ]


def status(to: str, previous: str) -> NewEntry:
    return NewEntry.make("status_changed", ALICE, {"status": to, "previous": previous})


async def incident(store: SqliteLogStore, n: int = 30) -> None:
    await store.append(SCOPE, [NewEntry.make("declared", ALICE, {"title": "compaction", "severity": 2})], create=True)
    for entry in messages(n):
        await store.append(SCOPE, [entry])


async def deliver(store: SqliteLogStore, topic: str) -> int:
    items = await store.outbox_pending(SCOPE, topic, limit=10_000)
    await store.outbox_done(SCOPE, topic, [i.entry.seq for i in items])
    return len(items)


def rows(data: Path) -> dict[str, int]:
    with closing(sqlite3.connect(data / "scopes" / FILE)) as db:  # closed: the store's close checkpoints alone
        return {
            "published": db.execute("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL").fetchone()[0],
            "pending": db.execute(
                "SELECT count(*) FROM outbox WHERE published_at IS NULL AND parked_at IS NULL"
            ).fetchone()[0],
            "parked": db.execute("SELECT count(*) FROM outbox WHERE parked_at IS NOT NULL").fetchone()[0],
            "free": db.execute("PRAGMA freelist_count").fetchone()[0],
            "page_size": db.execute("PRAGMA page_size").fetchone()[0],
        }


async def test_new_scope_files_have_small_pages_made_directly_and_from_spares(tmp_path: Path) -> None:
    plain = SqliteLogStore(tmp_path / "plain", topics=TOPICS, spare_files=0)
    spared = SqliteLogStore(tmp_path / "spared", topics=TOPICS, spare_files=1)
    try:
        spared.spares.fill()
        for store in (plain, spared):
            await incident(store, n=1)
        assert spared.spares.taken == 1 and plain.spares.taken == 0
    finally:
        await plain.close()
        await spared.close()
    assert rows(tmp_path / "plain")["page_size"] == rows(tmp_path / "spared")["page_size"] == schema.PAGE_SIZE == 1024


async def test_a_resolved_scope_fully_delivered_drops_its_delivered_rows_and_shrinks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = SqliteLogStore(data, topics=TOPICS)
    try:
        await incident(store)
        await deliver(store, "index")
        await deliver(store, "slack")
        assert rows(data)["published"] == 62  # open: delivered rows are kept
        await store.append(SCOPE, [status("resolved", "investigating")])
        assert await deliver(store, "index") == 1
        assert rows(data)["published"] == 63  # slack's row for the resolution still waits: nothing dropped
        await store.close()
        size_open = (data / "scopes" / FILE).stat().st_size
        store = SqliteLogStore(data, topics=TOPICS)
        assert await deliver(store, "slack") == 1
        assert rows(data) == {"published": 0, "pending": 0, "parked": 0, "free": rows(data)["free"], "page_size": 1024}
        assert rows(data)["free"] > 0  # the pages are free, and the file is rewritten when it closes
    finally:
        await store.close()
    after = rows(data)
    assert after["free"] == 0 and after["published"] == 0
    assert (data / "scopes" / FILE).stat().st_size < size_open
    store = SqliteLogStore(data, topics=TOPICS)
    try:
        report = await store.verify(SCOPE)
        assert report.ok and report.entries == 32, report
        assert (await store.get_state(SCOPE)).status == "resolved"
        assert [e.seq for e in await store.read(SCOPE)] == list(range(1, 33))
        # a compacted scope takes new entries, delivers them, and compacts again once nothing waits
        await store.append(SCOPE, [status("investigating", "resolved"), *messages(2, start=100)])
        assert await deliver(store, "index") == 3 and await deliver(store, "slack") == 3
        assert rows(data)["published"] == 6  # reopened: kept
        await store.append(SCOPE, [status("resolved", "investigating")])
        await deliver(store, "index")
        await deliver(store, "slack")
        assert rows(data)["published"] == 0
        assert (await store.verify(SCOPE)).ok
    finally:
        await store.close()


async def test_parked_rows_stay_and_pending_rows_block_the_drop(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = SqliteLogStore(data, topics=TOPICS)
    try:
        await incident(store, n=3)
        await store.append(SCOPE, [status("resolved", "investigating")])
        await deliver(store, "index")
        assert rows(data)["pending"] == 5 and rows(data)["published"] == 5  # slack has not delivered: all kept
        slack = await store.outbox_pending(SCOPE, "slack", limit=100)
        await store.outbox_park(SCOPE, "slack", slack[0].entry.seq, attempts=9, error="channel_not_found")
        # parking appended a delivery_failed entry: its rows wait too; deliver them and the rest
        await deliver(store, "index")
        await deliver(store, "slack")
        left = rows(data)
        assert (left["published"], left["pending"], left["parked"]) == (0, 0, 1)
        parked = await store.outbox_parked(SCOPE)
        assert [(p.topic, p.seq, p.error) for p in parked] == [("slack", slack[0].entry.seq, "channel_not_found")]
        assert await store.outbox_retry_parked(SCOPE) == 1  # a parked row can still be delivered later
        assert [i.entry.seq for i in await store.outbox_pending(SCOPE, "slack")] == [slack[0].entry.seq]
    finally:
        await store.close()
