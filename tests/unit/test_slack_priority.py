"""What waits for a Slack channel's post slot goes in order of what matters, and low-value posts coalesce in a burst.

- the pacer grants a channel's slot to its most urgent waiter, whenever it arrived (adapters/slack/pacing.py);
- after a restart, a new SEV1 incident's header goes before the low-severity posts the previous process left
  pending: the priority comes from stored state, not from a queue in memory (adapters/slack/sender.py);
- while a channel is in a burst, alert summaries and link notices go into one storm digest message per channel,
  updated with ``chat.update``, instead of one thread post each; a redelivered one is not added again; out of a
  burst they are posted in their threads (adapters/slack/digest.py).

Order is checked through the fake Slack's record of calls; nothing depends on how long anything takes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

import decklog.adapters.slack.digest as digest_module
from decklog.adapters.local.slack import FakeSlackServer
from decklog.adapters.slack.pacing import HEADER, LOW, NORMAL, URGENT, ChannelPacer, Priority
from decklog.adapters.slack.sender import SlackSender
from decklog.core.alerts.rules import SUMMARY_SOURCE
from decklog.core.entries import Actor, NewEntry
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.store.memory.index import MemoryIndex
from decklog.core.store.memory.log_store import MemoryLogStore, MemoryStorage
from tests.fakes.slack_calls import CallLog, RecordedCall, record_calls

CHANNEL = "C0GENERAL"
ALICE = Actor.human("U0ALICE", "alice")
TOPICS = ("slack",)


async def until(check: Callable[[], Awaitable[bool] | bool], what: str, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = check()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.02)


# -- the pacer ----------------------------------------------------------------------------------------------------


async def test_the_most_urgent_waiter_takes_the_channel_s_slot_whatever_its_arrival() -> None:
    pacer = ChannelPacer(interval=0.01)
    granted: list[str] = []

    async def post(name: str, priority: Priority) -> None:
        await pacer.wait(CHANNEL, priority)
        granted.append(name)

    arrivals = [
        ("summary", Priority(LOW, 3)),  # on a free channel: at once
        ("another summary", Priority(LOW, 3, at=1.0)),
        ("note in a SEV3", Priority(NORMAL, 3)),
        ("SEV3 header", Priority(HEADER, 3)),
        ("reply in a SEV2", Priority(URGENT, 2)),
        ("SEV1 header", Priority(HEADER, 1)),
        ("older SEV3 header", Priority(HEADER, 3, at=-1.0)),
    ]
    await asyncio.gather(*(post(name, p) for name, p in arrivals))  # the first takes the free slot; the rest queue
    assert granted == [
        "summary",
        "SEV1 header",
        "older SEV3 header",
        "SEV3 header",
        "reply in a SEV2",
        "note in a SEV3",
        "another summary",
    ]
    await asyncio.gather(post("alone", Priority(LOW)), post("other channel", Priority(LOW)))


async def test_a_header_arriving_while_posts_queue_goes_next_and_a_cancelled_waiter_is_skipped() -> None:
    pacer = ChannelPacer(interval=0.05)
    granted: list[str] = []
    first = asyncio.Event()

    async def post(name: str, priority: Priority) -> None:
        await pacer.wait(CHANNEL, priority)
        granted.append(name)
        first.set()

    lows = [asyncio.create_task(post(f"low {n}", Priority(LOW, 3, float(n)))) for n in range(5)]
    await first.wait()  # "low 0" has its slot; four wait behind it
    assert pacer.backlog(CHANNEL) > 0
    doomed = asyncio.create_task(post("cancelled", Priority(HEADER, 1)))
    await asyncio.sleep(0)
    doomed.cancel()
    header = asyncio.create_task(post("SEV2 header", Priority(HEADER, 2)))
    await asyncio.gather(header, *lows)
    assert granted == ["low 0", "SEV2 header", "low 1", "low 2", "low 3", "low 4"]


# -- the sender over a store, through the fake Slack ------------------------------------------------------------


@dataclass
class Process:
    """One decklog process's Slack delivery: a store over the shared storage, a dispatcher and the Slack sender."""

    store: MemoryLogStore
    dispatcher: Dispatcher
    sender: SlackSender

    async def stop(self) -> None:
        await self.dispatcher.stop()


@pytest.fixture
async def slack() -> AsyncIterator[tuple[FakeSlackServer, CallLog]]:
    async with FakeSlackServer() as server:
        yield server, record_calls(server)


def start(storage: MemoryStorage, index: MemoryIndex, server: FakeSlackServer, interval: float) -> Process:
    store = MemoryLogStore(storage, topics=TOPICS)
    client = AsyncWebClient(token="xoxb-test", base_url=server.base_url)
    sender = SlackSender(client, store, index, alerts_channel=CHANNEL, pacer=ChannelPacer(interval))
    dispatcher = Dispatcher(store, [sender])
    dispatcher.start()
    return Process(store, dispatcher, sender)


def declared(title: str, severity: int) -> NewEntry:
    return NewEntry.make("declared", ALICE, {"title": title, "severity": severity, "via": "api"})


def note(text: str) -> NewEntry:
    return NewEntry.make("message", ALICE, {"text": text})


def summary(n: int) -> NewEntry:
    payload = {
        "text": f"+{n} alerts in the last minute: {n} repeats",
        "source": SUMMARY_SOURCE,
        "data": {"summary": {"total": n, "firing": n}},
    }
    return NewEntry.make("observation", Actor.system(SUMMARY_SOURCE), payload)


def posts(calls: CallLog) -> list[RecordedCall]:
    return calls.calls_to("chat.postMessage", ok=True)


def meta(call: RecordedCall) -> dict[str, Any]:
    raw = call.args.get("metadata") or {}
    return json.loads(raw) if isinstance(raw, str) else raw


def header_of(call: RecordedCall) -> str | None:
    m = meta(call)
    return (m.get("event_payload") or {}).get("scope") if m.get("event_type") == "decklog_header" else None


async def test_after_a_restart_a_new_sev1_header_goes_before_the_low_severity_posts_left_pending(
    slack: tuple[FakeSlackServer, CallLog],
) -> None:
    server, calls = slack
    storage, index = MemoryStorage(), MemoryIndex()
    low = [f"incident/low-{n:02d}" for n in range(8)]

    first = start(storage, index, server, interval=0.0)
    for scope in low:
        await first.store.append(scope, [declared(f"disk filling on {scope}", 3)], create=True)
    await until(lambda: sum(1 for c in posts(calls) if header_of(c)) == len(low), "the SEV3 headers")
    await first.dispatcher.idle()
    await first.stop()  # the process dies; what follows is committed while no one delivers

    for scope in low:  # five thread notes each, in order
        await first.store.append(scope, [note(f"{scope} note {k}") for k in range(5)])
    await first.store.append("incident/payments-down", [declared("payments are down", 1)], create=True)
    before = len(posts(calls))

    second = start(storage, index, server, interval=0.02)  # the restart: paced, as in production
    try:
        await second.dispatcher.sweep()
        await until(lambda: len(posts(calls)) >= before + 1 + 5 * len(low), "every pending post after the restart")
        await second.dispatcher.idle()
        after = posts(calls)[before:]
        headers = [n for n, c in enumerate(after) if header_of(c) == "incident/payments-down"]
        assert headers and headers[0] <= 1, [c.args.get("text") for c in after[:5]]  # at most one post went first
        for scope in low:  # each thread's own order is exact
            texts = [c.args["text"] for c in after if scope in str(c.args.get("text"))]
            assert texts == [f"alice: {scope} note {k}" for k in range(5)], texts
    finally:
        await second.stop()


async def test_in_a_burst_low_value_posts_coalesce_into_one_digest_updated_in_place(
    slack: tuple[FakeSlackServer, CallLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, calls = slack
    monkeypatch.setattr(digest_module, "BURST_S", 0.2)  # a burst: a post asked for now waits 0.2 s or more
    monkeypatch.setattr(digest_module, "UPDATE_EVERY_S", 0.0)
    storage, index = MemoryStorage(), MemoryIndex()
    proc = start(storage, index, server, interval=0.05)
    scopes = [f"incident/storm-{n:02d}" for n in range(10)]
    try:
        for scope in scopes:  # ten incidents at once: their headers queue for the channel (0.5 s)
            await proc.store.append(scope, [declared(f"storm {scope}", 3), summary(3)], create=True)
        await until(lambda: sum(1 for c in posts(calls) if header_of(c)) == len(scopes), "the headers")
        await proc.dispatcher.idle()

        threaded = [c for c in posts(calls) if c.args.get("thread_ts")]
        digests = [c for c in posts(calls) if not c.args.get("thread_ts") and not meta(c)]
        assert len(digests) == 1, [c.args.get("text") for c in digests]
        assert len(threaded) < len(scopes)  # the summaries asked for in the burst went to the digest
        coalesced = proc.sender.stats.coalesced
        assert coalesced + len(threaded) == len(scopes) and coalesced >= 1
        digest_ts = calls.find_call("chat.postMessage", lambda a: not a.get("thread_ts") and not a.get("metadata"))
        assert digest_ts is not None
        shown = server.workspace.messages.get(CHANNEL, digest_ts.response["ts"])
        lines = json.dumps(shown.blocks)
        in_digest = [s for s in scopes if f"storm {s}" in lines]
        assert len(in_digest) == coalesced  # each coalesced summary is a line of the one message

        # a redelivery of a coalesced entry adds nothing and posts nothing
        before = (len(posts(calls)), proc.sender.digest.lines)
        for scope in in_digest:
            proc.dispatcher.wake(scope, ["slack"])
        await proc.dispatcher.idle()
        assert (len(posts(calls)), proc.sender.digest.lines) == before

        # while the digest is open, a later summary edits it in place: no new post
        await proc.store.append(scopes[0], [summary(7)])

        def edited() -> bool:
            return any(
                c.args.get("ts") == digest_ts.response["ts"] and "+7 alerts" in json.dumps(c.args.get("blocks"))
                for c in calls.calls_to("chat.update", ok=True)
            )

        await until(edited, "the digest updated with the later summary")
        await proc.dispatcher.idle()
        assert len(posts(calls)) == before[0]
    finally:
        await proc.stop()


async def test_out_of_a_burst_a_summary_is_posted_in_its_thread(
    slack: tuple[FakeSlackServer, CallLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, calls = slack
    monkeypatch.setattr(digest_module, "BURST_S", 0.2)
    storage, index = MemoryStorage(), MemoryIndex()
    proc = start(storage, index, server, interval=0.0)
    try:
        await proc.store.append("incident/quiet", [declared("quiet one", 2)], create=True)
        await until(lambda: any(header_of(c) for c in posts(calls)), "the header")
        await proc.store.append("incident/quiet", [summary(2)])
        await until(lambda: any(c.args.get("thread_ts") for c in posts(calls)), "the summary in its thread")
        await proc.dispatcher.idle()
        assert proc.sender.stats.coalesced == 0
        [reply] = [c for c in posts(calls) if c.args.get("thread_ts")]
        assert reply.args["text"].startswith("+2 alerts in the last minute")
    finally:
        await proc.stop()
