"""SIGKILL ``decklog serve`` 20+ times under a mixed Slack + alert load (HTTP and Socket Mode), restarting each
time: every acknowledged request has exactly its effects afterwards, no Slack message is posted twice, nothing
stays in the outbox, and every scope verifies (DESIGN §9: a 2xx or a Socket Mode ack means durable)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from pathlib import Path

import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.bot.runtime import OUTBOX_TOPICS
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.helpers.log_view import read_log
from tests.helpers.mixed_load import CrashRun
from tests.helpers.serve import APP_TOKEN, BOT_TOKEN, ROOT, serve_env

CYCLES = 20


@pytest.mark.slow
async def test_sigkill_under_mixed_slack_and_alert_load_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    rng = random.Random(20261211)
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake:
        run = CrashRun(fake, data, rng, workers=6, socket_every=3)
        for _ in range(CYCLES):
            await run.cycle(kill_after=0.4 + rng.random() * 1.2)
        acked = run.acked
        assert sum(c.socket for c in run.cycles) >= 5, "too few Socket Mode cycles"
        counts = acked.counts()
        assert acked.total >= 100 and all(counts.values()), f"the load acked too little to prove anything: {counts}"
        running, verdict, final = await run.settle(timeout=90)
    # Inside the final server every acked effect arrived and the outbox drained; otherwise name the tasks of its
    # dump (kill -USR1) that mention the first stuck scope.
    dump = data.parent / "stuck-dump.txt"
    assert running.complete, (
        f"{running.describe()}\n"
        f"{_tasks_naming(dump.read_text() if dump.exists() else '', (running.stuck or ['?'])[0].split()[0])}"
    )
    assert not verdict.lost, verdict.describe()
    assert not verdict.duplicates, verdict.describe()
    assert not sum(verdict.pending.values()) and not sum(verdict.parked.values()), (
        f"{verdict.describe()}\nthe final server's log:\n{final.log_tail(60)}"
    )

    scopes = sorted(read_log(data))
    store = SqliteLogStore(data, topics=OUTBOX_TOPICS)
    try:
        failed = [(s, r) for s in scopes if not (r := await store.verify(s)).ok]
    finally:
        await store.close()
    assert not failed, failed
    # and the CLI says the same for one of them
    cli = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "decklog.bot.cli", "verify", scopes[-1]],
        env=serve_env(data, fake.base_url),
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr


def _tasks_naming(dump: str, scope: str, limit: int = 80) -> str:
    """The blocks of a task dump (bot/diagnostics.py) that name ``scope``: what its stuck work waits on."""
    blocks = dump.split("--- task ")
    found = ["--- task " + b.strip() for b in blocks[1:] if scope in b]
    return "\n".join("\n".join(found).splitlines()[:limit]) or "(no task names the scope)"
