"""An acknowledgement racing the next level's page: the acknowledgement is always recorded, and at most that one
page goes out — the job's append and the person's acknowledgement run concurrently, in both orders, many times,
against a dispatcher delivering the ``oncall`` topic."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from decklog.core.alarm import AsyncioAlarm
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor
from decklog.core.index.sender import IndexSender
from decklog.core.oncall import desk
from decklog.core.oncall.escalation import OncallJob
from decklog.core.oncall.sender import Notice, OncallSender
from decklog.core.oncall.setup import OncallConfig
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.service import ScopeService
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually
from tests.unit.test_oncall import SETUP

ROUNDS = 24


class Recorder:
    def __init__(self) -> None:
        self.notices: list[Notice] = []

    async def notify(self, notice: Notice) -> None:
        await asyncio.sleep(0)  # let a racing append in between
        self.notices.append(notice)


async def test_an_ack_racing_the_next_levels_page_is_recorded_and_at_most_that_page_goes_out(tmp_path: Path) -> None:
    clock = ManualClock(datetime(2026, 12, 7, 9, 0, tzinfo=UTC))
    store = SqliteLogStore(tmp_path, topics=("index", "oncall"), topic_kinds={"oncall": ("page",)}, clock=clock)
    index = SqliteIndex(tmp_path / "index.db", store.executor)
    await index.open()
    setup = OncallConfig.model_validate({**SETUP, "people": {}})
    sent = Recorder()
    dispatcher = Dispatcher(
        store, [IndexSender(index, store), OncallSender(store, setup, {"slack": sent})], alarm=AsyncioAlarm()
    )
    dispatcher.start()
    service = ScopeService(store, index)
    job = OncallJob(store, index, clock, setup)
    outcomes: dict[str, int] = {"page first, sent": 0, "page first, dropped at delivery": 0, "ack first": 0}
    try:
        for i in range(ROUNDS):
            result = await service.declare(
                title=f"race {i}", severity=1, actor=Actor.system("alerts"), scope=f"incident/race-{i}"
            )
            scope = str(result.state.scope)
            await job.scope(scope, clock.now(), {})  # level 1 pages at once
            await eventually(lambda s=scope: [n for n in sent.notices if n.scope == s], what="level 1 sent")
            clock.advance(minutes=5)  # level 2 is due now
            racers = [job.scope(scope, clock.now(), {}), desk.acknowledge(store, scope, "UB", via="button")]
            if i % 2:
                racers.reverse()
            await asyncio.gather(*racers)
            entries = await store.read(scope, kinds=("page", "acknowledged"))
            [ack] = [e for e in entries if e.kind == "acknowledged"]
            level2 = [e for e in entries if e.kind == "page" and e.payload.level == 1]  # type: ignore[union-attr]
            assert len(level2) <= 1
            await eventually(lambda s=scope: _settled(store, s), what="the oncall topic drained")
            delivered = [n for n in sent.notices if n.scope == scope and n.level == 1]
            if level2 and level2[0].seq < ack.seq:
                assert len(delivered) <= 1  # appended before the ack: it may have gone out, once
                outcomes["page first, sent" if delivered else "page first, dropped at delivery"] += 1
            else:
                outcomes["ack first"] += 1
                assert delivered == []  # the ack came first: no level 2 page goes out
            clock.advance(minutes=30)
            await job.scope(scope, clock.now(), {})
            assert len(await store.read(scope, kinds=("page",))) == 1 + len(level2)  # nothing after the ack
    finally:
        await dispatcher.stop()
        await index.close()
        await store.close()
    print(f"\nack race, {ROUNDS} rounds: {outcomes}")
    assert sum(outcomes.values()) == ROUNDS


async def _settled(store: SqliteLogStore, scope: str) -> bool:
    return not await store.outbox_pending(scope, "oncall")
