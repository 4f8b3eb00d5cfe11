"""Many replicas, one database: a (scope, topic) cursor says which replica drained it last, so the sender's
reconcile-before-repost rule knows when another replica may have posted (it died holding the cursor) — not only
after this process's own restart."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import sqlalchemy as sa

from decklog.core.entries import Entry
from decklog.core.outbox import dispatcher as dispatching
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.store.ports import CursorClaim
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.log_store import PostgresLogStore
from tests.store_contract import SCOPE, declare, message

TOPICS = ("index", "slack")


async def test_a_claim_tells_a_clean_handover_from_a_dead_holder(pg_url: str) -> None:
    one, two = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(one)
        assert await one.take_cursor(SCOPE, "slack", "r1", lease_s=60) == CursorClaim()
        assert await one.take_cursor(SCOPE, "slack", "r1", lease_s=60) == CursorClaim()  # renewing
        assert await two.take_cursor(SCOPE, "slack", "r2", lease_s=60) is None  # held
        await one.release_cursor(SCOPE, "slack", "r1")
        assert await two.take_cursor(SCOPE, "slack", "r2", lease_s=0) == CursorClaim(previous="r1", died=False)
        # r2's lease of 0 s ran out while it held the cursor (as if it died): r1 takes it over from a dead holder
        assert await one.take_cursor(SCOPE, "slack", "r1", lease_s=60) == CursorClaim(previous="r2", died=True)
        assert await one.claim_cursor(SCOPE, "slack", "r1", lease_s=60)  # the boolean port says the same
    finally:
        await one.close()
        await two.close()


class Recording:
    name = "slack"
    batch_size = 8

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.handovers: list[tuple[str, bool]] = []

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        self.seqs.extend(e.seq for e in entries)

    def handed_over(self, scope: str, *, died: bool) -> None:
        self.handovers.append((scope, died))


async def test_the_dispatcher_tells_the_sender_it_took_over_from_a_dead_replica(pg_url: str) -> None:
    dead, live = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(dead)
        assert await dead.claim_cursor(SCOPE, "slack", "dead", lease_s=0.3)  # and then it died
        sender = Recording()
        dispatcher = Dispatcher(live, [sender], cursors=live)
        dispatcher.start()
        await live.append(SCOPE, [message("after the crash")])
        deadline = asyncio.get_running_loop().time() + 30
        while sender.seqs != [1, 2]:
            assert asyncio.get_running_loop().time() < deadline, sender.seqs
            await asyncio.sleep(0.02)
        assert sender.handovers == [(SCOPE, True)]
        assert dispatcher.takeovers == 1
        await dispatcher.stop()
    finally:
        await dead.close()
        await live.close()


class Stalled(Recording):
    """A delivery that takes as long as the test wants (a Slack call stuck for seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        self.entered.set()
        await self.release.wait()
        await super().deliver(scope, entries)


async def test_a_live_holder_stuck_in_a_slow_delivery_keeps_its_cursor(pg_url: str) -> None:
    holder, other = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        sender = Stalled()
        dispatcher = Dispatcher(holder, [sender], cursors=holder)
        dispatcher.start()
        await declare(holder)
        await asyncio.wait_for(sender.entered.wait(), 30)
        first = await _lease_until(holder)
        deadline = asyncio.get_running_loop().time() + 30
        while await _lease_until(holder) == first:  # renewed while the delivery is still stuck
            assert asyncio.get_running_loop().time() < deadline, "the lease was never renewed"
            await asyncio.sleep(0.1)
        assert not await other.claim_cursor(SCOPE, "slack", "other", lease_s=60)
        sender.release.set()
        while sender.seqs != [1]:
            assert asyncio.get_running_loop().time() < deadline, sender.seqs
            await asyncio.sleep(0.02)
        await dispatcher.stop()
    finally:
        await holder.close()
        await other.close()


async def test_a_holder_stalled_past_its_lease_delivers_nothing_more_of_its_batch(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frozen replica (its lease beat never ran) wakes up after another took the cursor over: the item it was
    delivering finishes, and it starts none of the rest of the batch it had read."""
    monkeypatch.setattr(dispatching, "CURSOR_LEASE_S", 1.0)
    monkeypatch.setattr(dispatching, "LEASE_MARGIN_S", 0.2)

    async def frozen(_self: Dispatcher, _scope: str, _topic: str) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(Dispatcher, "_keep_lease", frozen)
    holder, other = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(holder)
        await holder.append(SCOPE, [message("one batch with the declaration")])
        sender = Stalled()
        sender.batch_size = 1
        dispatcher = Dispatcher(holder, [sender], cursors=holder)
        dispatcher.start()
        dispatcher.wake(SCOPE)  # as the boot sweep does: both rows are read in one batch
        await asyncio.wait_for(sender.entered.wait(), 30)
        deadline = asyncio.get_running_loop().time() + 30
        while await other.take_cursor(SCOPE, "slack", "other", lease_s=60) is None:  # once the lease ran out
            assert asyncio.get_running_loop().time() < deadline, "the stalled holder's lease never ran out"
            await asyncio.sleep(0.05)
        sender.release.set()
        # the delivery under way finishes (its item recorded), and the lapse is counted, in either order: the
        # liveness deadline may count it while the delivery is still stalled
        while (dispatcher.leases_lapsed == 0 or not sender.seqs) and len(sender.seqs) < 2:
            assert asyncio.get_running_loop().time() < deadline, sender.seqs
            await asyncio.sleep(0.02)
        assert sender.seqs == [1], "the stalled holder went on delivering after its lease ran out"
        assert dispatcher.leases_lapsed >= 1  # once for the batch's next item, and once more if the liveness
        # deadline was seen inside the stalled delivery
        await dispatcher.stop()
    finally:
        await holder.close()
        await other.close()


async def _lease_until(store: PostgresLogStore) -> object:
    c = pg.outbox_cursors
    stmt = sa.select(c.c.lease_until).where(c.c.scope_id == SCOPE, c.c.topic == "slack")
    return await store.run(lambda conn: conn.execute(stmt).scalar())
