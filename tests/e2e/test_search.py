"""Search past incidents: ``GET /api/search`` on SQLite and PostgreSQL, its bad input fuzzed,
and ``/incident search`` end to end through the fake Slack (an ephemeral answer)."""

from __future__ import annotations

import random
import string
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from decklog.bot.server import DecklogServer
from decklog.core.entries import Actor, NewEntry
from tests.conftest import eventually
from tests.e2e.test_api import get, quiet_servers

ALICE = Actor.human("U0ALICE", "alice")


@pytest.fixture(params=["sqlite", "postgresql"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DecklogServer]:
    extra: dict[str, Any] = {}
    if request.param == "postgresql":
        extra["database_url"] = request.getfixturevalue("pg_url")
    async with quiet_servers(tmp_path) as make:
        yield await make(**extra)


async def seed(server: DecklogServer) -> None:
    svc, store = server.runtime.service, server.runtime.store
    await svc.declare(title="Payments 5xx elevated", severity=1, scope="incident/payments", actor=ALICE)
    await svc.declare(title="Search latency", severity=3, scope="incident/search", actor=ALICE)
    await svc.declare(title="Payments deploy", scope="change/r1", actor=Actor.system("deploys"), kind="change")
    await store.append("incident/payments", [NewEntry.make("message", ALICE, {"text": "the LB drains pgbouncer"})])
    await store.append("incident/search", [NewEntry.make("hypothesis", ALICE, {"text": "pgbouncer pool is full"})])
    await store.append("incident/search", [NewEntry.make("decision", ALICE, {"text": "roll back elastic 8.14"})])

    async def indexed() -> bool:
        return len(await server.runtime.index.search("pgbouncer elastic", limit=10)) >= 3

    await eventually(indexed, what="the index to catch up")


async def test_api_search_shape_and_scope(server: DecklogServer) -> None:
    await seed(server)
    async with aiohttp.ClientSession() as http:
        status, body, _ = await get(http, server, "/api/search?q=pgbouncer")
        assert status == 200, body
        results = body["results"]
        assert {r["scope"] for r in results} == {"incident/payments", "incident/search"}
        for r in results:
            assert set(r) == {"scope", "title", "seq", "kind", "snippet"}
            assert isinstance(r["seq"], int) and "pgbouncer" in r["snippet"].lower()
        by_scope = {r["scope"]: r for r in results}
        assert by_scope["incident/search"]["kind"] == "hypothesis"
        assert by_scope["incident/search"]["title"] == "Search latency"
        assert by_scope["incident/payments"]["kind"] == "message"

        status, body, _ = await get(http, server, "/api/search?q=payments&limit=5")
        assert status == 200
        assert [r["scope"] for r in body["results"]] == ["incident/payments"]  # the title; never the change
        assert body["results"][0]["kind"] == "declared"

        status, body, _ = await get(http, server, "/api/search?q=elastic&limit=1")
        assert [(r["scope"], r["kind"]) for r in body["results"]] == [("incident/search", "decision")]

        status, body, _ = await get(http, server, "/api/search?q=nothinglikethis")
        assert status == 200 and body == {"results": []}


BAD = [
    "",
    "q=",
    "q=%20%20",
    "q=!",
    "q=a",
    "q=x&limit=0",
    "q=x&limit=51",
    "q=x&limit=-1",
    "q=x&limit=ten",
    "q=pg&q=pg",
    "q=pg&other=1",
    "q=" + "a" * 201,
]


async def test_api_search_bad_input_is_400_with_a_reason(tmp_path: Path) -> None:
    rng = random.Random(18)
    fuzzed = []
    for _ in range(20):
        junk = "".join(rng.choice(string.punctuation + " ") for _ in range(rng.randint(1, 30)))
        fuzzed.append("q=" + quote(junk, safe=""))
        fuzzed.append("q=pg&limit=" + quote(junk, safe=""))
    async with quiet_servers(tmp_path) as make:
        server = await make()
        before = await server.runtime.store.scope_ids()
        async with aiohttp.ClientSession() as http:
            for query in BAD + fuzzed:
                status, body, _ = await get(http, server, f"/api/search?{query}")
                assert status == 400, (query, body)
                assert isinstance(body["error"], str) and body["error"], query
        assert await server.runtime.store.scope_ids() == before  # nothing recorded


async def test_slash_search_answers_ephemerally(tmp_path: Path) -> None:
    async with quiet_servers(tmp_path) as make:
        server = await make()
        await seed(server)
        fake = server.sandbox
        await fake.run_command("U0BOB", "C0GENERAL", "search pgbouncer")

        def answer() -> Any:
            return next((r for r in fake.server.responses if "Matches for" in r.body.get("text", "")), None)

        found = await eventually(answer, what="the ephemeral search answer")
        assert found.body["response_type"] == "ephemeral"
        text = found.body["text"]
        assert "incident/search" in text and "Search latency" in text and "incident/payments" in text
        await fake.run_command("U0BOB", "C0GENERAL", "search")
        await eventually(
            lambda: any("needs words" in json_text(r.body) for r in fake.server.responses), what="the usage"
        )


def json_text(body: dict[str, Any]) -> str:
    import json

    return json.dumps(body)
