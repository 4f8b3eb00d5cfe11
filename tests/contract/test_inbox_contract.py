"""The inbox contract (``core.inbox.Inbox``), run on SQLite (inbox.db) and PostgreSQL (the ``inbox`` table every
replica shares): stored once per key, pending oldest first, done, pruned, and (issue 31) parked after its attempts
with its error, never pending again until ``retry_parked`` queues it again."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.inbox import ERROR_MAX, Inbox
from core.store import SqliteInbox
from core.store.inbox_postgres import PostgresInbox
from core.store.postgres import PostgresLogStore

BODY = {"type": "event_callback", "event_id": "Ev1", "event": {"type": "message"}}


@pytest.fixture(params=["sqlite", "postgresql"])
async def inbox(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Inbox]:
    if request.param == "sqlite":
        made: Inbox = await SqliteInbox.open(tmp_path)
        yield made
        await made.close()
        return
    store = PostgresLogStore(request.getfixturevalue("pg_url"), topics=("index",))
    await store.open()
    try:
        yield PostgresInbox(store.engine, store.executor, owner="me")
    finally:
        await store.close()


async def test_put_once_pending_oldest_first_done_and_pruned(inbox: Inbox) -> None:
    for n in range(3):
        assert await inbox.put(key=f"k{n}", source="http", body={**BODY, "n": n}, meta={"retry_num": "0"})
    assert not await inbox.put(key="k1", source="http", body=BODY, meta={})
    assert [(i.key, i.body["n"], i.attempts) for i in await inbox.pending()] == [
        ("k0", 0, 0),
        ("k1", 1, 0),
        ("k2", 2, 0),
    ]
    assert await inbox.attempt(key="k1") == 1 and await inbox.attempt(key="k1") == 2
    await inbox.done(key="k0")
    assert [i.key for i in await inbox.pending()] == ["k1", "k2"] and await inbox.pending_count() == 2
    assert not await inbox.put(key="k0", source="http", body=BODY, meta={})  # a done key still refuses retries
    assert await inbox.prune(older_than_s=-1) == 1
    assert await inbox.put(key="k0", source="http", body=BODY, meta={})


async def test_a_parked_request_is_kept_with_its_error_and_never_pending_until_retried(inbox: Inbox) -> None:
    for key in ("poison", "fine"):
        assert await inbox.put(key=key, source="http", body={**BODY, "key": key}, meta={})
    await inbox.park(key="poison", error="TypeError: " + "x" * (2 * ERROR_MAX), attempts=3)
    assert [i.key for i in await inbox.pending()] == ["fine"]
    assert (await inbox.pending_count(), await inbox.parked_count()) == (1, 1)
    (parked,) = await inbox.parked()
    assert (parked.key, parked.source, parked.body["key"], parked.attempts) == ("poison", "http", "poison", 3)
    assert parked.error.startswith("TypeError: x") and len(parked.error) == ERROR_MAX
    assert parked.parked_at >= parked.received_at > 0
    assert not await inbox.put(key="poison", source="http", body=BODY, meta={})  # a retry of it is refused
    assert await inbox.prune(older_than_s=-1) == 0  # kept: it is the record of what was given up
    await inbox.done(key="fine")
    await inbox.park(key="fine", error="too late", attempts=1)  # a done request is not parked
    assert await inbox.parked_count() == 1

    assert await inbox.retry_parked() == 1
    assert [(i.key, i.attempts) for i in await inbox.pending()] == [("poison", 0)]
    assert await inbox.parked() == [] and await inbox.retry_parked() == 0
    await inbox.done(key="poison")
    assert await inbox.pending() == [] and await inbox.parked() == []


async def test_a_parked_request_is_no_replicas_and_a_retried_one_any_replicas(pg_url: str) -> None:
    store = PostgresLogStore(pg_url, topics=("index",))
    await store.open()
    try:
        mine = PostgresInbox(store.engine, store.executor, owner="a")
        other = PostgresInbox(store.engine, store.executor, owner="b")
        assert await mine.put(key="poison", source="http", body=BODY, meta={})
        await mine.park(key="poison", error="boom", attempts=3)
        assert await mine.pending() == [] and await other.pending() == []
        assert await other.retry_parked() == 1
        assert [i.key for i in await other.pending()] == ["poison"]  # freed: the first replica to look takes it
        assert await mine.pending() == []
    finally:
        await store.close()


async def test_an_inbox_db_made_before_parking_gets_its_columns(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "inbox.db") as conn:  # as older decklogs made it, with a pending request
        conn.execute(
            "CREATE TABLE inbox (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, source TEXT NOT NULL,"
            " body TEXT NOT NULL, meta TEXT NOT NULL, received_at REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,"
            " done_at REAL)"
        )
        conn.execute("INSERT INTO inbox (key, source, body, meta, received_at) VALUES ('old', 'http', '{}', '{}', 1)")
    inbox = await SqliteInbox.open(tmp_path)
    try:
        assert [i.key for i in await inbox.pending()] == ["old"]
        await inbox.park(key="old", error="boom", attempts=3)
        assert [p.key for p in await inbox.parked()] == ["old"]
    finally:
        await inbox.close()
