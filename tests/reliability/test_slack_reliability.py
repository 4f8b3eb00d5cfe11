"""Slack reliability: Socket Mode, a process killed mid-delivery, 429 storms."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.core.entries import Actor
from tests.conftest import ServerFactory, eventually, test_config
from tests.fakes.polling import wait_for_call
from tests.fakes.slack_calls import record_calls, slack_calls
from tests.fakes.slack_faults import slack_faults

ALICE, BOB, GENERAL = "U0ALICE", "U0BOB", "C0GENERAL"


async def test_socket_mode_declare_reply_and_reaction(make_server: ServerFactory) -> None:
    async with FakeSlack(bot_token="xoxb-socket", app_token="xapp-socket") as fake:
        record_calls(fake)
        server = await make_server(
            socket_mode=True, slack_bot_token="xoxb-socket", slack_app_token="xapp-socket", slack_api_url=fake.base_url
        )
        await fake.server.wait_socket_connected()
        await fake.use_socket_mode()
        out = await fake.run_command(ALICE, GENERAL, "declare Queue backlog on billing sev3")
        assert out.status == 200  # the envelope was acked
        header = await wait_for_call(fake.server, "chat.postMessage")
        assert "Queue backlog on billing" in header.args["text"]
        scope = "incident/queue-backlog-on-billing"
        state = await eventually(lambda: _thread(server, scope))
        reply = await fake.post_message(BOB, GENERAL, "consumer lag is 40k", thread_ts=state.thread.ts)
        await eventually(lambda: _kinds(server, scope, "message"))
        await fake.add_reaction(ALICE, GENERAL, reply.ts, "pushpin")
        evidence = await eventually(lambda: _kinds(server, scope, "evidence"))
        assert evidence[0].payload.text == "consumer lag is 40k"
        # /slack/events is not served in Socket Mode
        assert server.mode == "socket"


async def _thread(server: Any, scope: str) -> Any:
    from decklog.core.errors import NotFound

    try:
        state = await server.runtime.store.get_state(scope)
    except NotFound:
        return None
    return state if state.thread else None


async def _kinds(server: Any, scope: str, kind: str) -> list[Any]:
    return await server.runtime.store.read(scope, kinds=[kind])


async def test_a_429_storm_delivers_every_message_with_pacing_held(make_server: ServerFactory) -> None:
    pace = 0.2
    server = await make_server(config=test_config(slack={"pace_per_channel_s": pace}))
    fake = server.sandbox
    await fake.run_command(ALICE, GENERAL, "declare Storm test")
    scope = "incident/storm-test"
    state = await eventually(lambda: _thread(server, scope))
    slack_faults(fake.server).ratelimit_next("chat.postMessage", retry_after=1, count=6)
    agent = Actor.agent("rules")
    for i in range(8):
        await server.runtime.service.record(scope, "hypothesis", {"text": f"hypothesis number {i}"}, agent)

    def thread_posts() -> list[Any]:
        return [
            c
            for c in slack_calls(fake).calls_to("chat.postMessage", ok=True)
            if c.args.get("thread_ts") == state.thread.ts and "hypothesis number" in c.args.get("text", "")
        ]

    await eventually(lambda: len(thread_posts()) == 8, timeout=30, what="all 8 replies despite the 429 storm")
    texts = [c.args["text"] for c in thread_posts()]
    assert texts == [f"Hypothesis: hypothesis number {i}" for i in range(8)]  # in seq order
    posts = sorted(
        (c.at, c.args.get("text", ""))
        for c in slack_calls(fake).calls_to("chat.postMessage", ok=True)
        if c.args.get("channel") == GENERAL
    )
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(posts)]
    assert min(gaps) >= pace * 0.9, (gaps, [t for _, t in posts])
    assert len(slack_calls(fake).calls_to("chat.postMessage", ok=False)) >= 6  # the storm happened
    assert not await server.runtime.store.read(scope, kinds=["delivery_failed"])  # and spent no failure budget
    assert server.runtime.dispatcher.stats.rate_limited >= 1


# -- killed mid-delivery --------------------------------------------------------------------------------------


def _serve(data_dir: Path, api_url: str) -> tuple[subprocess.Popen[str], str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_"))},
        "DECKLOG_DATA_DIR": str(data_dir),
        "DECKLOG_PORT": "0",
        "DECKLOG_HOST": "127.0.0.1",
        "SLACK_BOT_TOKEN": "xoxb-kill",
        "SLACK_SIGNING_SECRET": "kill-secret",
        "DECKLOG_SLACK_API_URL": api_url,
        "DECKLOG_ALERTS_CHANNEL": GENERAL,
        "DECKLOG_FIRST_TURN_DELAY": "3600",
        "DECKLOG_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "decklog.bot.cli", "serve"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"serving on (http://\S+)", line)
    assert match, f"unexpected first line: {line!r}"
    return proc, match.group(1)


def _headers(fake: FakeSlack, channel: str) -> list[Any]:
    return [m for m in fake.workspace.history(channel) if (m.metadata or {}).get("event_type") == "decklog_header"]


@pytest.mark.slow
async def test_killed_in_the_middle_of_delivery_restarts_without_a_duplicate(tmp_path: Path) -> None:
    async with FakeSlack(bot_token="xoxb-kill") as fake:
        record_calls(fake)
        proc, url = await asyncio.to_thread(_serve, tmp_path / "data", fake.base_url)
        try:
            fake.use_http(f"{url}/slack/events", "kill-secret")
            # Slack applies the post but the answer never arrives before we kill the process.
            slack_faults(fake.server).delay_next("chat.postMessage", 4, apply_first=True)
            out = await fake.run_command(ALICE, GENERAL, "declare Kill me softly sev2")
            assert out.status == 200
            await eventually(lambda: len(_headers(fake, GENERAL)) == 1, what="the header applied by Slack")
        finally:
            proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait)
        proc2, url2 = await asyncio.to_thread(_serve, tmp_path / "data", fake.base_url)
        try:
            fake.use_http(f"{url2}/slack/events", "kill-secret")
            # the restarted sender finds "posting" in its memo, looks the message up by metadata, and adopts it
            await wait_for_call(fake.server, "conversations.history", timeout=15)
            await eventually(lambda: _routed(tmp_path / "data"), timeout=15, what="the thread routed after restart")
            out = await fake.run_command(ALICE, GENERAL, "sev 1 incident/kill-me-softly")
            await eventually(
                lambda: [c for c in slack_calls(fake).calls_to("chat.update") if "SEV1" in c.args.get("text", "")],
                timeout=15,
            )
            assert len(_headers(fake, GENERAL)) == 1
        finally:
            proc2.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc2.wait)


def _routed(data_dir: Path) -> bool:
    import sqlite3

    db = sqlite3.connect(data_dir / "scopes" / "incident~kill-me-softly.db")
    try:
        return bool(db.execute("select 1 from entries where kind = 'thread_linked'").fetchone())
    finally:
        db.close()
