"""Many replicas, one database: a periodic job runs on one replica at a time (a lease on the database clock), and
moves to another replica when its holder stops renewing it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from decklog.bot.ops import leased_jobs
from decklog.bot.parts import Job, Provides
from decklog.core.store.postgres.log_store import PostgresLogStore


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresLogStore]:
    s = PostgresLogStore(pg_url, topics=("index",))
    await s.open()
    yield s
    await s.close()


async def test_a_lease_is_one_owners_until_it_runs_out(store: PostgresLogStore) -> None:
    assert await store.try_lease("job:x", "a", lease_s=0.3)
    assert not await store.try_lease("job:x", "b", lease_s=0.3)
    assert await store.try_lease("job:x", "a", lease_s=0.3)  # renewed by its owner
    deadline = asyncio.get_running_loop().time() + 10
    while not await store.try_lease("job:x", "b", lease_s=5):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    assert not await store.try_lease("job:x", "a", lease_s=5)  # b's now
    assert await store.try_lease("job:y", "a", lease_s=5)  # names are independent


async def test_leased_jobs_run_on_one_replica_per_period(store: PostgresLogStore) -> None:
    ran: list[str] = []

    def replica(name: str) -> list[Provides]:
        async def sweep() -> None:
            ran.append(name)

        async def own() -> None:
            ran.append(f"{name}:own")

        provided = [Provides(jobs=[Job("summaries", 0.2, sweep), Job("inbox-takeover", 0.2, own)])]
        leased_jobs(store, name, provided)
        return provided

    a, b = replica("a"), replica("b")
    for _ in range(3):
        await asyncio.gather(*(j.run() for p in (a, b) for j in p[0].jobs))
    assert sorted(x for x in ran if not x.endswith(":own")) == ["a", "a", "a"] or sorted(
        x for x in ran if not x.endswith(":own")
    ) == ["b", "b", "b"]
    assert ran.count("a:own") == ran.count("b:own") == 3  # replica-local jobs run everywhere
