"""The write API over real HTTP against ``decklog serve``: every write goes through the core doors Slack uses, a 2xx
is in the log, ``Idempotency-Key`` replays the first answer with nothing applied twice, a 4xx names the field,
scopes limit tokens, R2 parks and R4 is refused, approvals count only for a token acting for an approver, the
token's name is the actor of what it writes, failed authentication is rate-limited per peer, and cursors hold
while entries and scopes are added."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.adapters.local.services import FakeDeployService
from decklog.bot.config import DecklogConfig
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.core.tokens import Tokens
from tests.conftest import eventually, test_config

ADMIN = "admin-s3cret"
APPROVER = "U0APPROVER"


def config_with_r4() -> DecklogConfig:
    """The example catalog plus an R4 action (never offered for approval)."""
    data = test_config().model_dump()
    rollback = next(a for a in data["actions"] if a["name"] == "rollback_deploy")
    data["actions"] = (*data["actions"], {**rollback, "name": "drop_database", "risk": "R4", "compensation": None})
    data["actions"][-1].pop("compensation")
    return DecklogConfig.model_validate(data)


@pytest.fixture
async def deploy() -> AsyncIterator[FakeDeployService]:
    async with FakeDeployService() as fake:
        fake.record_deploy("payments", "r40")
        fake.record_deploy("payments", "r41")
        yield fake


@pytest.fixture
async def server(tmp_path: Path, deploy: FakeDeployService) -> AsyncIterator[DecklogServer]:
    settings = Settings(
        data_dir=tmp_path / "data",
        host="127.0.0.1",
        port=0,
        api_token=ADMIN,
        deploy_api_url=deploy.base_url,
        approvers=APPROVER,
    )
    srv = DecklogServer(settings, config=config_with_r4(), parts={"api", "actions"})
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def token(server: DecklogServer, name: str, scope: str, user: str = "") -> str:
    keys = server.runtime.api_keys
    assert keys is not None
    return await Tokens(keys).create(name, scope, user=user)


async def call(
    http: aiohttp.ClientSession,
    server: DecklogServer,
    method: str,
    path: str,
    secret: str = ADMIN,
    *,
    key: str | None = None,
    **kw: Any,
) -> tuple[int, Any, Any]:
    headers = {"Authorization": f"Bearer {secret}", **({"Idempotency-Key": key} if key else {})}
    async with http.request(method, server.url + path, headers=headers, **kw) as resp:
        return resp.status, await resp.json(), resp.headers


async def declare(http: aiohttp.ClientSession, server: DecklogServer, secret: str = ADMIN, **body: Any) -> str:
    status, out, _ = await call(http, server, "POST", "/api/scopes", secret, json={"title": "Payments 5xx", **body})
    assert status == 201, out
    return str(out["scope"])


async def test_each_write_appends_through_the_core_with_the_tokens_name_as_actor(
    server: DecklogServer, http: aiohttp.ClientSession
) -> None:
    ci = await token(server, "ci-canary", "write")
    scope = await declare(http, server, ci, severity=2, services=["payments"])
    base = f"/api/scopes/{scope}"
    entries = [
        {"kind": "message", "text": "canary failed on eu-1"},
        {"kind": "goal", "text": "restore checkout"},
        {"kind": "constraint", "text": "no deploys during the sale"},
        {"kind": "decision", "text": "roll back payments", "rationale": "r41 is the suspect"},
        {"kind": "hypothesis", "text": "r41 broke the pool", "confidence": 0.7},
        {"kind": "evidence", "text": "p99 went 80ms -> 900ms at 03:12"},
        {"kind": "obligation", "text": "confirm the pool size after the rollback"},
        {"kind": "follow_up", "text": "alert on pool saturation", "owner": "U0ALICE", "due": "2026-12-31"},
    ]
    for body in entries:
        status, out, _ = await call(http, server, "POST", base + "/entries", ci, json=body)
        assert status == 201, (body, out)
        assert [e["actor"]["name"] for e in out["entries"]] == ["ci-canary"]
    for path, body in (
        ("/severity", {"severity": 1, "reason": "checkout down"}),
        ("/status", {"status": "identified"}),
        ("/roles", {"role": "commander", "user_id": "U0ALICE", "user_name": "alice"}),
        ("/resolve", {"summary": "rolled back"}),
    ):
        status, out, _ = await call(http, server, "POST", base + path, ci, json=body)
        assert status == 200 and out["entries"], (path, out)
    mine = [e.kind for e in await server.runtime.store.read(scope) if e.actor.name == "ci-canary"]
    assert mine[:8] == [
        "declared",
        "message",
        "goal",
        "constraint",
        "decision",
        "hypothesis",
        "evidence",
        "obligation_opened",
    ]
    assert mine[8:12] == ["follow_up", "severity_changed", "status_changed", "role_assigned"]
    assert mine[12] == "status_changed"  # the resolve (and what it left open, in the same transaction)
    state = await server.runtime.store.get_state(scope)
    assert (state.status, state.severity, state.roles["commander"].user_id) == ("resolved", 1, "U0ALICE")
    # the read routes show what the writes did
    status, timeline, _ = await call(http, server, "GET", base + "/timeline?limit=1000", ci)
    assert status == 200
    assert [e["kind"] for e in timeline["entries"] if e["actor"]["name"] == "ci-canary"][: len(mine)] == mine


async def test_idempotency_key_replays_the_first_answer_and_applies_nothing_twice(
    server: DecklogServer, http: aiohttp.ClientSession
) -> None:
    scope = await declare(http, server)
    path = f"/api/scopes/{scope}/entries"
    body = {"kind": "message", "text": "once"}
    first = await call(http, server, "POST", path, key="retry-1", json=body)
    again = await asyncio.gather(*(call(http, server, "POST", path, key="retry-1", json=body) for _ in range(5)))
    assert first[0] == 201
    for status, out, headers in again:
        assert (status, out) == (first[0], first[1])
        assert headers.get("Idempotent-Replayed") == "true"
    texts = [e.payload.text for e in await server.runtime.store.read(scope) if e.kind == "message"]
    assert texts == ["once"]
    status, out, _ = await call(http, server, "POST", path, key="retry-1", json={"kind": "message", "text": "other"})
    assert status == 409 and out["error"].startswith("Idempotency-Key:")
    # a declaration too: one incident however often it is retried
    d1 = await call(http, server, "POST", "/api/scopes", key="declare-1", json={"title": "Search slow"})
    d2 = await call(http, server, "POST", "/api/scopes", key="declare-1", json={"title": "Search slow"})
    assert d1[1] == d2[1] and d1[0] == 201
    # the index is filled by its outbox sender after the commit: wait for it, then there is one scope, not two
    rows = await eventually(lambda: server.runtime.index.list_scopes(text="search"), timeout=10, what="the index")
    assert [r.id for r in rows] == [d1[1]["scope"]]


async def test_a_retry_after_the_answer_was_lost_appends_nothing_twice(
    server: DecklogServer, http: aiohttp.ClientSession
) -> None:
    """The append carries the key too: a retry whose first answer was never kept (a crash between the append and
    the kept reply) finds the entry and appends nothing."""
    scope = await declare(http, server)
    path = f"/api/scopes/{scope}/entries"
    status, first, _ = await call(http, server, "POST", path, key="lost", json={"kind": "goal", "text": "g"})
    assert status == 201
    keys = server.runtime.api_keys
    replies = getattr(keys, "engine", None)
    assert replies is not None  # the SQLite file: forget the kept answer, as a crash before it was stored would
    import sqlalchemy as sa

    with replies.begin() as conn:
        conn.execute(sa.text("DELETE FROM api_replies"))
    status, second, _ = await call(http, server, "POST", path, key="lost", json={"kind": "goal", "text": "g"})
    assert status == 201 and second["entries"][0]["seq"] == first["entries"][0]["seq"]
    assert sum(e.kind == "goal" for e in await server.runtime.store.read(scope)) == 1


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/scopes", {"title": ""}, "title"),
        ("/api/scopes", {"title": "x", "severity": 9}, "severity"),
        ("/api/scopes", {"title": "x", "colour": "red"}, "colour"),
        ("{scope}/entries", {"kind": "mood", "text": "x"}, "kind"),
        ("{scope}/entries", {"kind": "hypothesis", "text": "x", "confidence": 2}, "hypothesis.confidence"),
        ("{scope}/entries", {"kind": "follow_up", "text": "x", "due": "tomorrow"}, "follow_up.due"),
        ("{scope}/status", {"status": "sleeping"}, "status"),
        ("{scope}/roles", {"role": "1x", "user_id": "U1"}, "role"),
        ("{scope}/proposals", {"action": "rollback_deploy", "params": {"service": "NOT VALID!"}}, "service"),
    ],
)
async def test_bad_input_is_400_naming_the_field_and_appends_nothing(
    server: DecklogServer, http: aiohttp.ClientSession, path: str, body: dict[str, Any], field: str
) -> None:
    scope = await declare(http, server)
    before = len(await server.runtime.store.read(scope))
    target = path.replace("{scope}", f"/api/scopes/{scope}")
    status, out, _ = await call(http, server, "POST", target, json=body)
    assert status == 400 and field in out["error"], out
    assert len(await server.runtime.store.read(scope)) == before
    status, out, _ = await call(http, server, "POST", target, data=b"{not json")
    assert status == 400 and out["error"].startswith("body:")


async def test_scopes_limit_what_a_token_may_do_and_revoked_tokens_stop(
    server: DecklogServer, http: aiohttp.ClientSession
) -> None:
    reader = await token(server, "dashboards", "read")
    status, out, _ = await call(http, server, "POST", "/api/scopes", reader, json={"title": "x"})
    assert status == 403 and "read scope" in out["error"]
    assert (await call(http, server, "GET", "/api/scopes", reader))[0] == 200
    assert (await call(http, server, "GET", "/api/tokens", reader))[0] == 403
    status, listed, _ = await call(http, server, "GET", "/api/tokens")  # DECKLOG_API_TOKEN is an admin token
    assert status == 200 and [t["name"] for t in listed["tokens"]] == ["dashboards"]
    keys = server.runtime.api_keys
    assert keys is not None
    await Tokens(keys).revoke("dashboards")
    assert (await call(http, server, "GET", "/api/scopes", reader))[0] == 401


async def test_r2_parks_r4_is_refused_and_only_an_approvers_token_approves(
    server: DecklogServer, http: aiohttp.ClientSession
) -> None:
    ci = await token(server, "ci", "write")
    approver = await token(server, "oncall-lead", "write", user=APPROVER)
    other = await token(server, "someone", "write", user="U0OTHER")
    scope = await declare(http, server, ci, services=["payments"])
    base = f"/api/scopes/{scope}"
    status, r4, _ = await call(
        http,
        server,
        "POST",
        base + "/proposals",
        ci,
        json={"action": "drop_database", "params": {"service": "payments"}},
    )
    assert status == 201 and r4["status"] == "denied", r4
    status, r2, _ = await call(
        http,
        server,
        "POST",
        base + "/proposals",
        ci,
        json={"action": "rollback_deploy", "params": {"service": "payments"}},
    )
    assert status == 201 and r2["status"] == "waiting_for_approval", r2
    pid = r2["proposal_id"]
    for who in (ci, other):  # a system token, then a person who is not an approver
        status, out, _ = await call(http, server, "POST", f"{base}/proposals/{pid}/approve", who, json={})
        assert status == 403, out
    state = await server.runtime.store.get_state(scope)
    assert state.proposals[pid].status == "waiting_for_approval"
    status, out, _ = await call(http, server, "POST", f"{base}/proposals/{pid}/approve", approver, json={})
    assert status == 200 and out["outcome"] == "approved", out
    approvals = [e for e in await server.runtime.store.read(scope) if e.kind == "approval"]
    assert [(e.actor.id, e.actor.name) for e in approvals] == [(APPROVER, "oncall-lead")]


async def test_failed_authentication_is_rate_limited_per_peer(
    server: DecklogServer, http: aiohttp.ClientSession
) -> None:
    statuses = [(await call(http, server, "GET", "/api/scopes", "wrong"))[0] for _ in range(12)]
    assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
    status, out, headers = await call(http, server, "GET", "/api/scopes")  # the same peer, even with a good token
    assert status == 429 and int(headers["Retry-After"]) >= 1 and "failed attempts" in out["error"]


async def test_a_timeline_paged_while_entries_are_appended_shows_each_entry_once(
    server: DecklogServer, http: aiohttp.ClientSession
) -> None:
    scope = await declare(http, server)
    base = f"/api/scopes/{scope}"
    seen: list[int] = []
    after, n = 0, 0
    while True:
        if n < 30:  # a writer appends between every two pages
            for _ in range(3):
                await call(http, server, "POST", base + "/entries", json={"kind": "message", "text": f"m{n}"})
                n += 1
        status, page, _ = await call(http, server, "GET", f"{base}/timeline?after={after}&limit=4")
        assert status == 200
        seen += [e["seq"] for e in page["entries"]]
        if page["next"] is None:
            if n >= 30:
                break
            after = seen[-1] if seen else 0
            continue
        after = page["next"]
    assert seen == list(range(1, len(seen) + 1)) and len(seen) == len(await server.runtime.store.read(scope))


async def test_the_scope_list_pages_by_cursor_while_scopes_are_declared(
    server: DecklogServer, http: aiohttp.ClientSession
) -> None:
    first = [await declare(http, server, title=f"Old {i}") for i in range(7)]

    async def indexed() -> bool:  # the listing reads the index, which the index sender keeps behind the log
        return len(await server.runtime.index.list_scopes(text="old")) == 7

    await eventually(indexed, timeout=10, what="the 7 scopes in the index")
    seen: list[str] = []
    url = "/api/scopes?limit=3"
    while url:
        status, page, _ = await call(http, server, "GET", url)
        assert status == 200, page
        seen += [s["id"] for s in page["scopes"]]
        await declare(http, server, title=f"New {len(seen)}")  # newer: sorts before the cursor, never repeats
        url = page["next_url"]
    assert sorted(seen) == sorted(set(seen)) and set(first) <= set(seen)
    status, out, _ = await call(http, server, "GET", "/api/scopes?cursor=bm9wZQ")
    assert status == 400 and out["error"].startswith("cursor:")
