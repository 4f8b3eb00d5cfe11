"""Many replicas, one database: a live holder keeps its delivery cursor through a long wait, and a holder whose
lease ran out inside one delivery posts nothing (decision 121).

The three-replica SIGKILL test once showed a header posted twice, 9 s apart: Slack posts to one channel are paced
by a slot shared by every replica, so during a storm a header waits many seconds for its slot inside one delivery.
Two holes let a second replica post it too: a holder's renewal that met another replica's take looking at the
row was skipped (``SKIP LOCKED``), so its lease could run out while it waited; and nothing checked the lease again
after the wait, while the replica that took the cursor over had already looked for the post and not found it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.local.slack import FakeSlackServer
from decklog.adapters.slack.pacing import DEFAULT, ChannelPacer, Priority
from decklog.adapters.slack.sender import SlackSender
from decklog.core.outbox import dispatcher as dispatching
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.log_store import PostgresLogStore
from decklog.core.store.sqlite.index import SqliteIndex
from tests.fakes.slack_calls import record_calls, slack_calls
from tests.store_contract import SCOPE, declare

TOPICS = ("index", "slack")
CHANNEL = "C0GENERAL"


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_holders_renewal_waits_for_another_replicas_take_instead_of_skipping_it(pg_url: str) -> None:
    one, two = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    looking = psycopg.connect(pg_url)  # another replica's take, stopped while it holds the row
    try:
        await declare(one)
        assert await one.take_cursor(SCOPE, "slack", "r1", lease_s=60)
        table = pg.outbox_cursors.name
        looking.execute(f"SELECT 1 FROM {table} WHERE scope_id = %s AND topic = 'slack' FOR UPDATE", (SCOPE,))
        assert not await one.claim_cursor(SCOPE, "slack", "r1", lease_s=60)  # a take skips the locked row
        renewal = asyncio.ensure_future(one.renew_cursor(SCOPE, "slack", "r1", lease_s=60))

        async def waiting() -> bool:
            with psycopg.connect(pg_url, autocommit=True) as c:
                row = c.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").fetchone()
            return bool(row and row[0])

        await _until(waiting, "the renewal never waited for the row lock")
        assert not renewal.done()
        looking.rollback()
        assert await asyncio.wait_for(renewal, 30)
        assert await two.take_cursor(SCOPE, "slack", "r2", lease_s=60) is None  # still r1's
        assert not await two.renew_cursor(SCOPE, "slack", "r2", lease_s=60)  # only the holder renews
        await one.release_cursor(SCOPE, "slack", "r1")
        assert not await one.renew_cursor(SCOPE, "slack", "r1", lease_s=60)  # a cursor let go is not renewed
    finally:
        looking.close()
        await one.close()
        await two.close()


class HeldPacer(ChannelPacer):
    """The channel's next post slot is as far away as the test wants (a storm's queue of headers)."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def wait(self, channel: str, priority: Priority = DEFAULT) -> None:
        self.entered.set()
        await self.release.wait()


async def test_a_holder_whose_lease_ran_out_while_waiting_for_its_post_slot_posts_nothing(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatching, "CURSOR_LEASE_S", 1.0)
    monkeypatch.setattr(dispatching, "LEASE_MARGIN_S", 0.2)

    async def frozen(_self: Dispatcher, _scope: str, _topic: str) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(Dispatcher, "_keep_lease", frozen)  # its renewals never land (the hole closed above)
    holder, other = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    index = SqliteIndex(tmp_path / "index.db", holder.executor)
    await index.open()
    async with FakeSlackServer() as slack:
        record_calls(slack)
        client = AsyncWebClient(token="xoxb-test", base_url=slack.base_url)
        pacer = HeldPacer()
        dispatcher = Dispatcher(holder, [], cursors=holder)
        sender = SlackSender(client, holder, index, alerts_channel=CHANNEL, pacer=pacer, fence=dispatcher)
        dispatcher.register(sender)
        try:
            dispatcher.start()
            await declare(holder)  # its header waits for the channel's slot, inside the delivery
            await asyncio.wait_for(pacer.entered.wait(), 30)

            async def taken_over() -> bool:
                return await other.take_cursor(SCOPE, "slack", "other", lease_s=60) is not None

            await _until(taken_over, "the holder's lease never ran out")
            pacer.release.set()

            async def fenced() -> bool:
                return dispatcher.leases_lapsed > 0 or bool(slack_calls(slack).calls_to("chat.postMessage"))

            await _until(fenced, "the held post neither posted nor stopped")
            assert not slack_calls(slack).calls_to("chat.postMessage"), (
                "posted after another replica took the cursor over"
            )
            summary = await other.outbox_summary(SCOPE)
            assert summary.pending.get("slack") == 1 and not summary.parked  # left to the new holder, no failure
            assert dispatcher.stats.failures == 0
        finally:
            await dispatcher.stop()
            await index.close()
            await holder.close()
            await other.close()
