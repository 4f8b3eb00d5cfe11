"""The read-only REST API over real HTTP: listing and filters, one scope, timeline pagination, reports, and every
error as JSON with its status (400 naming the parameter, 401 with a Bearer challenge, 404, 405)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from pydantic import SecretStr

from decklog.adapters.http.api import ScopesApi
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.core.entries import Actor, NewEntry
from tests.conftest import ServerFactory, eventually, test_config
from tests.fakes.slack_calls import record_sandbox_calls

ALICE = Actor.human("U0ALICE", "alice")
PAYMENTS = "incident/payments-5xx"


@asynccontextmanager
async def quiet_servers(tmp_path: Path) -> AsyncIterator[ServerFactory]:
    """``decklog serve`` (sandbox Slack) with only the API and the report export wired: no agent or action
    feature appends to the logs meanwhile, so counts and report bytes stay put while a test looks at them."""
    started: list[DecklogServer] = []

    async def make(**settings: Any) -> DecklogServer:
        values: dict[str, Any] = {"data_dir": tmp_path / "data", "host": "127.0.0.1", "port": 0, **settings}
        server = DecklogServer(
            Settings(**values), config=test_config(), parts={"api", "reports"}, on_built=record_sandbox_calls
        )
        await server.start()
        started.append(server)
        return server

    try:
        yield make
    finally:
        for server in reversed(started):
            await server.stop()


@pytest.fixture
async def make_server(tmp_path: Path) -> AsyncIterator[ServerFactory]:
    async with quiet_servers(tmp_path) as make:
        yield make


@pytest.fixture
async def server(make_server: ServerFactory) -> DecklogServer:
    return await make_server()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get(http: aiohttp.ClientSession, server: DecklogServer, path: str, **kw: Any) -> tuple[int, Any, Any]:
    async with http.get(server.url + path, **kw) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.read()
        return resp.status, body, resp.headers


async def seed(server: DecklogServer, messages: int = 0) -> None:
    svc = server.runtime.service
    await svc.declare(title="Payments 5xx", severity=1, scope=PAYMENTS, actor=ALICE, services=["payments"])
    await svc.declare(title="Search slow", severity=3, scope="incident/search-slow", actor=ALICE)
    await svc.declare(title="r2026-09-19-4", scope="change/r2026-09-19-4", actor=Actor.system("deploys"), kind="change")
    await svc.resolve("incident/search-slow", ALICE)
    for n in range(messages):
        await server.runtime.store.append(PAYMENTS, [NewEntry.make("message", ALICE, {"text": f"note {n}"})])

    async def indexed() -> bool:
        rows = await server.runtime.index.list_scopes()
        return (
            len(rows) == 3 and all(r.status != "reserved" for r in rows) and any(r.status == "resolved" for r in rows)
        )

    await eventually(indexed, what="the index to catch up")

    async def threaded() -> bool:  # the sandbox's Slack sender links a thread: one more entry, appended later
        return (await server.runtime.store.get_state(PAYMENTS)).thread is not None

    await eventually(threaded, what="the header's thread")


# -- listing -----------------------------------------------------------------------------------------------------


async def test_list_scopes_with_filters(server: DecklogServer, http: aiohttp.ClientSession) -> None:
    await seed(server)
    status, body, _ = await get(http, server, "/api/scopes")
    assert status == 200 and body["count"] == 3
    assert {s["id"] for s in body["scopes"]} == {PAYMENTS, "incident/search-slow", "change/r2026-09-19-4"}
    row = next(s for s in body["scopes"] if s["id"] == PAYMENTS)
    assert row["severity"] == 1 and row["services"] == ["payments"] and row["kind"] == "incident"

    async def ids(query: str) -> list[str]:
        status, body, _ = await get(http, server, "/api/scopes?" + query)
        assert status == 200, body
        return sorted(s["id"] for s in body["scopes"])

    assert await ids("kind=change") == ["change/r2026-09-19-4"]
    assert await ids("status=resolved") == ["incident/search-slow"]
    assert await ids("kind=incident&status=open") == [PAYMENTS]
    assert await ids("severity=sev1") == [PAYMENTS]
    assert await ids("severity=3") == ["incident/search-slow"]
    assert await ids("text=SEARCH") == ["incident/search-slow"]
    assert await ids("limit=1") in ([PAYMENTS], ["incident/search-slow"], ["change/r2026-09-19-4"])


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("kind=deploy", "kind"),
        ("status=sleeping", "status"),
        ("severity=9", "severity"),
        ("severity=", "severity"),
        ("limit=0", "limit"),
        ("limit=ten", "limit"),
        ("sevrity=1", "sevrity"),
        ("kind=incident&kind=change", "kind"),
    ],
)
async def test_list_scopes_bad_parameters_are_400_naming_them(
    server: DecklogServer, http: aiohttp.ClientSession, query: str, names: str
) -> None:
    status, body, headers = await get(http, server, "/api/scopes?" + query)
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    assert body["error"].startswith(f"{names}: "), body


# -- one scope -----------------------------------------------------------------------------------------------------


async def test_get_one_scope(server: DecklogServer, http: aiohttp.ClientSession) -> None:
    await seed(server)
    await server.runtime.service.link(PAYMENTS, "change/r2026-09-19-4", ALICE, relation="suspected_cause")
    status, body, _ = await get(http, server, f"/api/scopes/{PAYMENTS}")
    assert status == 200
    assert (body["id"], body["title"], body["status"], body["severity"]) == (
        PAYMENTS,
        "Payments 5xx",
        "investigating",
        1,
    )
    assert body["linked"] == ["change/r2026-09-19-4"]
    assert body["links"]["timeline"] == f"/api/scopes/{PAYMENTS}/timeline"
    assert body["links"]["reports"]["html"] == f"/api/scopes/{PAYMENTS}/report.html"


@pytest.mark.parametrize("path", ["incident/nope", "deploy/payments-5xx", "incident/-bad", "incident/a b"])
async def test_unknown_scope_is_404(server: DecklogServer, http: aiohttp.ClientSession, path: str) -> None:
    await seed(server)
    for suffix in ("", "/timeline", "/report.md"):
        status, body, _ = await get(http, server, f"/api/scopes/{path}{suffix}")
        assert status == 404 and "no such scope" in body["error"], (path, suffix, body)


# -- timeline ------------------------------------------------------------------------------------------------------


async def test_timeline_pages_with_after_limit_and_next(server: DecklogServer, http: aiohttp.ClientSession) -> None:
    await seed(server, messages=23)  # declared, 23 messages, thread_linked (in some order)
    total = len(await server.runtime.store.read(PAYMENTS))
    assert total == 25
    seqs: list[int] = []
    path: str | None = f"/api/scopes/{PAYMENTS}/timeline?limit=10"
    pages = 0
    while path is not None:
        status, body, _ = await get(http, server, path)
        assert status == 200, body
        seqs += [e["seq"] for e in body["entries"]]
        pages += 1
        if body["next"] is not None:
            assert body["next"] == body["entries"][-1]["seq"]
            assert body["next_url"] == f"/api/scopes/{PAYMENTS}/timeline?after={body['next']}&limit=10"
        path = body["next_url"]
    assert seqs == list(range(1, total + 1)) and pages == 3
    status, body, _ = await get(http, server, f"/api/scopes/{PAYMENTS}/timeline?after=20&limit=5")
    assert [e["seq"] for e in body["entries"]] == [21, 22, 23, 24, 25] and body["next"] is None
    first = next(e for e in body["entries"] if e["kind"] == "message")
    assert set(first) >= {"seq", "id", "kind", "at", "actor", "text", "payload", "refs"}
    assert first["actor"] == {"type": "human", "id": "U0ALICE", "name": "alice"}
    assert first["payload"]["text"].startswith("note ") and first["text"] == f"alice: {first['payload']['text']}"
    status, body, _ = await get(http, server, f"/api/scopes/{PAYMENTS}/timeline?after=999")
    assert (status, body["entries"], body["next"]) == (200, [], None)
    status, body, _ = await get(http, server, f"/api/scopes/{PAYMENTS}/timeline?kind=declared,severity_changed")
    assert [e["kind"] for e in body["entries"]] == ["declared"]


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("after=abc", "after"),
        ("after=-1", "after"),
        ("after=1.5", "after"),
        ("after=99999999999999999999", "after"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=", "limit"),
        ("kind=nonsense", "kind"),
        ("cursor=3", "cursor"),
    ],
)
async def test_timeline_bad_parameters_are_400_naming_them(
    server: DecklogServer, http: aiohttp.ClientSession, query: str, name: str
) -> None:
    await seed(server)
    status, body, _ = await get(http, server, f"/api/scopes/{PAYMENTS}/timeline?{query}")
    assert status == 400 and body["error"].startswith(f"{name}: "), body


# -- reports -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "content_type"),
    [("md", "text/markdown"), ("json", "application/json"), ("html", "text/html")],
)
async def test_report_is_served_with_its_type_and_digest_and_appends_nothing(
    server: DecklogServer, http: aiohttp.ClientSession, fmt: str, content_type: str
) -> None:
    await seed(server)
    before = await server.runtime.store.read(PAYMENTS)
    path = f"/api/scopes/{PAYMENTS}/report.{fmt}"
    async with http.get(server.url + path) as resp:
        first, headers = await resp.read(), resp.headers
        assert resp.status == 200 and resp.content_type == content_type
    async with http.get(server.url + path) as resp:
        assert await resp.read() == first  # byte-identical
    import hashlib

    digest = hashlib.sha256(first).hexdigest()
    assert headers["ETag"] == f'"{digest}"' and headers["X-Decklog-Report-Sha256"] == digest
    assert "incident-payments-5xx-report." + fmt in headers["Content-Disposition"]
    async with http.get(server.url + path, headers={"If-None-Match": f'"{digest}"'}) as resp:
        assert resp.status == 304
    async with http.head(server.url + path) as resp:
        assert resp.status == 200 and await resp.read() == b""
    assert await server.runtime.store.read(PAYMENTS) == before  # a GET is a read: no report_exported


async def test_unknown_report_format_is_404(server: DecklogServer, http: aiohttp.ClientSession) -> None:
    await seed(server)
    status, body, _ = await get(http, server, f"/api/scopes/{PAYMENTS}/report.pdf")
    assert status == 404 and "report format" in body["error"]


# -- methods, routes, tokens ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
async def test_wrong_method_is_405_with_allow(server: DecklogServer, http: aiohttp.ClientSession, method: str) -> None:
    await seed(server)
    for path in ("/api/scopes", f"/api/scopes/{PAYMENTS}", f"/api/scopes/{PAYMENTS}/timeline"):
        if method == "POST" and path == "/api/scopes":
            continue  # declares (the write API: tests/e2e/test_api_writes.py)
        allow = "GET, POST, HEAD" if path == "/api/scopes" else "GET, HEAD"
        async with http.request(method, server.url + path, json={}) as resp:
            assert resp.status == 405 and resp.headers["Allow"] == allow
            assert "not allowed" in (await resp.json())["error"]


@pytest.mark.parametrize("path", ["/api/scopes/", f"/api/scopes/{PAYMENTS}/nothing", "/api/nothing", "/api"])
async def test_unknown_route_is_404_json(server: DecklogServer, http: aiohttp.ClientSession, path: str) -> None:
    status, body, _ = await get(http, server, path)
    assert status == 404 and isinstance(body, dict) and body["error"]


async def test_api_token_requires_a_bearer(make_server: ServerFactory, http: aiohttp.ClientSession) -> None:
    server = await make_server(api_token="s3cret-token")
    await seed(server)
    for headers in ({}, {"Authorization": "Basic czNjcmV0"}, {"Authorization": "Bearer"}):
        status, body, got = await get(http, server, "/api/scopes", headers=headers)
        assert status == 401 and got["WWW-Authenticate"].startswith("Bearer") and body["error"]
    status, body, got = await get(http, server, "/api/scopes", headers={"Authorization": "Bearer wrong"})
    assert status == 401 and 'error="invalid_token"' in got["WWW-Authenticate"]
    for path in ("/api/scopes", f"/api/scopes/{PAYMENTS}", f"/api/scopes/{PAYMENTS}/report.md"):
        status, _, _ = await get(http, server, path)
        assert status == 401, path
        status, _, _ = await get(http, server, path, headers={"Authorization": "Bearer s3cret-token"})
        assert status == 200, path
    status, _, _ = await get(http, server, "/healthz")
    assert status == 200  # only the API is guarded


async def test_api_is_open_without_a_token(server: DecklogServer, http: aiohttp.ClientSession) -> None:
    status, body, _ = await get(http, server, "/api/scopes")
    assert (status, body) == (200, {"scopes": [], "count": 0, "more": False, "next": None, "next_url": None})


async def test_api_token_guards_every_api_path_even_unknown_ones(
    make_server: ServerFactory, http: aiohttp.ClientSession
) -> None:
    server = await make_server(api_token="s3cret-token")
    for path in ("/api", "/api/nothing", "/api/scopes/", f"/api/scopes/{PAYMENTS}/nothing"):
        status, body, got = await get(http, server, path)
        assert status == 401 and got["WWW-Authenticate"].startswith("Bearer") and body["error"], path
        status, body, _ = await get(http, server, path, headers={"Authorization": "Bearer s3cret-token"})
        assert status == 404 and "no such API route" in body["error"], path


@pytest.mark.parametrize("headers", [{"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"}])
async def test_without_a_token_a_proxied_request_is_401_with_the_reason(
    server: DecklogServer, http: aiohttp.ClientSession, headers: dict[str, str]
) -> None:
    """A proxy on the same host makes every client look loopback: forwarded requests are not answered."""
    for path in ("/api/scopes", "/api/nothing"):
        status, body, got = await get(http, server, path, headers=headers)
        assert status == 401 and got["WWW-Authenticate"].startswith("Bearer"), path
        assert "proxy" in body["error"] and "DECKLOG_API_TOKEN" in body["error"], body


def _from(peer: str, api: ScopesApi, *, token: str | None = None) -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (peer, 40000) if name == "peername" else default
    headers = {"Host": "127.0.0.1:8080", **({"Authorization": f"Bearer {token}"} if token else {})}
    return make_mocked_request("GET", "/api/scopes", headers=headers, transport=transport)


@pytest.mark.parametrize(("peer", "answered"), [("127.0.0.1", True), ("::1", True), ("10.0.0.5", False)])
async def test_without_a_token_only_loopback_clients_are_answered(peer: str, answered: bool) -> None:
    api = ScopesApi(mock.Mock(), mock.Mock(), None)

    async def ok(_request: web.Request) -> web.StreamResponse:
        return web.json_response({"ok": True})

    response = await api.guard(ok)(_from(peer, api))
    assert isinstance(response, web.Response)
    if answered:
        assert response.status == 200
    else:
        body = json.loads(response.text or "{}")
        assert response.status == 401 and "10.0.0.5 is not on loopback" in body["error"]
        assert "DECKLOG_API_TOKEN" in body["error"]
    with_token = ScopesApi(mock.Mock(), mock.Mock(), SecretStr("t0ken"))
    assert (
        await with_token.guard(ok)(_from(peer, with_token, token="t0ken"))
    ).status == 200  # any client, with the bearer


# -- no token, behind a proxy or a rebound DNS name: every client may look like loopback --------------------------


@asynccontextmanager
async def plain_proxy(upstream: str) -> AsyncIterator[str]:
    """A reverse proxy on the same host that passes the client's Host on and adds no forwarding header (nginx with
    ``proxy_set_header Host $host`` and nothing else): every client it serves reaches decklog from 127.0.0.1."""

    async with aiohttp.ClientSession() as session:

        async def forward(request: web.Request) -> web.StreamResponse:
            headers = {h: request.headers[h] for h in ("Host", "Authorization") if h in request.headers}
            async with session.get(upstream + request.rel_url.path_qs, headers=headers) as r:
                return web.Response(status=r.status, body=await r.read(), content_type=r.content_type)

        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()


async def test_without_a_token_a_proxy_adding_no_header_exposes_nothing(
    make_server: ServerFactory, http: aiohttp.ClientSession
) -> None:
    server = await make_server()
    await seed(server)
    async with plain_proxy(server.url) as proxy:
        for path in ("/api/scopes", f"/api/scopes/{PAYMENTS}/timeline", "/api/search?q=payments"):
            async with http.get(proxy + path, headers={"Host": "incidents.example.com"}) as resp:
                body = await resp.json()
                assert resp.status == 401, (path, body)
                assert "incidents.example.com" in body["error"] and "DECKLOG_API_TOKEN" in body["error"]
    status, body, _ = await get(http, server, "/api/scopes")  # straight from loopback, naming a loopback Host
    assert status == 200 and body["count"] == 3


@pytest.mark.parametrize("host", ["rebind.attacker.example:8080", "192.0.2.7", "[2001:db8::1]:80"])
async def test_without_a_token_a_host_that_is_not_loopback_is_401(
    server: DecklogServer, http: aiohttp.ClientSession, host: str
) -> None:
    """DNS rebinding: a page on attacker.example whose name now resolves to 127.0.0.1 sends its own Host."""
    status, body, got = await get(http, server, "/api/scopes", headers={"Host": host})
    assert status == 401 and got["WWW-Authenticate"].startswith("Bearer")
    assert "Host" in body["error"] and "DECKLOG_API_TOKEN" in body["error"], body


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "127.0.0.1", "[::1]:8080", "app.localhost"])
async def test_without_a_token_loopback_hosts_are_answered(
    server: DecklogServer, http: aiohttp.ClientSession, host: str
) -> None:
    status, _, _ = await get(http, server, "/api/scopes", headers={"Host": host})
    assert status == 200


@pytest.mark.parametrize(
    "header",
    ["X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-IP", "Via", "True-Client-IP", "CF-Connecting-IP", "X-Client-IP"],
)
async def test_without_a_token_any_forwarding_header_is_401(
    server: DecklogServer, http: aiohttp.ClientSession, header: str
) -> None:
    status, body, _ = await get(http, server, "/api/scopes", headers={header: "203.0.113.9"})
    assert status == 401 and "proxy" in body["error"], body


async def test_with_a_token_a_proxied_request_with_the_bearer_is_answered(
    make_server: ServerFactory, http: aiohttp.ClientSession
) -> None:
    server = await make_server(api_token="s3cret-token")
    await seed(server)
    async with plain_proxy(server.url) as proxy:
        bearer = {"Host": "incidents.example.com", "Authorization": "Bearer s3cret-token"}
        async with http.get(proxy + "/api/scopes", headers=bearer) as resp:
            assert resp.status == 200 and (await resp.json())["count"] == 3
        async with http.get(proxy + "/api/scopes", headers={"Host": "incidents.example.com"}) as resp:
            assert resp.status == 401


def test_the_start_up_line_says_how_the_api_is_protected(tmp_path: Path) -> None:
    from decklog.adapters.http.api import protection_line

    open_line = protection_line(Settings(data_dir=tmp_path).api_token)
    assert "DECKLOG_API_TOKEN is not set" in open_line and "loopback" in open_line and "proxy" in open_line
    token_line = protection_line(Settings(data_dir=tmp_path, api_token="t").api_token)
    assert "Bearer" in token_line and "DECKLOG_API_TOKEN is set" in token_line
