"""Real ``decklog serve`` processes, SIGKILLed: a reasoner's wake-up and a person's question outlive the process
that armed them.

- The rules reasoner's first turn asks for a look in ~20 minutes (the idle nudge). Every server is SIGKILLed; the
  stored wake-up (SQLite: the scope's ``agents``/``wake`` memo; PostgreSQL: its ``due_turns`` row) is moved to the
  past, as if the 20 minutes had gone by; after the restart (two replicas on PostgreSQL) exactly one forced turn
  (trigger ``wake``) runs, and it stores the next wake-up.
- Two replicas on PostgreSQL: the replica answering a question is SIGKILLed while its Claude request hangs; once
  its lease on the scope's row runs out (moved to the past) the other replica answers, once, in the thread.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from decklog.adapters.local.slack import FakeSlack
from tests.conftest import eventually
from tests.fakes.anthropic_api import Delay, FakeAnthropic, Reply
from tests.helpers.log_view import read_log
from tests.helpers.pg_view import read_log_pg
from tests.helpers.serve import ALICE, APP_TOKEN, BOT_TOKEN, GENERAL, SIGNING_SECRET, Served, start_serve

FAST = {"DECKLOG_FIRST_TURN_DELAY": "0.2", "DECKLOG_TURN_DEBOUNCE": "0.2"}


def _sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def _scope_file(data: Path) -> Path | None:
    files = sorted((data / "scopes").glob("incident~*.db"))
    return files[0] if files else None


def _memo_at(data: Path) -> float | None:
    """The stored wake-up's due time (epoch seconds) of the one incident in ``data``, if any."""
    path = _scope_file(data)
    if path is None:
        return None
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT value FROM sender_memo WHERE topic = 'agents' AND key = 'wake'").fetchone()
    finally:
        db.close()
    return None if row is None else json.loads(row[0]).get("at")


def _move_memo(data: Path, at: float) -> None:
    path = _scope_file(data)
    assert path is not None
    db = sqlite3.connect(path)
    try:
        db.execute(
            "UPDATE sender_memo SET value = ? WHERE topic = 'agents' AND key = 'wake'", (json.dumps({"at": at}),)
        )
        db.commit()
    finally:
        db.close()


def _wake_in(url: str) -> float | None:
    """Seconds until the stored wake-up of the free due row (None: no such row)."""
    rows = _sql(url, "SELECT wake_at - extract(epoch from clock_timestamp()) FROM due_turns WHERE holder IS NULL")
    return float(rows[0][0]) if rows and rows[0][0] is not None else None


def _turns(log: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        r.payload for f in log.values() if f.scope.startswith("incident/") for r in f.rows if r.kind == "agent_turn"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_wake_up_armed_before_a_sigkill_runs_once_after_the_restart(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else ""
    env = {**FAST, **({"DECKLOG_DATABASE_URL": url} if url else {})}
    dirs = [tmp_path / f"replica{i}" for i in range(2 if url else 1)]

    def log() -> dict[str, Any]:
        return read_log_pg(url) if url else read_log(dirs[0])

    def stored() -> float | None:  # seconds until the stored wake-up
        if url:
            return _wake_in(url)
        at = _memo_at(dirs[0])
        return None if at is None else at - time.time()

    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake:
        replicas = [await asyncio.to_thread(start_serve, d, fake.base_url, env=env) for d in dirs]
        try:
            fake.use_http(replicas[0].events_url, SIGNING_SECRET)
            assert (await fake.run_command(ALICE, GENERAL, "declare Quiet for now sev3")).status == 200
            await eventually(lambda: _turns(log()), what="the first turn", timeout=30)
            first = await eventually(stored, what="the idle nudge's wake-up stored", timeout=30)
            assert 0 < first <= 20 * 60
        finally:
            for r in replicas:
                await asyncio.to_thread(r.kill)
        assert [t["trigger"] for t in _turns(log())] == ["first"]
        if url:  # twenty minutes later
            _sql(url, "UPDATE due_turns SET wake_at = extract(epoch from clock_timestamp()) - 1")
        else:
            _move_memo(dirs[0], time.time() - 1)
        replicas = [await asyncio.to_thread(start_serve, d, fake.base_url, env=env) for d in dirs]
        try:
            fake.use_http(replicas[0].events_url, SIGNING_SECRET)
            await eventually(lambda: len(_turns(log())) == 2, what="the wake-up's turn after the restart", timeout=30)
            again = await eventually(lambda: (stored() or 0) > 0, what="the next wake-up stored", timeout=30)
            assert again
        finally:
            for r in replicas:
                await asyncio.to_thread(r.stop)
    assert [t["trigger"] for t in _turns(log())] == ["first", "wake"], [r.log_tail() for r in replicas]


@pytest.mark.slow
async def test_a_question_whose_replica_died_mid_answer_is_answered_once_by_the_other(
    tmp_path: Path, pg_url: str
) -> None:
    answer = "The pool size changed in the last deploy."
    steps: list[Any] = [Delay(600, then=Reply(text="late")), *[Reply(text=answer) for _ in range(4)]]
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake, FakeAnthropic(steps) as claude:
        env = {"DECKLOG_DATABASE_URL": pg_url, "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": claude.base_url}
        replicas: list[Served] = []
        for i in range(2):  # scheduled turns wait an hour (tests/helpers/serve.py): only the answer calls Claude
            replicas.append(await asyncio.to_thread(start_serve, tmp_path / f"replica{i}", fake.base_url, env=env))
        try:
            fake.use_http(replicas[0].events_url, SIGNING_SECRET)
            assert (await fake.run_command(ALICE, GENERAL, "declare Ask me sev2")).status == 200
            [(scope,)] = await eventually(
                lambda: _sql(pg_url, "SELECT scope_id FROM scope_heads WHERE scope_id LIKE 'incident/%'"),
                what="the incident",
            )
            assert (await fake.run_command(ALICE, GENERAL, f"ask {scope} what changed?")).status == 200
            await claude.wait_for_requests(1, timeout=30)  # one replica's answer hangs in "Claude"
            [(holder,)] = _sql(pg_url, "SELECT holder FROM due_turns WHERE holder IS NOT NULL")
            victim = next(r for r in replicas if f":{r.pid}:" in holder)
            survivor = next(r for r in replicas if r is not victim)
            await asyncio.to_thread(victim.kill)
            assert len(claude.requests) == 1  # the other replica waits for the row
            _sql(pg_url, "UPDATE due_turns SET lease_until = extract(epoch from clock_timestamp()) - 1")

            def answers() -> list[Any]:
                return [m for m in fake.workspace.history(GENERAL) if answer in m.text] + [
                    m
                    for root in fake.workspace.history(GENERAL)
                    for m in fake.workspace.thread(GENERAL, root.ts)
                    if m.ts != root.ts and answer in m.text
                ]

            await eventually(answers, what="the survivor's answer in Slack", timeout=30)
            held = "SELECT 1 FROM due_turns WHERE ask_at IS NOT NULL OR holder IS NOT NULL"  # the debounce (1 h) stays
            await eventually(lambda: not _sql(pg_url, held), what="the question done, the row free", timeout=30)
        finally:
            for r in replicas:
                await asyncio.to_thread(r.stop)
    rows = read_log_pg(pg_url)[scope].rows
    assert [r.kind for r in rows].count("answer") == 1 and [r.kind for r in rows].count("question") == 1
    assert [r.payload["text"] for r in rows if r.kind == "answer"] == [answer], survivor.log_tail()
    assert len(answers()) == 1 and len(claude.requests) == 2
