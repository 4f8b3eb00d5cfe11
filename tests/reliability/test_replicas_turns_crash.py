"""Two real replicas on one database: the replica running an incident's agent turn is SIGKILLed while its Claude
request hangs. The turn's ``due_turns`` row stays held by the dead process until its lease runs out (here moved to
the past on the database clock instead of waiting 30 s); then the survivor runs the turn (trigger ``takeover``), and
the row is gone once it has."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from decklog.adapters.local.slack import FakeSlack
from tests.conftest import eventually
from tests.fakes.anthropic_api import Delay, FakeAnthropic, Reply
from tests.helpers.pg_view import read_log_pg
from tests.helpers.serve import ALICE, APP_TOKEN, BOT_TOKEN, GENERAL, SIGNING_SECRET, Served, start_serve

SCOPE = "incident/orphaned-turn"


def _rows(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT scope_id, holder FROM due_turns").fetchall()


def _expire_leases(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE due_turns SET lease_until = extract(epoch from clock_timestamp()) - 1")


def _turns(url: str) -> list[dict[str, Any]]:
    log = read_log_pg(url).get(SCOPE)
    return [r.payload for r in log.rows if r.kind == "agent_turn"] if log else []


@pytest.mark.slow
async def test_sigkill_of_the_replica_running_a_turn_hands_it_to_the_survivor(tmp_path: Path, pg_url: str) -> None:
    steps: list[Any] = [Delay(600, then=Reply(text="late")), *[Reply(text="Nothing to add yet.") for _ in range(4)]]
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake, FakeAnthropic(steps) as claude:
        env = {
            "DECKLOG_DATABASE_URL": pg_url,
            "ANTHROPIC_API_KEY": "sk-test",
            "ANTHROPIC_BASE_URL": claude.base_url,
            "DECKLOG_FIRST_TURN_DELAY": "0.2",
            "DECKLOG_TURN_DEBOUNCE": "0.2",
        }
        replicas: list[Served] = []
        for i in range(2):
            replicas.append(await asyncio.to_thread(start_serve, tmp_path / f"replica{i}", fake.base_url, env=env))
        try:
            fake.use_http(f"{replicas[0].url}/slack/events", SIGNING_SECRET)
            out = await fake.run_command(ALICE, GENERAL, "declare Orphaned turn sev2")
            assert out.status == 200
            await claude.wait_for_requests(1, timeout=30)  # a replica's turn hangs in "Claude"
            [(scope, holder)] = await eventually(lambda: _rows(pg_url), what="the held due row", timeout=10)
            assert scope == SCOPE and holder
            victim = next(r for r in replicas if f":{r.pid}:" in holder)
            survivor = next(r for r in replicas if r is not victim)
            await asyncio.to_thread(victim.kill)
            assert _rows(pg_url) == [(SCOPE, holder)]  # still the dead one's: nothing else runs the turn
            await asyncio.to_thread(_expire_leases, pg_url)
            turns = await eventually(lambda: _turns(pg_url), what="the survivor's turn", timeout=30)
            await eventually(lambda: not _rows(pg_url), what="the due row gone", timeout=30)
        finally:
            for r in replicas:
                await asyncio.to_thread(r.stop)
    assert turns[0]["trigger"] == "takeover", (turns, survivor.log_tail())
    assert len(claude.requests) >= 2
