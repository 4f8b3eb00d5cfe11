"""Outgoing webhooks against a real receiver on loopback that checks every delivery with the Standard Webhooks
reference library (``standardwebhooks.Webhook.verify``): signed, in seq order per incident, at least once with
one ``webhook-id`` per entry across retries, only the configured kinds, retried after failures, and parked at once
(visible to ``decklog doctor``) when the URL is outside the egress allowlist."""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from decklog.bot.config import DecklogConfig
from decklog.bot.server import DecklogServer
from tests.conftest import ServerFactory, eventually, test_config

SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class Receiver:
    """An endpoint that verifies each delivery; it answers 500 to the first ``fail_first`` requests."""

    secret: str
    fail_first: int = 0
    url: str = ""
    requests: int = 0
    verified: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        body = await request.read()
        try:
            payload = Webhook(self.secret).verify(body, dict(request.headers))
        except WebhookVerificationError as exc:
            self.rejected.append(str(exc))
            return web.Response(status=400)
        if self.requests <= self.fail_first:
            return web.Response(status=500)
        self.ids.append(request.headers["webhook-id"])
        if request.headers["webhook-id"] not in {p["data"]["id"] for p in self.verified}:
            self.verified.append(payload)
        return web.Response(status=204)


async def serve(receiver: Receiver) -> web.AppRunner:
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    receiver.url = f"http://127.0.0.1:{port}/hook"
    return runner


def config(*hooks: dict[str, Any], egress_allow: list[str] | None = None) -> DecklogConfig:
    data = test_config().model_dump()
    data["webhooks"] = hooks
    data["security"]["egress_allow"] = egress_allow
    return DecklogConfig.model_validate(data)


async def post(server: DecklogServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.post(server.url + path, json=body) as resp:
        assert resp.status in (200, 201), await resp.text()
        out: dict[str, Any] = await resp.json()
        return out


async def test_deliveries_are_signed_in_order_retried_and_verified_by_the_reference_library(
    make_server: ServerFactory,
) -> None:
    everything = Receiver(SECRET, fail_first=2)
    messages = Receiver(SECRET)
    runners = [await serve(everything), await serve(messages)]
    try:
        server = await make_server(
            parts={"api"},
            config=config(
                {"url": everything.url, "secret": SECRET},
                {"url": messages.url, "secret": SECRET, "kinds": ["message"], "name": "chat-bridge"},
            ),
        )
        scope = (await post(server, "/api/scopes", {"title": "Payments 5xx", "severity": 2}))["scope"]
        for i in range(5):
            await post(server, f"/api/scopes/{scope}/entries", {"kind": "message", "text": f"step {i}"})
        await post(server, f"/api/scopes/{scope}/resolve", {"summary": "done"})
        log = await server.runtime.store.read(scope)
        want = [e.seq for e in log]
        await eventually(
            lambda: [p["data"]["seq"] for p in everything.verified] == want,
            timeout=30,
            what=f"every entry of {scope} delivered, in order, to the endpoint that failed twice",
        )
        assert everything.verified[0]["type"] == "entry.declared"
        assert everything.requests > len(want)  # the two 500s were retried
        assert len(set(everything.ids)) == len(want)  # one webhook-id per entry, the same on a retry
        await eventually(
            lambda: [p["data"]["payload"]["text"] for p in messages.verified] == [f"step {i}" for i in range(5)],
            timeout=15,
            what="only the messages at the endpoint that asked for messages",
        )
        assert messages.requests == 5  # the other endpoint's failures did not make this one post again
        assert not everything.rejected and not messages.rejected
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_a_receiver_with_another_secret_rejects_the_signature(make_server: ServerFactory) -> None:
    """The check can fail: the same deliveries, verified with a different secret, are refused."""
    other = Receiver("whsec_" + base64.b64encode(secrets.token_bytes(32)).decode())
    runner = await serve(other)
    try:
        server = await make_server(parts={"api"}, config=config({"url": other.url, "secret": SECRET}))
        await post(server, "/api/scopes", {"title": "Wrong secret"})
        await eventually(lambda: other.rejected, timeout=15, what="a rejected signature")
        assert other.rejected[0] == "No matching signature found" and not other.verified
    finally:
        await runner.cleanup()


async def test_an_endpoint_outside_the_egress_allowlist_parks_at_once_and_sends_nothing(
    make_server: ServerFactory,
) -> None:
    receiver = Receiver(SECRET)
    runner = await serve(receiver)
    try:
        server = await make_server(
            parts={"api"}, config=config({"url": receiver.url, "secret": SECRET}, egress_allow=["hooks.example.com"])
        )
        scope = (await post(server, "/api/scopes", {"title": "Egress refused"}))["scope"]

        async def parked() -> list[Any]:
            return [p for p in await server.runtime.store.outbox_parked(scope) if p.topic == "webhooks"]

        rows = await eventually(parked, timeout=15, what="the webhooks row parked")
        assert "egress" in json.dumps([str(r) for r in rows])
        assert receiver.requests == 0
    finally:
        await runner.cleanup()


def test_a_secret_that_is_not_whsec_base64_stops_start_up() -> None:
    with pytest.raises(ValueError, match="whsec_"):
        config({"url": "http://127.0.0.1:9/hook", "secret": "hunter2"})
