"""``kill -USR1`` on ``decklog serve`` writes every task's and thread's stack to its log and leaves it serving."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from decklog.adapters.local.slack import FakeSlack
from tests.helpers.serve import BOT_TOKEN, start_serve


async def test_sigusr1_dumps_tasks_and_threads_and_the_server_goes_on(tmp_path: Path) -> None:
    async with FakeSlack(bot_token=BOT_TOKEN) as fake:
        served = await asyncio.to_thread(start_serve, tmp_path / "data", fake.base_url)
        try:
            dump = await asyncio.to_thread(served.dump)
            assert dump.startswith("decklog: task dump: "), served.log_tail()
            assert "--- task " in dump and "Current thread" in dump  # asyncio's tasks, then faulthandler's threads
            async with aiohttp.ClientSession() as http, http.get(f"{served.url}/healthz") as resp:
                assert resp.status == 200
        finally:
            assert await asyncio.to_thread(served.stop) == 0
