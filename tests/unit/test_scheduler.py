"""The APScheduler-backed alarm runs lambdas that return coroutines (a classic way to lose a job silently); turn
due times (a trailing debounce with a maximum wait) are a function of the log, so a restart arms the same ones."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.scheduler import SchedulerAlarm
from decklog.core.agents import RuleBasedReasoner, TurnRuntime, TurnScheduler
from decklog.core.agents.scheduler import Due
from decklog.core.clock import ManualClock, iso
from decklog.core.entries import Actor, NewEntry
from decklog.core.state import ScopeState
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually


async def test_alarm_awaits_a_lambda_job_and_replaces_by_key() -> None:
    alarm = SchedulerAlarm()
    alarm.start()
    ran: list[str] = []

    async def job(name: str) -> None:
        ran.append(name)

    try:
        alarm.set("k", 0.2, lambda: job("first"))
        alarm.set("k", 0.01, lambda: job("second"))  # replaces the first
        await eventually(lambda: ran == ["second"])
        assert not alarm.pending("k")
        alarm.set("boom", 0.0, lambda: asyncio.sleep(0, result=1 / 0))  # an error is logged, not raised
        alarm.every("tick", 0.01, lambda: job("tick"))
        await eventually(lambda: ran.count("tick") >= 2)
    finally:
        await alarm.shutdown()


# -- turn due times: a trailing debounce with a maximum wait, derived from the log ------------------------------


class RecordingAlarm:
    """An alarm that only records what was armed (the virtual clock decides what "now" is)."""

    def __init__(self) -> None:
        self.delays: dict[str, float] = {}

    def set(self, key: str, delay: float, job: Any) -> None:
        self.delays[key] = delay

    def cancel(self, key: str) -> None:
        self.delays.pop(key, None)

    def pending(self, key: str) -> bool:
        return key in self.delays


def _scheduler(store: SqliteLogStore, clock: ManualClock, alarm: RecordingAlarm) -> TurnScheduler:
    runtime = TurnRuntime(store, reasoner=RuleBasedReasoner(), clock=clock)
    return TurnScheduler(runtime, alarm, first_delay=60, debounce=1, max_wait=2, clock=clock)


async def test_due_times_cap_the_debounce_and_are_the_same_after_a_restart(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SqliteLogStore(tmp_path, topics=("agents",), clock=clock)
    alarm = RecordingAlarm()
    scope = "incident/chatty"
    key = f"agents:turn:{scope}"
    alice = Actor.human("U0ALICE", "alice")
    try:
        declared = await store.append(
            scope, [NewEntry.make("declared", alice, {"title": "Chatty"})], create=True, idempotency_key="d"
        )
        t0 = declared.entries[0].at
        scheduler = _scheduler(store, clock, alarm)
        # the first turn waits for the incident to settle (60 s), but never longer than the max wait (2 s)
        first = await scheduler.due(scope)
        assert first is not None and (first.at - t0).total_seconds() == pytest.approx(2) and first.trigger == "first"
        # pretend the first turn ran: an agent_turn covering #1
        turn = NewEntry.make("agent_turn", Actor.agent("rules"), {"reasoner": "rules", "seq_from": 1, "seq_to": 1})
        await store.append(scope, [turn])
        assert await scheduler.due(scope) is None  # an agent_turn (even "nothing") warrants nothing
        chatter = []
        for i in range(5):  # a message every 0.3 s: the trailing debounce alone would not fire while it lasts
            clock.advance(seconds=0.3)
            result = await store.append(scope, [NewEntry.make("message", alice, {"text": f"update {i}"})])
            chatter.extend(result.entries)
            await scheduler.on_entries(scope, result.entries)
        due = await scheduler.due(scope)
        assert due is not None and due.trigger == "max_wait"
        assert due.at == chatter[0].at + timedelta(seconds=2) and due.last_at == chatter[-1].at
        assert alarm.delays[key] == pytest.approx((due.at - clock.now()).total_seconds())
        assert alarm.delays[key] == pytest.approx(0.8)  # 2 s after the first (at 0.3 s), not 1 s after the last
        # a quiet spell after one entry: the trailing debounce governs
        quiet = await scheduler.due(scope, batch=chatter[:1])
        assert quiet is not None and quiet.at == due.at  # the batch only adds the newest, never hides the first
        # restart: a new scheduler over a new store on the same files arms the same due time
        await store.close()
        store = SqliteLogStore(tmp_path, topics=("agents",), clock=clock)
        again = _scheduler(store, clock, RecordingAlarm())
        assert await again.due(scope) == due
        assert await again.arm_pending() == 1
        assert again.alarm.delays[key] == pytest.approx(alarm.delays[key])  # type: ignore[attr-defined]
        clock.advance(seconds=3)  # the process was down past the due time: the turn runs at once after boot
        assert await again.arm_pending() == 1 and again.alarm.delays[key] == 0  # type: ignore[attr-defined]
    finally:
        await store.close()


def test_the_debounce_trails_the_last_entry_until_the_max_wait_caps_it() -> None:
    clock = ManualClock()
    scheduler = TurnScheduler.__new__(TurnScheduler)
    scheduler.first_delay, scheduler.debounce, scheduler.max_wait = 60.0, 13.0, 60.0
    state = ScopeState(scope="incident/x", kind="incident", created_at=iso(clock.now()), last_turn_seq=5, version=9)
    t = clock.now()
    s = timedelta(seconds=1)
    assert scheduler.due_at(state, t, t) == Due(t + 13 * s, "debounce", t, t)
    assert scheduler.due_at(state, t, t + 40 * s).at == t + 53 * s
    assert scheduler.due_at(state, t, t + 50 * s) == Due(t + 60 * s, "max_wait", t, t + 50 * s)
    first = state.model_copy(update={"last_turn_seq": 0})
    assert scheduler.due_at(first, t, t + 5 * s) == Due(t + 60 * s, "first", t, t + 5 * s)  # settles 60 s
    assert scheduler.due_at(first, t + 30 * s, t + 59 * s).at == t + 60 * s  # entries inside the settle time
    assert scheduler.due_at(first, t + 30 * s, t + 61 * s).at == t + 74 * s  # still busy: debounce after it
    assert scheduler.due_at(first, t + 10 * s, t + 65 * s).at == t + 70 * s  # ... capped 60 s after the first


async def test_a_busy_thread_gets_the_due_time_a_fresh_scheduler_reads_from_the_log(tmp_path: Path) -> None:
    """The scheduler keeps the head of the pending range between deliveries (a cache of the log); after every
    entry, over more entries than it keeps and across a turn, its due time is the one a new scheduler reads."""
    clock = ManualClock()
    store = SqliteLogStore(tmp_path, topics=("agents",), clock=clock)
    scope = "incident/busy"
    alice = Actor.human("U0ALICE", "alice")
    try:
        await store.append(scope, [NewEntry.make("declared", alice, {"title": "Busy"})], create=True)
        kept = _scheduler(store, clock, RecordingAlarm())
        for i in range(130):
            clock.advance(seconds=0.3)
            if i == 70:  # a turn covering everything so far: the pending range starts again after it
                version = (await store.get_state(scope)).version
                turn = {"reasoner": "rules", "seq_from": 1, "seq_to": version}
                await store.append(scope, [NewEntry.make("agent_turn", Actor.agent("rules"), turn)])
            kind, payload = ("message", {"text": f"m{i}"}) if i % 7 else ("goal", {"text": f"g{i}"})
            result = await store.append(scope, [NewEntry.make(kind, alice, payload)])
            mine = await kept.due(scope, batch=result.entries)
            fresh = await _scheduler(store, clock, RecordingAlarm()).due(scope, batch=result.entries)
            assert mine == fresh, i
        assert mine is not None and mine.first_at > (await store.read(scope, limit=2))[1].at  # after the turn
    finally:
        await store.close()


async def test_the_agents_sender_coalesces_a_storm_into_one_look_per_window(tmp_path: Path) -> None:
    """A storm's batches are looked at once per window, and the turn ends up armed where the log says (the last
    entry's debounce, capped by the max wait); a question is never held back."""
    from decklog.core.agents.agents_sender import AgentsSender

    clock = ManualClock()
    store = SqliteLogStore(tmp_path, topics=("agents",), clock=clock)
    alarm = RecordingAlarm()
    scope = "incident/storm"
    alice = Actor.human("U0ALICE", "alice")
    try:
        await store.append(scope, [NewEntry.make("declared", alice, {"title": "Storm"})], create=True)
        runtime = TurnRuntime(store, reasoner=RuleBasedReasoner(), clock=clock)
        scheduler = TurnScheduler(runtime, alarm, first_delay=0, debounce=40_000, max_wait=80_000, clock=clock)
        looks: list[list[int]] = []
        real_due = scheduler.due

        async def counted(s: str, *, batch: Any = ()) -> Due | None:
            looks.append([e.seq for e in batch])
            return await real_due(s, batch=batch)

        scheduler.due = counted  # type: ignore[method-assign]
        sender = AgentsSender(scheduler, interval=3600)  # a window longer than the test: it ends when told to
        seqs = []
        for i in range(30):
            clock.advance(seconds=1)
            result = await store.append(scope, [NewEntry.make("observation", alice, {"text": f"alert {i}"})])
            await sender.deliver(scope, result.entries)
            seqs.append(result.entries[0].seq)
        assert looks == [seqs[:1]]  # the first batch at once, the other 29 held for the window
        await sender._look(scope)  # the window ends
        assert looks == [seqs[:1], seqs[-1:]] and not sender._held
        expected = await real_due(scope)
        assert expected is not None and expected.last_at == clock.now()
        key = f"agents:turn:{scope}"
        assert alarm.delays[key] == pytest.approx((expected.at - clock.now()).total_seconds())
        answered: list[int] = []
        scheduler.answer_later = lambda s, q: answered.append(q.seq)  # type: ignore[method-assign]
        ask = NewEntry.make("question", alice, {"text": "status?", "key": "q1"})
        result = await store.append(scope, [ask])
        await sender.deliver(scope, result.entries)  # within the window: answered at once all the same
        assert answered == [result.entries[0].seq]
    finally:
        await store.close()
