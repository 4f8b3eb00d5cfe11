"""A kill between a commit and its delivery, for every outbox topic (``bot.runtime.OUTBOX_TOPICS``).

The server runs as tests/helpers/crash_topic_child.py: the sender of one topic ends the process right before its
first delivery (the declaration's entries are committed; their delivery to that topic has not happened). A plain
``decklog serve`` restarts on the same data, and the effect happens exactly once: one incident, one header, no
Slack post twice, the outbox empty on every topic (``actions`` takes no declaration, so an alert's observation is
its first delivery) — plus, for the topics we know, their own effect: the index
finds the incident once, and the agents take exactly one turn.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.bot.runtime import OUTBOX_TOPICS
from tests.conftest import eventually
from tests.helpers.crash_topic_child import CRASH_EXIT
from tests.helpers.log_view import Acked, judge, read_log
from tests.helpers.mixed_load import CrashRun, alert_payload
from tests.helpers.serve import ALERT_TOKEN, ALICE, BOT_TOKEN, GENERAL, SIGNING_SECRET, Served, start_serve

FAST_TURNS = {"DECKLOG_FIRST_TURN_DELAY": "0.3"}


async def _get(served: Served, path: str) -> object:
    async with aiohttp.ClientSession() as http, http.get(f"{served.url}{path}") as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def _index_finds_it_once(served: Served, data: Path, scope: str, word: str) -> None:
    """Every entry of the scope is in the full-text index exactly once, and the scope list has it once."""

    def fts() -> Counter[int]:
        db = sqlite3.connect(f"file:{data / 'index.db'}?mode=ro", uri=True, timeout=10)
        try:
            return Counter(seq for (seq,) in db.execute("SELECT seq FROM entries_fts WHERE scope = ?", (scope,)))
        finally:
            db.close()

    indexed = await eventually(fts, timeout=15, what=f"{scope} in the full-text index")
    assert all(n == 1 for n in indexed.values()), f"indexed more than once: {indexed}"
    assert 1 in indexed, indexed  # the declaration, whose delivery the crash interrupted
    listed = await _get(served, f"/api/scopes?text={word}")
    scopes = [s["id"] for s in listed["scopes"]]  # type: ignore[index]
    assert scopes.count(scope) == 1, listed


async def _one_agent_turn(served: Served, data: Path, scope: str, word: str) -> None:
    def turns() -> int:
        return sum(1 for r in read_log(data)[scope].rows if r.kind == "agent_turn")

    await eventually(turns, timeout=30, what=f"the agent turn of {scope} after the restart")
    assert turns() == 1


EXTRA_CHECKS = {"index": _index_finds_it_once, "agents": _one_agent_turn}


async def _fire_alert(served: Served, fingerprint: str) -> bool:
    """An alert webhook (its observation is the first entry the ``actions`` topic takes: bot.runtime.TOPIC_KINDS);
    True when it was acknowledged before the crash."""
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{served.url}/alerts/alertmanager",
                json=alert_payload(fingerprint, "payments"),
                headers={"Authorization": f"Bearer {ALERT_TOKEN}"},
                timeout=aiohttp.ClientTimeout(total=10),
            ) as resp,
        ):
            await resp.read()
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, TimeoutError):
        return False


@pytest.mark.slow
# ``trackers`` and ``paging`` take only follow-ups / status changes, which a declare never makes: their kill
# between effect and record is tested in tests/e2e/test_follow_ups.py and tests/e2e/test_paging.py; ``oncall``
# takes only pages (no on-call is configured here): tests/reliability/test_oncall_durable.py kills a server right
# after a page's DM. ``webhooks`` gets no rows without ``[[webhooks]]`` (bot/topics.py), and none is configured
# here: tests/e2e/test_webhooks.py retries deliveries after failures against a real receiver.
@pytest.mark.parametrize("topic", [t for t in OUTBOX_TOPICS if t not in ("trackers", "paging", "oncall", "webhooks")])
async def test_a_kill_before_the_first_delivery_to_a_topic_then_the_effect_happens_once(
    topic: str, tmp_path: Path
) -> None:
    data, marker = tmp_path / "data", tmp_path / "crashed-at"
    word = f"topiccrash{topic}"
    title = f"Crash before {topic} delivery {word}"
    async with FakeSlack(bot_token=BOT_TOKEN) as fake:
        child = await asyncio.to_thread(
            start_serve,
            data,
            fake.base_url,
            module="tests.helpers.crash_topic_child",
            env={"CRASH_TOPIC": topic, "CRASH_MARKER": str(marker), **FAST_TURNS},
        )
        try:
            fake.use_http(child.events_url, SIGNING_SECRET)
            out = await fake.run_command(ALICE, GENERAL, f"declare {title} sev3")
            alerted = topic == "actions" and await _fire_alert(child, f"topiccrash{topic}")
            await eventually(lambda: child.proc.poll() is not None, timeout=30, what=f"the crash at {topic}")
        finally:
            await asyncio.to_thread(child.kill)
        assert child.proc.returncode == CRASH_EXIT, child.log_tail()
        assert marker.read_text().startswith(f"{topic} incident/"), marker.read_text()
        scope = marker.read_text().split()[1]
        acked = Acked(declares=[title] if out.status == 200 else [], alerts=[f"topiccrash{topic}"] if alerted else [])
        # committed entries must be delivered whatever the ack said
        assert any(r.kind in ("declared", "observation") for r in read_log(data)[scope].rows)

        run = CrashRun(fake, data, random.Random(11), workers=0)
        run.acked = acked
        served = await asyncio.to_thread(start_serve, data, fake.base_url, env=FAST_TURNS)
        try:
            fake.use_http(served.events_url, SIGNING_SECRET)
            verdict = await run.wait_complete(30)
            assert verdict.complete and not verdict.duplicates, verdict.describe()
            titles = [r.payload.get("title") for f in read_log(data).values() for r in f.rows if r.kind == "declared"]
            assert titles.count(title) == 1, titles
            check = EXTRA_CHECKS.get(topic)
            if check is not None:
                await check(served, data, scope, word)
            final = judge(data, fake, acked)
            assert final.ok, final.describe()
        finally:
            await asyncio.to_thread(served.stop)
