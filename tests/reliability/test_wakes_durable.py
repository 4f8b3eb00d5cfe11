"""A reasoner's wake-up and a question's answer are durable and run once, on one replica, one turn at a time per
scope: on PostgreSQL they live in the scope's ``due_turns`` row (``wake_at`` / ``ask_at``), on SQLite the wake-up
is the scope's ``agents``/``wake`` memo and an unanswered question is its own record in the log.

"Dying" here is dropping a scheduler and its alarm without stopping anything (nothing it armed in memory
survives); tests/reliability/test_wakes_serve.py does the same with SIGKILL of real servers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg

from decklog.core.agents import TurnRuntime, TurnScheduler
from decklog.core.agents.agents_sender import AgentsSender
from decklog.core.agents.reasoner import TurnInput, TurnOutput
from decklog.core.agents.scheduler import TOPIC, WAKE_MEMO
from decklog.core.alarm import AsyncioAlarm
from decklog.core.entries import NewEntry, Question
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually
from tests.reliability.test_replicas_turns import ALICE, Replica, _no_rows, declare, replica
from tests.unit.test_agents import Scripted


def wakes_once(turn: TurnInput) -> TurnOutput:
    """Ask for a look in 300 s after a scheduled turn; a wake-up's own turn asks for nothing more."""
    out = TurnOutput()
    if turn.trigger not in ("wake", "ask"):
        out.wake(300)
    if turn.question:
        out.answer = "the pool size"
    return out


async def covered(r: Replica, scope: str) -> None:
    """An incident whose every entry a turn covered already (nothing pending: only a wake-up can turn it; the
    default script asks for no wake-up)."""
    await declare(r, scope, messages=0)
    assert (await r.scheduler.runtime.run_turn(scope)).status == "recorded"
    r.reasoner.calls.clear()


def _sql(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def _triggers(*replicas: Replica) -> list[str]:
    return [c.trigger for r in replicas for c in r.reasoner.calls]


# -- PostgreSQL: the due_turns row ------------------------------------------------------------------------------


async def test_a_wake_up_is_one_forced_turn_on_one_of_two_replicas(pg_url: str) -> None:
    a, b = await replica(pg_url, "a"), await replica(pg_url, "b")
    scope = "incident/wake-once"
    try:
        a.reasoner.make = b.reasoner.make = wakes_once
        await covered(a, scope)
        await a.scheduler.wake(scope, 0.0)  # what a turn's ``wake_after`` does
        [row] = await a.due.rows()
        assert row["wake_in"] is not None and float(row["due_in"]) == float("inf")  # type: ignore[arg-type]
        for r in (a, b):
            await r.scheduler.arm_pending()
        await eventually(lambda: _triggers(a, b) == ["wake"], timeout=20, what="one forced turn")
        await eventually(lambda: _no_rows(a), timeout=20, what="the row gone after the wake-up")
        await a.scheduler.idle()
        await b.scheduler.idle()
        assert _triggers(a, b) == ["wake"] and a.due.claimed + b.due.claimed == 1
        assert (await a.store.read_last(scope, limit=1))[0].payload.trigger == "wake"  # type: ignore[attr-defined]
    finally:
        await a.close()
        await b.close()


async def test_a_wake_up_armed_before_every_replica_died_runs_once_after_the_restart(pg_url: str) -> None:
    scope = "incident/wake-restart"
    dead = await replica(pg_url, "dead")
    dead.reasoner.make = wakes_once
    await declare(dead, scope, messages=0)
    await dead.scheduler.arm_pending()
    await eventually(lambda: _triggers(dead) == ["boot"], timeout=20, what="the first turn")
    await eventually(lambda: _freed(dead), timeout=20, what="its wake-up stored, the row free")
    [row] = await dead.due.rows()
    assert 290 < float(row["wake_in"]) <= 300 and float(row["due_in"]) == float("inf")  # type: ignore[arg-type]
    await dead.alarm.shutdown()  # the process dies: its timers and tasks are gone, the row stays
    await dead.store.close()
    _sql(pg_url, "UPDATE due_turns SET wake_at = extract(epoch from clock_timestamp()) - 1")  # 300 s later
    a, b = await replica(pg_url, "a"), await replica(pg_url, "b")
    try:
        for r in (a, b):
            r.reasoner.make = wakes_once
            await r.scheduler.arm_pending()
        await eventually(lambda: _triggers(a, b) == ["wake"], timeout=20, what="the wake-up after the restart")
        await eventually(lambda: _no_rows(a), timeout=20, what="the row gone")
        for r in (a, b):  # a second restart finds nothing to run
            await r.scheduler.arm_pending()
            await r.due.poll()
            await r.scheduler.idle()
        assert _triggers(a, b) == ["wake"] and not await a.due.rows()
    finally:
        await a.close()
        await b.close()


def wakes_after_a_wake(turn: TurnInput) -> TurnOutput:
    out = TurnOutput()
    if turn.trigger == "wake":
        out.wake(300)  # asked while its turn holds the row: kept for later
    return out


async def test_a_wake_up_waits_for_the_scopes_running_turn_and_a_wake_up_can_ask_for_the_next(pg_url: str) -> None:
    a, b = await replica(pg_url, "a"), await replica(pg_url, "b")
    scope = "incident/wake-busy"
    gate = asyncio.Event()
    try:
        for r in (a, b):
            r.reasoner.make, r.reasoner.gate = wakes_after_a_wake, gate
        await declare(a, scope, messages=0)
        await a.scheduler.arm_pending()
        await eventually(lambda: len(a.reasoner.calls) == 1, timeout=20, what="a's scheduled turn started")
        await b.scheduler.wake(scope, 0.0)  # due now, while a's turn of the scope runs
        await b.scheduler.arm_pending()
        assert await b.due.poll() == 0 and not b.reasoner.calls  # held by a: nothing runs beside it
        gate.set()
        await eventually(lambda: len(_triggers(a, b)) == 2, timeout=20, what="the wake-up after the turn")
        assert _triggers(a, b) == ["boot", "wake"]
        await eventually(lambda: _freed(a), timeout=20, what="the row freed, with the next wake-up")
        [row] = await a.due.rows()
        assert 0 < float(row["wake_in"]) <= 300 and float(row["due_in"]) == float("inf")  # type: ignore[arg-type]
        assert row["ask_in"] is None and (await a.store.get_state(scope)).last_turn_seq > 0
    finally:
        await a.close()
        await b.close()


async def _freed(r: Replica) -> bool:
    rows = await r.due.rows()
    return bool(rows) and rows[0]["holder"] is None and (rows[0]["wake_in"] or 0) > 0  # type: ignore[operator]


async def test_a_question_delivered_to_two_replicas_is_answered_once(pg_url: str) -> None:
    a, b = await replica(pg_url, "a"), await replica(pg_url, "b")
    scope = "incident/asked"
    try:
        await covered(a, scope)
        for r in (a, b):
            r.reasoner.make = wakes_once
        question = NewEntry.make("question", ALICE, Question(text="what changed?", key="k-1"))
        asked = await a.store.append(scope, [question])
        for r in (a, b):  # delivered to both (a cursor handover redelivers)
            await AgentsSender(r.scheduler).deliver(scope, asked.entries)
            await r.scheduler.arm_pending()
        await eventually(lambda: _answers(a, scope), timeout=20, what="the answer")
        await eventually(lambda: _no_rows(a), timeout=20, what="the row gone")
        await a.scheduler.idle()
        await b.scheduler.idle()
        assert _triggers(a, b) == ["ask"] and len(await _answers(a, scope)) == 1
    finally:
        await a.close()
        await b.close()


async def _answers(r: Replica, scope: str) -> list[object]:
    return list(await r.store.read_last(scope, limit=10, kinds=("answer",)))


# -- SQLite (one process): the wake memo ------------------------------------------------------------------------


def _sqlite(store: SqliteLogStore, alarm: AsyncioAlarm) -> tuple[Scripted, TurnScheduler]:
    reasoner = Scripted(wakes_once)
    runtime = TurnRuntime(store, reasoner=reasoner)
    return reasoner, TurnScheduler(runtime, alarm, first_delay=0.0, debounce=0.05, max_wait=60.0)


async def test_sqlite_a_stored_wake_up_survives_the_process_and_runs_once(tmp_path: Path) -> None:
    scope = "incident/wake-file"
    store = SqliteLogStore(tmp_path, topics=("agents",))
    alarm = AsyncioAlarm()
    reasoner, scheduler = _sqlite(store, alarm)
    await store.append(scope, [NewEntry.make("declared", ALICE, {"title": "w"})], create=True, idempotency_key="d")
    assert (await scheduler.runtime.run_turn(scope)).status == "recorded"
    memo = await store.memo_get(scope, TOPIC, WAKE_MEMO)
    assert memo is not None and memo["at"] is not None  # stored before the turn returned
    assert alarm.pending(f"agents:wake:{scope}")
    await alarm.shutdown()  # the process dies: the timer is gone, the memo stays
    await store.close()
    await SqliteLogStore(tmp_path, topics=("agents",)).memo_put(scope, TOPIC, WAKE_MEMO, {"at": memo["at"] - 300})

    for attempt in range(2):  # two restarts: the wake-up runs after the first, nothing after the second
        store = SqliteLogStore(tmp_path, topics=("agents",))
        alarm = AsyncioAlarm()
        reasoner, scheduler = _sqlite(store, alarm)
        try:
            await scheduler.arm_pending()
            if attempt == 0:
                await eventually(lambda r=reasoner: [c.trigger for c in r.calls] == ["wake"], what="the wake-up")  # type: ignore[misc]
                await eventually(lambda s=store: _memo_at(s, scope), timeout=10, what="the wake-up marked run")  # type: ignore[misc]
            await scheduler.idle()
            assert [c.trigger for c in reasoner.calls] == (["wake"] if attempt == 0 else [])
            assert not alarm.pending(f"agents:wake:{scope}")
        finally:
            await scheduler.stop()
            await alarm.shutdown()
            await store.close()


async def _memo_at(store: SqliteLogStore, scope: str) -> bool:
    return await store.memo_get(scope, TOPIC, WAKE_MEMO) == {"at": None}


async def test_sqlite_a_wake_up_not_due_yet_is_re_armed_at_its_time_not_run_at_boot(tmp_path: Path) -> None:
    scope = "incident/wake-later"
    store = SqliteLogStore(tmp_path, topics=("agents",))
    alarm = AsyncioAlarm()
    _reasoner, scheduler = _sqlite(store, alarm)
    try:
        await store.append(scope, [NewEntry.make("declared", ALICE, {"title": "w"})], create=True, idempotency_key="d")
        await scheduler.runtime.run_turn(scope)
        at = (await store.memo_get(scope, TOPIC, WAKE_MEMO) or {})["at"]
        alarm2 = AsyncioAlarm()
        reasoner2, restarted = _sqlite(store, alarm2)
        await restarted.arm_pending()
        assert restarted._wakes == {scope: at} and alarm2.pending(f"agents:wake:{scope}")
        assert not reasoner2.calls
        await restarted.stop()
        await alarm2.shutdown()
    finally:
        await scheduler.stop()
        await alarm.shutdown()
        await store.close()


async def test_sqlite_an_incident_with_no_wake_memo_gets_the_old_boot_wake_once(tmp_path: Path) -> None:
    """An incident from before wake-ups were kept (no memo at all): a reasoner that uses wake-ups gets one boot
    wake after the debounce, which stores its memo; the next boot re-arms that memo instead."""
    scope = "incident/wake-legacy"
    store = SqliteLogStore(tmp_path, topics=("agents",))
    alarm = AsyncioAlarm()
    reasoner = Scripted(wakes_once)
    reasoner.wants_wakes = True  # type: ignore[misc]
    runtime = TurnRuntime(store, reasoner=reasoner)
    try:
        await store.append(scope, [NewEntry.make("declared", ALICE, {"title": "w"})], create=True, idempotency_key="d")
        runtime.on_wake = None  # a turn from an older decklog: its wake-up was a timer only
        assert (await runtime.run_turn(scope)).status == "recorded"
        assert await store.memo_get(scope, TOPIC, WAKE_MEMO) is None
        scheduler = TurnScheduler(runtime, alarm, first_delay=0.0, debounce=0.05, max_wait=60.0)
        await scheduler.arm_pending()
        memo = await store.memo_get(scope, TOPIC, WAKE_MEMO)
        assert memo is not None and scheduler._wakes == {scope: memo["at"]}
        await eventually(lambda: [c.trigger for c in reasoner.calls] == ["debounce", "wake"], what="the boot wake")
        await eventually(lambda: _memo_at(store, scope), timeout=10, what="the boot wake marked run")
        await scheduler.stop()
    finally:
        await alarm.shutdown()
        await store.close()
