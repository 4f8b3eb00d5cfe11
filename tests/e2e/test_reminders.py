"""Reminders: the commander is nudged in the thread when no status update was posted for the
severity's interval; the owners of open follow-ups are reminded days after the resolve. Due times come from the
log (a restart repeats nothing); a status update resets the clock; a SEV3 is never nudged by default."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.server import DecklogServer
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, NewEntry
from decklog.core.errors import NotFound
from tests.conftest import eventually
from tests.e2e.test_lifecycle import ALICE_ACTOR, DAY, Make, kinds, servers
from tests.e2e.test_slack_e2e import ALICE, BOB, GENERAL
from tests.fakes.slack_calls import slack_calls

MIN = 60


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
async def make(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Make]:
    async for start in servers(tmp_path, clock):
        yield start


async def declare(server: DecklogServer, text: str) -> tuple[str, str]:
    fake = server.sandbox
    assert fake is not None
    assert (await fake.run_command(ALICE, GENERAL, f"declare {text}")).status == 200
    ids = await eventually(lambda: server.runtime.store.scope_ids(), what="a declared scope")
    scope = str(ids[0])

    async def thread() -> str | None:
        try:
            state = await server.runtime.store.get_state(scope)
        except NotFound:
            return None
        return state.thread.ts if state.thread else None

    return scope, await eventually(thread, what="the header's thread")


def nudges(server: DecklogServer, thread_ts: str, needle: str) -> list[Any]:
    fake = server.sandbox
    assert fake is not None
    calls = slack_calls(fake).calls_to("chat.postMessage", ok=True)
    return [c for c in calls if c.args.get("thread_ts") == thread_ts and needle in str(c.args.get("text", ""))]


async def reminders(server: DecklogServer, scope: str, purpose: str) -> list[Any]:
    return [e for e in await kinds(server, scope, "reminder") if e.payload.purpose == purpose]


async def test_the_commander_is_nudged_once_per_quiet_interval(make: Make, clock: ManualClock) -> None:
    server = await make()
    job = server.parts.ops.lifecycle
    scope, ts = await declare(server, "Checkout is down sev1")
    clock.advance(seconds=30 * MIN - 1)
    await job.tick()
    assert await reminders(server, scope, "status_update") == []
    clock.advance(seconds=2)
    await job.tick()
    await job.tick()
    [nudge] = await reminders(server, scope, "status_update")
    assert nudge.payload.users == (ALICE,)
    posted = await eventually(lambda: nudges(server, ts, "<@U0ALICE>"), what="the nudge in the thread")
    assert "No status update for 30 min" in posted[0].args["text"]
    # a status update resets the clock: nothing 29 minutes after it, a nudge after 30
    clock.advance(seconds=10 * MIN)
    await server.runtime.service.set_status(scope, "identified", ALICE_ACTOR, summary="bad config push")
    await server.runtime.dispatcher.idle()  # the job reads the index first
    clock.advance(seconds=29 * MIN)
    await job.tick()
    assert len(await reminders(server, scope, "status_update")) == 1
    clock.advance(seconds=2 * MIN)
    await job.tick()
    assert len(await reminders(server, scope, "status_update")) == 2
    await eventually(lambda: len(nudges(server, ts, "<@U0ALICE>")) == 2, what="the second nudge")
    # resolved: no more nudges
    await server.runtime.service.resolve(scope, ALICE_ACTOR)
    await server.runtime.dispatcher.idle()  # the job reads the index first
    clock.advance(seconds=DAY)
    await job.tick()
    assert len(await reminders(server, scope, "status_update")) == 2


async def test_a_restart_does_not_repeat_a_nudge(make: Make, clock: ManualClock) -> None:
    first = await make()
    scope, ts = await declare(first, "Search is slow sev2")
    clock.advance(seconds=61 * MIN)
    await first.parts.ops.lifecycle.tick()
    await eventually(lambda: nudges(first, ts, "<@U0ALICE>"), what="the nudge")
    await first.stop()
    second = await make()
    await second.parts.ops.lifecycle.tick()
    await second.runtime.dispatcher.idle()
    assert len(await reminders(second, scope, "status_update")) == 1
    assert nudges(second, ts, "No status update") == []
    clock.advance(seconds=60 * MIN)  # the next quiet interval, counted from the nudge
    await second.parts.ops.lifecycle.tick()
    assert len(await reminders(second, scope, "status_update")) == 2


async def test_sev3_is_not_nudged_by_default(make: Make, clock: ManualClock) -> None:
    server = await make()
    scope, _ = await declare(server, "Logs are delayed sev3")
    clock.advance(seconds=7 * DAY)
    await server.parts.ops.lifecycle.tick()
    assert await reminders(server, scope, "status_update") == []


async def test_owners_of_open_follow_ups_are_reminded_after_the_resolve(make: Make, clock: ManualClock) -> None:
    server = await make()
    job = server.parts.ops.lifecycle
    store = server.runtime.store
    scope, ts = await declare(server, "Payments 5xx sev3")
    open_one = NewEntry.make("follow_up", ALICE_ACTOR, {"text": "add a canary for payments", "owner": BOB})
    done_one = NewEntry.make("follow_up", ALICE_ACTOR, {"text": "rotate the key", "owner": "U0CAROL"})
    appended = await store.append(scope, [open_one, done_one])
    closed = NewEntry.make("follow_up_closed", Actor.system("tracker:github"), {"follow_up": appended.entries[1].seq})
    await store.append(scope, [closed])
    await server.runtime.service.resolve(scope, ALICE_ACTOR)
    await server.runtime.dispatcher.idle()  # the job reads the index first
    clock.advance(seconds=3 * DAY - 1)
    await job.tick()
    assert await reminders(server, scope, "follow_up") == []
    clock.advance(seconds=2)
    await job.tick()
    await job.tick()
    [reminder] = await reminders(server, scope, "follow_up")
    assert reminder.payload.users == (BOB,) and reminder.payload.follow_ups == (appended.entries[0].seq,)
    posted = await eventually(lambda: nudges(server, ts, f"<@{BOB}>"), what="the follow-up reminder")
    assert "add a canary" in posted[0].args["text"] and "rotate the key" not in posted[0].args["text"]
    # a reopen and a new resolve: one more reminder, days after that resolve
    await server.runtime.service.set_status(scope, "investigating", ALICE_ACTOR)
    await server.runtime.dispatcher.idle()  # the job reads the index first
    await server.runtime.service.resolve(scope, ALICE_ACTOR)
    await server.runtime.dispatcher.idle()  # the job reads the index first
    await job.tick()
    assert len(await reminders(server, scope, "follow_up")) == 1
    clock.advance(seconds=3 * DAY)
    await job.tick()
    assert len(await reminders(server, scope, "follow_up")) == 2
