"""Many replicas, one database: ``agents.max_concurrent_turns`` holds across the replicas, not per process
(core/agents/shared_slots.py). Each turn takes one of ``limit`` named leases in the shared database, keeps it while
it runs, and gives it back; a dead replica's slots free themselves when their leases run out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.wiring import Parts
from decklog.core.agents import TurnRuntime
from decklog.core.agents.shared_slots import SharedSlots, SlotLease
from decklog.core.agents.turn_parts import TurnSlots, TurnStats
from decklog.core.entries import Actor, NewEntry
from decklog.core.store.postgres.log_store import PostgresLogStore
from tests.conftest import ServerFactory, eventually
from tests.unit.test_turn_slots import Held

ALICE = Actor.human("U0ALICE", "alice")


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresLogStore]:
    s = PostgresLogStore(pg_url, topics=("agents",))
    await s.open()
    yield s
    await s.close()


def replica_slots(store: PostgresLogStore, limit: int, owner: str, **kw: Any) -> TurnSlots:
    return TurnSlots(limit, TurnStats(), shared=SharedSlots(store, limit, owner, poll_s=0.02, **kw))


async def test_two_replicas_run_at_most_the_limit_between_them(store: PostgresLogStore) -> None:
    held = Held()  # one reasoner object behind both replicas: it counts the turns inside the model across them
    runtimes = [TurnRuntime(store, reasoner=held, max_concurrent=2) for _ in range(2)]
    for runtime, owner in zip(runtimes, ("a", "b"), strict=True):
        runtime.slots.share(SharedSlots(store, 2, owner, poll_s=0.02))
    scopes = [f"incident/replica-slots-{i}" for i in range(6)]
    for scope in scopes:
        await store.append(scope, [NewEntry.make("declared", ALICE, {"title": scope})], create=True)
    turns = [asyncio.ensure_future(runtimes[i % 2].run_turn(scope)) for i, scope in enumerate(scopes)]
    await eventually(
        lambda: held.running == 2 and sum(r.slots.waiting for r in runtimes) == 4, timeout=10, what="2 in, 4 waiting"
    )
    assert len(held.calls) == 2  # each replica alone would have let two in: four
    held.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*turns), timeout=30)
    assert [r.status for r in results] == ["recorded"] * 6
    assert held.most == 2 and sorted(t.scope for t in held.calls) == sorted(scopes)
    assert all(r.slots.waiting == 0 for r in runtimes)
    assert await SharedSlots(store, 2, "c").try_take() is not None  # every slot was given back


async def test_a_dead_replicas_slot_frees_itself_when_its_lease_runs_out(store: PostgresLogStore) -> None:
    assert await store.try_lease("turn-slot:0", "dead-replica:1", lease_s=0.5)  # it died holding it
    slots = replica_slots(store, 1, "alive")
    entered = asyncio.Event()

    async def turn() -> None:
        async with slots.hold("incident/after-a-death"):
            entered.set()

    waiting = asyncio.ensure_future(turn())
    await eventually(lambda: slots.waiting == 1, timeout=10, what="the turn waiting for the dead replica's slot")
    assert not entered.is_set()
    await asyncio.wait_for(waiting, timeout=10)  # the lease ran out on the database clock
    assert entered.is_set() and slots.stats.slot_waits == 1


class CountedLeases:
    """The store's leases, counting the calls that renew a held lease."""

    def __init__(self, store: PostgresLogStore) -> None:
        self.store = store
        self.renewals = 0
        self.held: set[str] = set()

    async def try_lease(self, name: str, owner: str, *, lease_s: float) -> bool:
        if owner in self.held:
            self.renewals += 1
        got = await self.store.try_lease(name, owner, lease_s=lease_s)
        if got:
            self.held.add(owner)
        return got

    async def release_lease(self, name: str, owner: str) -> None:
        await self.store.release_lease(name, owner)


async def test_a_running_turn_keeps_its_slot_past_the_lease_and_gives_it_back(store: PostgresLogStore) -> None:
    leases = CountedLeases(store)
    shared = SharedSlots(leases, 1, "a", lease_s=0.3, poll_s=0.02)
    other = SharedSlots(store, 1, "b", lease_s=0.3)
    lease = await shared.take()
    assert isinstance(lease, SlotLease) and lease.name == "turn-slot:0"
    async with shared.kept(lease):
        await eventually(lambda: leases.renewals >= 4, timeout=10, what="four renewals: more than one lease long")
        assert await other.try_take() is None  # renewed, so still this turn's
    assert await other.try_take() is not None  # given back at once, not left to run out


def test_a_shared_limit_below_one_is_refused(store: PostgresLogStore) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SharedSlots(store, 0, "a")


async def test_a_server_on_postgresql_shares_its_turn_slots_and_one_on_sqlite_does_not(
    pg_url: str, make_server: ServerFactory, tmp_path: Path
) -> None:
    built: list[Parts] = []
    await make_server(parts={"agents"}, database_url=pg_url, data_dir=tmp_path / "pg", on_built=built.append)
    await make_server(parts={"agents"}, data_dir=tmp_path / "sqlite", on_built=built.append)
    on_pg, on_sqlite = (b.agents for b in built)
    assert on_pg is not None and on_sqlite is not None
    shared = on_pg.turns.slots.shared
    assert shared is not None and shared.limit == on_pg.turns.slots.limit == 4  # the shipped max_concurrent_turns
    assert on_sqlite.turns.slots.shared is None  # one process: its own semaphore is the limit
