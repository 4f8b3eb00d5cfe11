"""Two replicas on one PostgreSQL database tick the lifecycle job at the same moment: a due reminder is appended
once (its idempotency key is its due time), and a replica started later appends nothing again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from decklog.bot.ops import lifecycle_policy
from decklog.bot.runtime import Runtime
from decklog.bot.settings import Settings
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor
from decklog.core.lifecycle import LifecycleJob
from tests.conftest import eventually


async def _replica(pg_url: str, tmp_path: Path, name: str, clock: ManualClock) -> Runtime:
    settings = Settings(data_dir=tmp_path / name, database_url=pg_url, host="127.0.0.1", port=0)
    rt = await Runtime.open(settings, clock=clock)
    rt.dispatcher.start()
    return rt


async def test_a_due_reminder_is_appended_once_across_replicas(pg_url: str, tmp_path: Path) -> None:
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    a = await _replica(pg_url, tmp_path, "a", clock)
    b = await _replica(pg_url, tmp_path, "b", clock)
    try:
        declared = await a.service.declare(title="Checkout down", severity=1, actor=Actor.human("U0ALICE", "alice"))
        scope = declared.state.scope

        async def indexed() -> bool:
            row = await b.index.get(scope)
            return row is not None and row.status == "investigating" and row.severity == 1

        await eventually(indexed, what="the index row")
        jobs = [
            LifecycleJob(
                rt.store, rt.index, rt.clock, lifecycle_policy(rt.settings, rt.config.slack, rt.config.reminders)
            )
            for rt in (a, b)
        ]
        clock.advance(seconds=31 * 60)
        fired = await asyncio.gather(*(job.tick() for job in jobs))
        assert sorted(len(f) for f in fired) == [0, 1]
        reminders = await a.store.read(scope, kinds=("reminder",))
        assert len(reminders) == 1 and reminders[0].payload.purpose == "status_update"
    finally:
        await a.close()
        await b.close()
    c = await _replica(pg_url, tmp_path, "c", clock)
    try:
        assert (
            await LifecycleJob(
                c.store, c.index, c.clock, lifecycle_policy(c.settings, c.config.slack, c.config.reminders)
            ).tick()
            == []
        )
        assert len(await c.store.read(scope, kinds=("reminder",))) == 1
    finally:
        await c.close()
