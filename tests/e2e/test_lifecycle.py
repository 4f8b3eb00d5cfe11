"""Channel lifecycle: a dedicated incident channel gets a notice, then is archived
``archive_after`` after the resolve; activity or a reopen cancels it; the due times are read from the log, so a
restart neither loses nor repeats them. Time is a ManualClock the test moves; the job's tick is called directly (the
same call the periodic job makes); every Slack effect is awaited by polling with a deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, NewEntry
from decklog.core.entries.lifecycle import ChannelArchive
from decklog.core.errors import NotFound
from tests.conftest import eventually, test_config
from tests.e2e.test_slack_e2e import ALICE, GENERAL
from tests.fakes.slack_calls import record_sandbox_calls, slack_calls
from tests.fakes.slack_faults import slack_faults

DAY = 86_400
ALICE_ACTOR = Actor.human(ALICE, "alice")
Make = Callable[..., Awaitable[DecklogServer]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
async def make(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Make]:
    async for start in servers(tmp_path, clock):
        yield start


async def servers(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Make]:
    """Start servers (sandbox part only) on one data directory and one ManualClock; stopped at the end."""
    running: list[DecklogServer] = []

    async def start(**settings: Any) -> DecklogServer:
        values: dict[str, Any] = {"data_dir": tmp_path / "data", "host": "127.0.0.1", "port": 0}
        values.update(settings)
        server = DecklogServer(
            Settings(**values), config=test_config(), clock=clock, parts={"sandbox"}, on_built=record_sandbox_calls
        )
        await server.start()
        running.append(server)
        return server

    yield start
    for server in reversed(running):
        await server.stop()


async def kinds(server: DecklogServer, scope: str, kind: str) -> list[Any]:
    return [e for e in await server.runtime.store.read(scope) if e.kind == kind]


async def dedicated(server: DecklogServer, title: str = "Search is down") -> tuple[str, str]:
    fake = server.sandbox
    assert fake is not None
    assert (await fake.run_command(ALICE, GENERAL, f"declare {title} sev2 --channel")).status == 200
    ids = await eventually(lambda: server.runtime.store.scope_ids(), what="a declared scope")
    scope = str(ids[0])

    async def thread() -> str | None:
        try:
            state = await server.runtime.store.get_state(scope)
        except NotFound:  # the file exists a moment before its first entry commits
            return None
        return state.thread.channel if state.thread and state.thread.dedicated_channel else None

    return scope, await eventually(thread, what="the dedicated channel")


def channel_posts(server: DecklogServer, channel: str, needle: str) -> list[Any]:
    fake = server.sandbox
    assert fake is not None
    calls = slack_calls(fake).calls_to("chat.postMessage", ok=True)
    return [c for c in calls if c.args.get("channel") == channel and needle in str(c.args.get("text", ""))]


def archive_calls(server: DecklogServer, ok: bool | None = True) -> list[Any]:
    fake = server.sandbox
    assert fake is not None
    return slack_calls(fake).calls_to("conversations.archive", ok=ok)


def is_archived(server: DecklogServer, channel: str) -> bool:
    fake = server.sandbox
    assert fake is not None
    return fake.server.workspace.channel(channel).is_archived


async def test_notice_then_archive_once(make: Make, clock: ManualClock) -> None:
    server = await make()
    job = server.parts.ops.lifecycle
    scope, channel = await dedicated(server)
    await server.runtime.service.resolve(scope, ALICE_ACTOR, summary="fixed")
    await server.runtime.dispatcher.idle()  # the job reads the index first
    clock.advance(seconds=6 * DAY - 1)  # the notice is due a day (archive_notice) before the archive
    await job.tick()
    assert await kinds(server, scope, "archive_notice") == []
    clock.advance(seconds=2)
    await job.tick()
    await job.tick()  # a second tick (or replica) appends nothing more
    [notice] = await kinds(server, scope, "archive_notice")
    await eventually(lambda: channel_posts(server, channel, "will be archived"), what="the notice in the channel")
    clock.advance(seconds=DAY - 2)
    await job.tick()
    assert await kinds(server, scope, "channel_archive") == [] and not archive_calls(server, None)
    clock.advance(seconds=2)
    await job.tick()
    [archive] = await kinds(server, scope, "channel_archive")
    assert archive.refs == (notice.seq,)
    await eventually(lambda: is_archived(server, channel), what="the channel archived")
    clock.advance(seconds=30 * DAY)
    await job.tick()
    await server.runtime.dispatcher.idle()
    assert len(await kinds(server, scope, "channel_archive")) == 1 and len(archive_calls(server, None)) == 1
    assert len(channel_posts(server, channel, "will be archived")) == 1


async def test_activity_restarts_the_wait_and_a_reopen_cancels_it(make: Make, clock: ManualClock) -> None:
    server = await make(archive_after=3600)  # DECKLOG_ARCHIVE_AFTER: an hour; the notice's lead is capped by it
    job = server.parts.ops.lifecycle
    fake = server.sandbox
    assert fake is not None
    scope, channel = await dedicated(server)
    await server.runtime.service.resolve(scope, ALICE_ACTOR)
    await server.runtime.dispatcher.idle()  # the job reads the index first
    await job.tick()
    [notice] = await kinds(server, scope, "archive_notice")  # lead = min(1 day, 1 hour): due at once
    await eventually(lambda: channel_posts(server, channel, "will be archived"), what="the notice")
    clock.advance(seconds=1800)
    await fake.post_message(ALICE, channel, "still checking the replicas")  # activity in the channel
    await eventually(lambda: kinds(server, scope, "message"), what="the message recorded")
    clock.advance(seconds=1800)
    await job.tick()
    assert await kinds(server, scope, "channel_archive") == []  # the pending archive was cancelled ...
    assert len(await kinds(server, scope, "archive_notice")) == 2  # ... and the quiet after it gives a new notice
    # a channel_archive for the stale notice (a race with the activity) archives nothing at delivery
    stale = ChannelArchive(channel=channel, notice=notice.seq, text="stale")
    await server.runtime.store.append(scope, [NewEntry.make("channel_archive", Actor.system("lifecycle"), stale)])
    await server.runtime.dispatcher.idle()
    assert not archive_calls(server, None)
    await server.runtime.service.set_status(scope, "investigating", ALICE_ACTOR, summary="it is back")
    await server.runtime.dispatcher.idle()  # the job reads the index first
    clock.advance(seconds=10 * DAY)
    await job.tick()
    await server.runtime.dispatcher.idle()
    assert len(await kinds(server, scope, "channel_archive")) == 1 and not archive_calls(server, None)
    assert not is_archived(server, channel)


async def test_a_restart_neither_loses_nor_repeats_the_archive(make: Make, clock: ManualClock) -> None:
    first = await make()
    scope, channel = await dedicated(first)
    await first.runtime.service.resolve(scope, ALICE_ACTOR)
    await first.runtime.dispatcher.idle()  # the job reads the index first
    clock.advance(seconds=6 * DAY + 1)
    await first.parts.ops.lifecycle.tick()
    await eventually(lambda: channel_posts(first, channel, "will be archived"), what="the notice")
    await first.stop()

    clock.advance(seconds=DAY)  # the archive fell due while decklog was down
    second = await make()
    await second.parts.ops.lifecycle.tick()
    await second.parts.ops.lifecycle.tick()
    await eventually(lambda: is_archived(second, channel), what="the channel archived after the restart")
    await second.runtime.dispatcher.idle()
    assert channel_posts(second, channel, "will be archived") == []  # the notice was not posted again
    await second.stop()

    third = await make()
    await third.parts.ops.lifecycle.tick()
    await third.runtime.dispatcher.idle()
    assert len(await kinds(third, scope, "archive_notice")) == 1
    assert len(await kinds(third, scope, "channel_archive")) == 1
    assert len(archive_calls(second)) == 1 and archive_calls(third, None) == []


async def test_a_lost_answer_is_retried_and_already_archived_counts_as_done(make: Make, clock: ManualClock) -> None:
    server = await make(archive_after=0)  # no wait: the notice, then the archive on the next tick
    fake = server.sandbox
    assert fake is not None
    faults = slack_faults(fake.server)
    faults.apply_then_drop("conversations.archive")  # archived, but the answer never reaches decklog
    scope, channel = await dedicated(server)
    await server.runtime.service.resolve(scope, ALICE_ACTOR)
    await server.runtime.dispatcher.idle()  # the job reads the index first
    job = server.parts.ops.lifecycle
    await job.tick()
    await job.tick()
    [archive] = await kinds(server, scope, "channel_archive")
    retried = await eventually(lambda: archive_calls(server, ok=False), what="the retry", timeout=15)
    assert retried[0].error == "already_archived"

    async def done() -> bool:
        memo = await server.runtime.store.memo_get(scope, "slack", f"archive:{archive.seq}")
        return memo is not None and memo["state"] == "archived"

    await eventually(done, what="the archive recorded as done")
    assert is_archived(server, channel) and await kinds(server, scope, "delivery_failed") == []


async def test_a_channel_the_bot_left_parks_the_archive_with_slacks_reason(make: Make, clock: ManualClock) -> None:
    server = await make(archive_after=0)
    fake = server.sandbox
    assert fake is not None
    scope, channel = await dedicated(server)
    room = fake.server.workspace.channel(channel)
    await server.runtime.service.resolve(scope, ALICE_ACTOR)
    await server.runtime.dispatcher.idle()  # the job reads the index first
    await server.parts.ops.lifecycle.tick()
    await eventually(lambda: channel_posts(server, channel, "will be archived"), what="the notice")
    room.members.remove(fake.server.workspace.bot_user_id)  # someone removed the bot from the channel
    await server.parts.ops.lifecycle.tick()
    failed = await eventually(lambda: kinds(server, scope, "delivery_failed"), what="the parked archive")
    assert "not_in_channel" in failed[0].payload.error and not is_archived(server, channel)


async def test_only_the_jobs_archive_of_the_incidents_own_channel_is_acted_on(make: Make, clock: ManualClock) -> None:
    server = await make(archive_after=3600)
    store = server.runtime.store
    scope, channel = await dedicated(server)
    await server.runtime.service.resolve(scope, ALICE_ACTOR)
    await server.runtime.dispatcher.idle()  # the job reads the index first
    await server.parts.ops.lifecycle.tick()
    [notice] = await kinds(server, scope, "archive_notice")
    other = ChannelArchive(channel="C0GENERAL", notice=notice.seq, text="another channel")
    ahead = ChannelArchive(channel=channel, notice=notice.seq + 100, text="a notice that does not exist yet")
    await store.append(scope, [NewEntry.make("channel_archive", Actor.system("lifecycle"), other)])
    await store.append(scope, [NewEntry.make("channel_archive", Actor.system("lifecycle"), ahead)])
    await server.runtime.dispatcher.idle()
    assert not archive_calls(server, None) and not is_archived(server, channel)
    clock.advance(seconds=3600)  # the notice's own archive still comes, once
    await server.parts.ops.lifecycle.tick()
    await server.parts.ops.lifecycle.tick()
    await eventually(lambda: is_archived(server, channel), what="the channel archived")
    assert len(await kinds(server, scope, "channel_archive")) == 3 and len(archive_calls(server, None)) == 1
