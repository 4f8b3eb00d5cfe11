"""Many replicas, one database (DESIGN §9: several ``decklog serve`` processes on one ``DECKLOG_DATABASE_URL``
behave as one). Three real replicas behind a round-robin load balancer take a mixed Slack + alert load; one is
SIGKILLed while it holds delivery cursors and is never restarted. Afterwards: every acknowledged request has
exactly its effects, no Slack message was posted twice, nothing is left in the outbox (the survivors delivered
what the dead one held), every chain verifies (``decklog verify --all``), and each alert fingerprint posted to two
replicas at once landed in one incident."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from pathlib import Path

import pytest

from decklog.adapters.local.slack import FakeSlack
from tests.helpers.balancer import Balancer
from tests.helpers.replica_load import ReplicaRun
from tests.helpers.serve import APP_TOKEN, BOT_TOKEN, ROOT, serve_env


@pytest.mark.slow
async def test_sigkill_of_one_of_three_replicas_under_load_loses_and_duplicates_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    rng = random.Random(20261201)
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake, Balancer() as balancer:
        run = ReplicaRun(fake, tmp_path / "data", rng, workers=6, database_url=pg_url, balancer=balancer)
        await run.start_replicas(3)
        try:
            acked = run.acked

            def enough() -> bool:  # every kind of request, and alerts sent to two replicas at once
                return acked.total >= 60 and all(acked.counts().values()) and len(run.pairs) >= 3

            killed = await run.load_and_kill(enough, lambda k: acked.total >= k.acked + 40)
            verdict = await run.wait_complete(timeout=120)  # the two survivors only: the dead one stays dead
            pairs = await run.pair_scopes()
        finally:
            await run.stop_all()
    assert killed.held, "the victim was never caught holding a delivery cursor"
    assert not verdict.lost, verdict.describe()
    assert not verdict.duplicates, verdict.describe()
    assert not sum(verdict.pending.values()) and not sum(verdict.parked.values()), verdict.describe()
    # the same fingerprint on two replicas at once: one incident, holding each acked notification
    split = {fp: scopes for fp, scopes in pairs.items() if len(set(scopes)) != 1}
    assert not split, split
    short = {fp: scopes for fp, scopes in pairs.items() if len(scopes) < run.pairs[fp]}
    assert not short, short
    cli = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "decklog.bot.cli", "verify", "--all"],
        env=serve_env(tmp_path / "data", fake.base_url, DECKLOG_DATABASE_URL=pg_url),
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
