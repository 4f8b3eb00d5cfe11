"""Turns that cannot starve, seen from outside: signed Slack requests into the real server against the fake Slack.

A busy thread (a message every 0.3 s) still gets turns (the max wait caps the debounce); a turn slower than a
second shows :fire: on the incident header until it ends; an ``ask`` whose server is SIGKILLed mid-turn is
answered exactly once after the restart and leaves no :fire: behind.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.bot.server import DecklogServer
from decklog.core.agents import TurnInput, TurnOutput
from decklog.core.errors import NotFound
from tests.conftest import ServerFactory, eventually
from tests.fakes.anthropic_api import Delay, FakeAnthropic, Reply
from tests.fakes.slack_calls import record_calls, slack_calls

ALICE, BOB, GENERAL = "U0ALICE", "U0BOB", "C0GENERAL"


async def _thread(server: DecklogServer, scope: str) -> Any:
    try:
        state = await server.runtime.store.get_state(scope)
    except NotFound:
        return None
    return state if state.thread else None


def _fire_calls(fake: FakeSlack, method: str, ts: str) -> list[Any]:
    return [
        c for c in slack_calls(fake).calls_to(method) if c.args.get("timestamp") == ts and c.args.get("name") == "fire"
    ]


def _has_fire(fake: FakeSlack, channel: str, ts: str) -> bool:
    return bool((fake.workspace.message(channel, ts).reactions or {}).get("fire"))


async def test_a_thread_with_a_message_every_300ms_gets_turns_during_the_chatter(make_server: ServerFactory) -> None:
    server = await make_server(turn_debounce=1.0, turn_max_wait=2.0, first_turn_delay=60.0)
    fake = server.sandbox
    out = await fake.run_command(ALICE, GENERAL, "declare Chatty checkout sev2")
    assert out.status == 200
    scope = "incident/chatty-checkout"
    state = await eventually(lambda: _thread(server, scope), what="the header's thread")
    started = time.time()
    deadline = time.monotonic() + 10.0
    i = 0
    while time.monotonic() < deadline:
        i += 1
        sent = await fake.post_message(BOB if i % 2 else ALICE, GENERAL, f"update {i}", thread_ts=state.thread.ts)
        assert all(r.status == 200 for r in sent.responses)
        await asyncio.sleep(0.3)  # the load's pace, not a wait for an effect
    ended = time.time()
    messages = await eventually(
        lambda: _at_least(server, scope, "message", i), what="every chatter message recorded", timeout=20
    )
    turns = [e for e in await server.runtime.store.read(scope, kinds=["agent_turn"]) if started <= e.at.timestamp()]
    during = [t for t in turns if t.at.timestamp() <= ended]
    assert len(during) >= 3, [(t.at, t.payload.trigger, t.payload.outcome) for t in turns]
    assert {t.payload.outcome for t in during} <= {"ok", "nothing"}
    assert "max_wait" in {t.payload.trigger for t in during}  # the cap, not a quiet spell, started them
    covered = [(t.payload.seq_from, t.payload.seq_to) for t in turns]
    assert all(a <= b for a, b in covered) and all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(covered))
    assert len(messages) >= i and (await server.runtime.store.verify(scope)).ok


async def _at_least(server: DecklogServer, scope: str, kind: str, n: int) -> list[Any]:
    found = await server.runtime.store.read(scope, kinds=[kind])
    return found if len(found) >= n else []


class BlockedReasoner:
    """A slow reasoner: each turn waits until the test releases it, then decides nothing."""

    name = "slow"
    model = ""
    wants_wakes = False

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.turns: list[TurnInput] = []

    async def run(self, turn: TurnInput) -> TurnOutput:
        self.turns.append(turn)
        await self.release.wait()
        return TurnOutput()


async def test_a_slow_turn_shows_fire_on_the_header_until_it_ends_and_a_stale_one_is_cleared_at_boot(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "fire"
    server = await make_server(data_dir=data_dir, first_turn_delay=0.05, turn_debounce=0.05)
    fake = server.sandbox
    runtime = server.parts.agents.turns
    slow = BlockedReasoner()
    runtime.reasoner = slow
    await fake.run_command(ALICE, GENERAL, "declare Slow turn sev3")
    scope = "incident/slow-turn"
    state = await eventually(lambda: _thread(server, scope), what="the header's thread")
    header = state.thread.ts
    await eventually(lambda: slow.turns, what="the turn started")
    added = await eventually(lambda: _fire_calls(fake, "reactions.add", header), what=":fire: on the header")
    assert _has_fire(fake, GENERAL, header) and not _fire_calls(fake, "reactions.remove", header)
    slow.release.set()
    turn = await eventually(lambda: server.runtime.store.read(scope, kinds=["agent_turn"]), what="the turn recorded")
    assert turn[0].payload.outcome == "nothing" and turn[0].payload.reasoner == "slow"
    removed = await eventually(lambda: _fire_calls(fake, "reactions.remove", header), what=":fire: removed")
    assert added[0].at <= removed[0].at and not _has_fire(fake, GENERAL, header)
    # a process that died mid-turn leaves its note "on" and the :fire: shown: the next boot clears both
    await server.runtime.store.memo_put(scope, "progress", "header", {"on": True, "channel": GENERAL, "ts": header})
    await server.parts.slack_out.client.reactions_add(channel=GENERAL, timestamp=header, name="fire")
    assert _has_fire(fake, GENERAL, header)
    await server.runtime.store.memo_put(scope, "progress", "header", {"on": True, "channel": GENERAL, "ts": header})
    before = len(_fire_calls(fake, "reactions.remove", header))
    await server.parts.agents.turns.recover_progress(scope)  # what the boot re-arm does for every incident
    assert len(_fire_calls(fake, "reactions.remove", header)) == before + 1 and not _has_fire(fake, GENERAL, header)
    assert (await server.runtime.store.memo_get(scope, "progress", "header") or {}).get("on") is False
    await server.parts.agents.turns.recover_progress(scope)  # idempotent: nothing left to remove
    assert len(_fire_calls(fake, "reactions.remove", header)) == before + 1


# -- ask, killed mid-turn -------------------------------------------------------------------------------------


def _serve(data_dir: Path, slack_url: str, anthropic_url: str) -> tuple[subprocess.Popen[str], str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_", "ANTHROPIC_"))},
        "DECKLOG_DATA_DIR": str(data_dir),
        "DECKLOG_PORT": "0",
        "DECKLOG_HOST": "127.0.0.1",
        "SLACK_BOT_TOKEN": "xoxb-ask",
        "SLACK_SIGNING_SECRET": "ask-secret",
        "DECKLOG_SLACK_API_URL": slack_url,
        "DECKLOG_ALERTS_CHANNEL": GENERAL,
        "DECKLOG_FIRST_TURN_DELAY": "0.2",
        "DECKLOG_TURN_DEBOUNCE": "0.2",
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": anthropic_url,
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


def _count(data_dir: Path, scope: str, kind: str) -> int:
    path = data_dir / "scopes" / (scope.replace("/", "~") + ".db")
    if not path.exists():
        return 0
    db = sqlite3.connect(path)
    try:
        return int(db.execute("select count(*) from entries where kind = ?", (kind,)).fetchone()[0])
    finally:
        db.close()


def _headers(fake: FakeSlack) -> list[Any]:
    return [m for m in fake.workspace.history(GENERAL) if (m.metadata or {}).get("event_type") == "decklog_header"]


@pytest.mark.slow
async def test_an_ask_killed_mid_turn_is_answered_once_after_the_restart_and_its_fire_is_gone(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    scope = "incident/ask-me-later"
    answer_text = "The pool size change in the last deploy is the likeliest cause."
    # first process: the scheduled turn's request hangs (so it holds the scope), the ask waits behind it
    steps: list[Any] = [Delay(120, then=Reply(text="late")), *[Reply(text=answer_text) for _ in range(6)]]
    async with FakeSlack(bot_token="xoxb-ask") as fake, FakeAnthropic(steps) as claude:
        record_calls(fake)
        proc, url = await asyncio.to_thread(_serve, data, fake.base_url, claude.base_url)
        try:
            fake.use_http(f"{url}/slack/events", "ask-secret")
            out = await fake.run_command(ALICE, GENERAL, "declare Ask me later sev2")
            assert out.status == 200
            header = (await eventually(lambda: _headers(fake), what="the header", timeout=15))[0]
            await claude.wait_for_requests(1, timeout=15)  # the first turn is stuck in "Claude"
            await eventually(lambda: _fire_calls(fake, "reactions.add", header.ts), what=":fire: on the header")
            asked = await fake.post_message(ALICE, GENERAL, "@decklog ask what changed?", thread_ts=header.ts)
            await eventually(lambda: _fire_calls(fake, "reactions.add", asked.ts), what=":fire: on the question")
            assert _count(data, scope, "question") == 1 and _count(data, scope, "answer") == 0
        finally:
            proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait)
        assert _has_fire(fake, GENERAL, asked.ts) and _has_fire(fake, GENERAL, header.ts)  # left by the dead one
        proc2, url2 = await asyncio.to_thread(_serve, data, fake.base_url, claude.base_url)
        try:
            fake.use_http(f"{url2}/slack/events", "ask-secret")
            await eventually(lambda: _count(data, scope, "answer") == 1, what="the answer after restart", timeout=20)

            def answers() -> list[Any]:
                return [
                    m
                    for m in fake.workspace.thread(GENERAL, header.ts)
                    if m.text.startswith("Answer") and answer_text in m.text
                ]

            await eventually(answers, what="the answer in the thread", timeout=15)
            await eventually(lambda: not _has_fire(fake, GENERAL, asked.ts), what=":fire: off the question")
            await eventually(lambda: not _has_fire(fake, GENERAL, header.ts), what=":fire: off the header")
            # a Slack retry of the same mention after the restart answers nothing twice
            mention = next(d for d in fake.deliveries if d.payload.get("event", {}).get("type") == "app_mention")
            await fake.redeliver(mention)
            await eventually(lambda: _count(data, scope, "agent_turn") >= 2, what="the first turn re-run", timeout=15)
        finally:
            proc2.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc2.wait)
        assert _count(data, scope, "answer") == 1 and _count(data, scope, "question") == 1
        assert len(answers()) == 1
