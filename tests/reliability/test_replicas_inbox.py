"""Many replicas, one database: the Slack inbox is one table, so a request is processed once whichever replica
gets it (and a retry on another replica is refused); a dead replica's acknowledged requests are taken over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from decklog.core.store.postgres.inbox import PostgresInbox
from decklog.core.store.postgres.log_store import PostgresLogStore


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresLogStore]:
    s = PostgresLogStore(pg_url, topics=("index",))
    await s.open()
    yield s
    await s.close()


async def test_a_retry_on_another_replica_is_refused(store: PostgresLogStore) -> None:
    a = PostgresInbox(store.engine, store.executor, owner="a")
    b = PostgresInbox(store.engine, store.executor, owner="b")
    body = {"type": "event_callback", "event_id": "Ev1"}
    assert await a.put(key="ev:Ev1", source="http", body=body, meta={"retry_num": "0"})
    assert not await b.put(key="ev:Ev1", source="http", body=body, meta={"retry_num": "1"})
    assert (a.stats.persisted, b.stats.duplicates) == (1, 1)
    # the pending request is a's (its lease runs): b does not replay it
    assert [i.key for i in await a.pending()] == ["ev:Ev1"]
    assert await b.pending() == []
    await a.done(key="ev:Ev1")
    assert await a.pending() == [] and await a.pending_count() == 0
    assert not await b.put(key="ev:Ev1", source="http", body=body, meta={"retry_num": "2"})  # done keys too


async def test_concurrent_puts_of_one_key_on_many_replicas_store_it_once(store: PostgresLogStore) -> None:
    replicas = [PostgresInbox(store.engine, store.executor, owner=f"r{i}") for i in range(3)]
    keys = [f"ev:{n}" for n in range(40)]
    outcomes = await asyncio.gather(
        *(r.put(key=k, source="http", body={"n": k}, meta={}) for k in keys for r in replicas)
    )
    stored = [k for (k, _r), ok in zip([(k, r) for k in keys for r in replicas], outcomes, strict=True) if ok]
    assert sorted(stored) == sorted(keys)  # every key stored by exactly one replica
    assert await replicas[0].pending_count() == len(keys)


async def test_a_dead_replicas_requests_are_taken_over_once(store: PostgresLogStore) -> None:
    dead = PostgresInbox(store.engine, store.executor, owner="dead", lease_s=0.2)
    for n in range(5):
        assert await dead.put(key=f"k{n}", source="http", body={"n": n}, meta={})
    x = PostgresInbox(store.engine, store.executor, owner="x")
    y = PostgresInbox(store.engine, store.executor, owner="y")
    deadline = asyncio.get_running_loop().time() + 10
    taken: list[str] = []
    while len(taken) < 5:
        assert asyncio.get_running_loop().time() < deadline, taken
        got_x, got_y = await asyncio.gather(x.pending(), y.pending())
        taken.extend(i.key for i in got_x if i.key not in taken)
        # once one replica took a request it is that replica's (its lease): the other never sees it
        assert not ({i.key for i in got_x} & {i.key for i in got_y})
        taken.extend(i.key for i in got_y if i.key not in taken)
        await asyncio.sleep(0.05)
    assert sorted(taken) == [f"k{n}" for n in range(5)]
    assert x.taken_over + y.taken_over == 5
    assert await dead.pending() == []  # the dead one, were it alive again, has lost them
    assert await x.attempt(key="k0") == 1


async def test_prune_forgets_old_done_requests(store: PostgresLogStore) -> None:
    a = PostgresInbox(store.engine, store.executor, owner="a")
    await a.put(key="old", source="http", body={}, meta={})
    await a.put(key="open", source="http", body={}, meta={})
    await a.done(key="old")
    assert await a.prune(older_than_s=3600) == 0
    assert await a.prune(older_than_s=-1) == 1
    assert [i.key for i in await a.pending()] == ["open"]
    assert await a.put(key="old", source="http", body={}, meta={})  # forgotten: a new request again
