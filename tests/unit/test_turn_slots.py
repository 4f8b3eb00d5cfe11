"""At most ``max_concurrent`` turns and asks at a time (core/agents/turn_parts.py ``TurnSlots``): an alert storm that
opens many incidents makes their first turns due together, and the model API should not get them all at once. A
waiting turn reads the log only once it has a slot, so it reasons over what was recorded while it waited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from decklog.adapters.http.metrics import Live, ServerMetrics
from decklog.bot.config import load_config
from decklog.bot.settings import SettingsError
from decklog.core.agents import SuggestionIntent, TurnInput, TurnOutput, TurnRuntime
from decklog.core.agents.catchup import ModelCatchUp, Summary
from decklog.core.agents.turn_parts import TurnResult, TurnSlots, TurnStats
from decklog.core.entries import AgentTurn
from tests.conftest import eventually
from tests.unit.test_agents import ALERTS, ALICE, World, opened_world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with opened_world(tmp_path) as w:
        yield w


class Held:
    """A reasoner that counts the turns inside it and holds them until ``gate`` opens."""

    name = "held"
    model = "held-1"
    wants_wakes = False

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.running = 0
        self.most = 0
        self.calls: list[TurnInput] = []

    async def run(self, turn: TurnInput) -> TurnOutput:
        self.calls.append(turn)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
            return TurnOutput(answer="ok", suggestions=[SuggestionIntent(f"look at {turn.scope}")])
        finally:
            self.running -= 1


async def incidents(w: World, n: int) -> list[str]:
    scopes = [f"incident/svc-{i}-errors" for i in range(n)]
    for i, scope in enumerate(scopes):
        await w.service.declare(
            title=f"svc-{i} errors", scope=scope, severity=2, services=[f"svc-{i}"], actor=ALERTS, via="alert"
        )
    return scopes


async def test_a_burst_of_due_turns_runs_at_most_the_limit_at_once_and_every_one_runs(world: World) -> None:
    held = Held()
    runtime = world.runtime(held, max_concurrent=2)
    scopes = await incidents(world, 5)
    turns = [asyncio.ensure_future(runtime.run_turn(scope)) for scope in scopes]
    await eventually(lambda: held.running == 2 and runtime.stats.slot_waits == 3, timeout=10, what="2 in, 3 waiting")
    assert len(held.calls) == 2 and runtime.slots.waiting == 3  # the waiting three have not reached the model
    held.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*turns), timeout=30)
    assert runtime.slots.waiting == 0
    assert [r.status for r in results] == ["recorded"] * 5
    assert held.most == 2 and sorted(t.scope for t in held.calls) == sorted(scopes)


async def one_slot_taken(w: World) -> tuple[Held, TurnRuntime, asyncio.Future[TurnResult], str, str]:
    """One slot, and a turn on the first of two incidents holding it inside the model."""
    held = Held()
    runtime = w.runtime(held, max_concurrent=1)
    first, second = await incidents(w, 2)
    running = asyncio.ensure_future(runtime.run_turn(first))
    await eventually(lambda: held.running == 1, timeout=10, what="the first turn in the model")
    return held, runtime, running, first, second


async def test_a_waiting_turn_reads_what_was_recorded_while_it_waited(world: World) -> None:
    held, runtime, running, _, second = await one_slot_taken(world)
    waiting = asyncio.ensure_future(runtime.run_turn(second))
    await eventually(lambda: runtime.stats.slot_waits == 1, timeout=10, what="the second turn waiting")
    said = await world.add("message", ALICE, {"text": "db pool exhausted on svc-1"}, scope=second)
    held.gate.set()
    assert (await running).status == "recorded" and (await waiting).status == "recorded"
    [view] = [t for t in held.calls if t.scope == second]
    assert view.seq_to == said.seq  # its view covers the message recorded while it waited
    [turn] = await world.store.read(second, kinds=("agent_turn",))
    assert isinstance(turn.payload, AgentTurn) and turn.payload.seq_to == said.seq


async def test_an_ask_waits_for_a_slot_too(world: World) -> None:
    held, runtime, running, first, second = await one_slot_taken(world)
    asking = asyncio.ensure_future(runtime.ask(second, "what changed?", ALICE, key="q-1"))
    await eventually(lambda: runtime.stats.slot_waits == 1, timeout=10, what="the ask waiting")
    assert [t.scope for t in held.calls] == [first]
    held.gate.set()
    assert (await running).status == "recorded"
    assert (await asking).status == "recorded" and [t.scope for t in held.calls] == [first, second]


class Summaries:
    """A summariser that records the scopes it was asked about."""

    name = "summaries"
    model = "summaries-1"

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def summarise(self, *, scope: str, view_name: str, view_text: str, view_bytes: int) -> Summary:
        self.asked.append(scope)
        return Summary(text=f"{scope}: {view_bytes} bytes read", model=self.model)


async def test_a_model_catch_up_waits_for_a_slot_like_a_turn(world: World) -> None:
    held, runtime, running, _, second = await one_slot_taken(world)
    summaries = Summaries()
    catchup = ModelCatchUp(world.store, summaries, world.clock, slots=runtime.slots)
    asking = asyncio.ensure_future(catchup(scope=second, actor=ALICE, key="c-1"))
    await eventually(lambda: runtime.slots.waiting == 1, timeout=10, what="the catch-up waiting")
    assert summaries.asked == []  # not sent to the model while the turn holds the only slot
    held.gate.set()
    assert (await running).status == "recorded"
    answer = await asyncio.wait_for(asking, timeout=30)
    assert summaries.asked == [second] and "Catch-up on" in answer and runtime.slots.waiting == 0


async def test_without_a_limit_nothing_waits(world: World) -> None:
    held = Held()
    runtime = world.runtime(held)
    scopes = await incidents(world, 4)
    turns = [asyncio.ensure_future(runtime.run_turn(scope)) for scope in scopes]
    await eventually(lambda: held.running == 4, timeout=10, what="all four in the model")
    held.gate.set()
    await asyncio.wait_for(asyncio.gather(*turns), timeout=30)
    assert runtime.stats.slot_waits == 0


def test_a_limit_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        TurnSlots(0, TurnStats())
    path = tmp_path / "decklog.toml"
    path.write_text("[agents]\nmax_concurrent_turns = 0\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"agents.max_concurrent_turns: .*greater than or equal to 1"):
        load_config(path)
    empty = tmp_path / "empty.toml"
    empty.write_text("", encoding="utf-8")
    assert load_config(empty).agents.max_concurrent_turns == 4


async def test_the_waiting_gauge_reads_the_slots_at_scrape_time() -> None:
    metrics = ServerMetrics()
    slots = TurnSlots(1, TurnStats())
    metrics.turns_waiting.set_function(lambda: slots.waiting)
    gate = asyncio.Event()

    async def turn(scope: str) -> None:
        async with slots.hold(scope):
            await gate.wait()

    tasks = [asyncio.ensure_future(turn(f"incident/{i}")) for i in range(3)]
    await eventually(lambda: slots.waiting == 2, timeout=10, what="two waiting")
    assert "decklog_turns_waiting 2.0" in metrics.render(Live()).decode()
    tasks[2].cancel()  # a waiter cancelled while it waits leaves the count
    await eventually(lambda: slots.waiting == 1, timeout=10, what="one waiting")
    gate.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert "decklog_turns_waiting 0.0" in metrics.render(Live()).decode()
