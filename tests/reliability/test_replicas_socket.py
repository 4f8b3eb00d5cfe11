"""Two ``decklog serve`` replicas on one PostgreSQL database, both in Socket Mode (the real slack-bolt Socket Mode
client, unchanged, pointed at the fake): the fake spreads envelopes over the app's two connections, as Slack does,
and redelivers an event on the other connection (an ack Slack did not get). Every message is recorded once, and
the redelivered mention once, with one reply in the thread."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.local.slack import FakeSlack
from tests.conftest import eventually
from tests.helpers.pg_view import read_log_pg
from tests.helpers.serve import ALICE, APP_TOKEN, BOT_TOKEN, GENERAL, Served, start_serve

MESSAGES = 6


def _header(fake: FakeSlack) -> Any:
    found = [m for m in fake.workspace.history(GENERAL) if (m.metadata or {}).get("event_type") == "decklog_header"]
    return found[0] if found else None


def _kinds(url: str) -> list[tuple[str, dict[str, Any]]]:
    return [(r.kind, r.payload) for f in read_log_pg(url).values() if f.scope.startswith("incident/") for r in f.rows]


@pytest.mark.slow
async def test_two_socket_mode_replicas_share_the_envelopes_and_a_redelivery_is_processed_once(
    tmp_path: Path, pg_url: str
) -> None:
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake:
        await fake.use_socket_mode()
        hub = fake.server.socket
        hub.spread = True
        replicas: list[Served] = []
        try:
            for i in range(2):
                replicas.append(
                    await asyncio.to_thread(
                        start_serve,
                        tmp_path / f"replica{i}",
                        fake.base_url,
                        socket=True,
                        env={"DECKLOG_DATABASE_URL": pg_url},
                    )
                )
            await eventually(lambda: hub.connections == 2, what="both replicas connected", timeout=30)
            assert (await fake.run_command(ALICE, GENERAL, "declare Socket replicas sev2")).status == 200
            header = await eventually(lambda: _header(fake), what="the incident's header", timeout=30)
            sent_before = len(hub.sent)
            for n in range(MESSAGES):
                await fake.post_message(ALICE, GENERAL, f"socket update {n}", thread_ts=header.ts)
            carriers = {hub.carried[e["envelope_id"]] for e in hub.sent[sent_before:]}
            assert len(carriers) == 2, carriers  # spread over both replicas' connections

            await fake.post_message(
                ALICE, GENERAL, "@decklog decision fail over to the backup psp", thread_ts=header.ts
            )
            mention = next(d for d in reversed(fake.deliveries) if d.kind == "events_api")
            first = hub.carried[hub.sent[-1]["envelope_id"]]
            again = await fake.redeliver(mention, retry_num=1, retry_reason="timeout")
            assert again.status == 200  # acked by the other replica ...
            assert hub.carried[hub.sent[-1]["envelope_id"]] != first  # ... on the other connection

            def texts() -> list[str]:
                return [str(p.get("text", "")) for k, p in _kinds(pg_url) if k == "message"]

            def updates() -> list[str]:
                return sorted(t for t in texts() if t.startswith("socket update"))

            await eventually(lambda: len(updates()) >= MESSAGES, what="every message recorded", timeout=30)
            decisions = await eventually(
                lambda: [p for k, p in _kinds(pg_url) if k == "decision"], what="the decision", timeout=30
            )

            def replies() -> list[Any]:
                return [
                    m
                    for m in fake.workspace.thread(GENERAL, header.ts)
                    if m.user != ALICE and "fail over to the backup psp" in m.text
                ]

            await eventually(replies, what="the decision's reply in the thread", timeout=30)
        finally:
            for r in replicas:
                await asyncio.to_thread(r.stop)
        assert len(decisions) == 1, decisions
        assert updates() == [f"socket update {n}" for n in range(MESSAGES)]
        assert len(replies()) == 1, [m.text for m in fake.workspace.thread(GENERAL, header.ts)]
