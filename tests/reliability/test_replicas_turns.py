"""Many replicas, one database: an agent turn that falls due runs on one replica (a ``due_turns`` row claimed
``FOR UPDATE SKIP LOCKED`` under a lease), a dead holder's turn is taken over once its lease runs out, and the
debounce and max wait hold on the database clock whichever replica the entries were delivered to."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
import pytest

from decklog.core.agents import TurnRuntime, TurnScheduler
from decklog.core.agents.agents_sender import AgentsSender
from decklog.core.alarm import AsyncioAlarm
from decklog.core.entries import Actor, NewEntry
from decklog.core.store.postgres.due_turns import PostgresDueTurns
from decklog.core.store.postgres.log_store import PostgresLogStore
from tests.conftest import eventually
from tests.unit.test_agents import Scripted

ALICE = Actor.human("U0ALICE", "alice")


@dataclass
class Replica:
    store: PostgresLogStore
    alarm: AsyncioAlarm
    due: PostgresDueTurns
    reasoner: Scripted
    scheduler: TurnScheduler

    async def close(self) -> None:
        await self.scheduler.stop()
        await self.alarm.shutdown()
        await self.store.close()


async def replica(url: str, name: str, *, debounce: float = 0.05, max_wait: float = 60.0, **kw: float) -> Replica:
    store = PostgresLogStore(url, topics=("agents",))
    await store.open()
    alarm = AsyncioAlarm()
    due = PostgresDueTurns(store, alarm, name, max_wait=max_wait, **kw)  # type: ignore[arg-type]
    reasoner = Scripted()
    runtime = TurnRuntime(store, reasoner=reasoner)
    scheduler = TurnScheduler(runtime, alarm, first_delay=0.0, debounce=debounce, max_wait=max_wait, due_turns=due)
    return Replica(store, alarm, due, reasoner, scheduler)


@pytest.fixture
async def pair(pg_url: str) -> AsyncIterator[tuple[Replica, Replica]]:
    a, b = await replica(pg_url, "a"), await replica(pg_url, "b")
    yield a, b
    await a.close()
    await b.close()


async def declare(r: Replica, scope: str, messages: int = 1) -> None:
    await r.store.append(scope, [NewEntry.make("declared", ALICE, {"title": scope})], create=True, idempotency_key="d")
    for i in range(messages):
        result = await r.store.append(scope, [NewEntry.make("message", ALICE, {"text": f"update {i}"})])
        await AgentsSender(r.scheduler).deliver(scope, result.entries)


async def test_two_replicas_run_one_turn_per_due_scope(pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    scopes = [f"incident/two-{i}" for i in range(6)]
    for i, scope in enumerate(scopes):
        await declare(a if i % 2 else b, scope)
        result = await a.store.append(scope, [NewEntry.make("message", ALICE, {"text": "both saw it"})])
        for r in (a, b):  # the same delivery on both replicas (a cursor handover redelivers)
            await AgentsSender(r.scheduler).deliver(scope, result.entries)
    await a.scheduler.arm_pending()
    await b.scheduler.arm_pending()

    async def all_turned() -> bool:
        states = [await a.store.get_state(s) for s in scopes]
        return all(st.last_turn_seq > 0 for st in states) and not await a.due.rows()

    await eventually(all_turned, timeout=20, what="every scope's turn, and no due row left")
    await a.scheduler.idle()
    await b.scheduler.idle()
    assert len(a.reasoner.calls) + len(b.reasoner.calls) == len(scopes)  # one reasoner call per scope
    assert a.due.claimed + b.due.claimed == len(scopes)
    assert a.scheduler.runtime.stats.raced == b.scheduler.runtime.stats.raced == 0


async def test_a_dead_holders_turn_is_taken_over_after_its_lease(pg_url: str) -> None:
    dead = await replica(pg_url, "dead", lease_s=30.0)
    live = await replica(pg_url, "live", lease_s=30.0)
    scope = "incident/orphan"
    try:
        await declare(dead, scope)
        await eventually(lambda: _due_now(dead, scope), timeout=20, what="the turn due")
        claims = await dead.store.run(dead.due._claim)  # claimed, then the process died (nothing renews it)
        assert [c.scope for c in claims] == [scope]
        live.scheduler.due_turns.start(live.scheduler.run_due, live.scheduler.due_in, live.scheduler._spawn)  # type: ignore[union-attr]
        assert await live.due.poll() == 0  # the lease still runs
        with psycopg.connect(pg_url, autocommit=True) as conn:  # ... until the database clock passes it
            conn.execute("UPDATE due_turns SET lease_until = extract(epoch from clock_timestamp()) - 1")
        await eventually(lambda: len(live.reasoner.calls) == 1, timeout=20, what="the other replica's turn")
        await eventually(lambda: _no_rows(live), timeout=20, what="the row deleted after the turn")
        assert (await live.store.get_state(scope)).last_turn_seq > 0 and not dead.reasoner.calls
    finally:
        await dead.close()
        await live.close()


async def test_debounce_and_max_wait_hold_on_the_database_clock(pg_url: str) -> None:
    r = await replica(pg_url, "solo", max_wait=100.0)
    due = r.due
    try:
        await due.want("incident/x", 30.0, "debounce")
        [row] = await due.rows()
        assert 29 < float(row["due_in"]) <= 30 and row["wants"] == 1 and row["holder"] is None  # type: ignore[arg-type]
        await due.want("incident/x", 60.0, "debounce")  # a later entry moves it (trailing debounce) ...
        [row] = await due.rows()
        assert 59 < float(row["due_in"]) <= 60 and row["wants"] == 2  # type: ignore[arg-type]
        await due.want("incident/x", 500.0, "debounce")  # ... never past the max wait after the first want
        [row] = await due.rows()
        assert row["after_first"] == pytest.approx(100) and float(row["due_in"]) < 100  # type: ignore[arg-type]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE due_turns SET due_at = extract(epoch from clock_timestamp()) - 1")
        [claim] = await r.store.run(due._claim)
        await due.want("incident/x", 0.0, "debounce")  # delivered while the turn runs: counted, due time kept
        [row] = await due.rows()
        assert row["holder"] == "solo" and row["wants"] == claim.wants + 1
        assert (
            await r.store.run(lambda c: due._finish(c, scope="incident/x", wants=claim.wants, delay=None, final=False))
            == claim.wants + 1
        )
        await r.store.run(lambda c: due._finish(c, scope="incident/x", wants=claim.wants + 1, delay=5.0, final=False))
        [row] = await due.rows()  # re-armed from the log, and free
        assert row["holder"] is None and 4 < float(row["due_in"]) <= 5  # type: ignore[arg-type]
    finally:
        await r.close()


async def test_entries_during_a_turn_re_arm_it_on_whichever_replica_they_reach(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    gate = asyncio.Event()
    a.reasoner.gate = gate
    b.reasoner.gate = gate
    scope = "incident/busy"
    await declare(a, scope)
    for r in (a, b):
        await r.scheduler.arm_pending()
    await eventually(
        lambda: len(a.reasoner.calls) + len(b.reasoner.calls) == 1, timeout=20, what="the first turn started"
    )
    result = await a.store.append(scope, [NewEntry.make("message", ALICE, {"text": "while it runs"})])
    await AgentsSender(b.scheduler).deliver(scope, result.entries)
    gate.set()
    await eventually(lambda: len(a.reasoner.calls) + len(b.reasoner.calls) == 2, timeout=20, what="the second turn")
    await eventually(lambda: _no_rows(a), timeout=20, what="no due row left")
    seqs = sorted(c.seq_to for c in a.reasoner.calls + b.reasoner.calls)
    assert seqs[-1] >= result.entries[0].seq


async def _due_now(r: Replica, scope: str) -> bool:
    return any(row["scope_id"] == scope and float(row["due_in"]) <= 0 for row in await r.due.rows())  # type: ignore[arg-type]


async def _no_rows(r: Replica) -> bool:
    return not await r.due.rows()


async def held_turn(r: Replica, scope: str) -> asyncio.Event:
    """Declare ``scope`` on ``r`` and start its turn, held in the reasoner until the returned gate is set."""
    gate = asyncio.Event()
    r.reasoner.gate = gate
    await declare(r, scope)
    await r.scheduler.arm_pending()
    await eventually(lambda: len(r.reasoner.calls) == 1, timeout=20, what=f"{scope}'s turn started")
    return gate


async def test_a_renewed_lease_keeps_a_long_turn_and_an_unrenewed_one_moves(pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    a.due.lease_s = b.due.lease_s = 3.0
    scope = "incident/long"
    gate = await held_turn(a, scope)
    b.scheduler.due_turns.start(b.scheduler.run_due, b.scheduler.due_in, b.scheduler._spawn)  # type: ignore[union-attr]
    [first] = await a.due.rows()
    await eventually(lambda: _lease_moved(a, float(first["lease_in"])), timeout=20, what="a renewal")  # type: ignore[arg-type]
    assert await b.due.poll() == 0  # renewed: still a's
    a.due.renewing = False  # a hangs: its lease runs out, and b runs the turn
    await eventually(lambda: len(b.reasoner.calls) == 1, timeout=20, what="b's turn after a's lease")
    gate.set()
    await eventually(lambda: _no_rows(a), timeout=20, what="no due row left")
    assert (await a.store.get_state(scope)).last_turn_seq > 0


async def _lease_moved(r: Replica, lease_in: float) -> bool:
    [row] = await r.due.rows()
    return float(row["lease_in"]) > lease_in  # type: ignore[arg-type]


class Recovered:
    """A ``TurnProgress`` that records which scopes a boot cleared."""

    def __init__(self) -> None:
        self.recovered: list[str] = []

    async def working(self, scope: str, *, question_seq: int = 0) -> str:
        return ""

    async def done(self, scope: str) -> None:
        return None

    async def recover(self, scope: str) -> None:
        self.recovered.append(scope)


async def test_a_booting_replica_leaves_the_progress_of_a_turn_another_replica_runs(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    progress = Recovered()
    b.scheduler.runtime.progress = progress
    scope = "incident/shown"
    gate = await held_turn(a, scope)
    await b.scheduler.arm_pending()  # b boots while a's turn runs: a's reaction is not stale
    assert scope not in progress.recovered
    gate.set()
    await eventually(lambda: _no_rows(a), timeout=20, what="a's turn ended")
    await b.scheduler.arm_pending()  # nobody holds it now: whatever is shown is stale
    assert scope in progress.recovered
