"""The experiment's world inputs through decklog's real receivers over HTTP on loopback: alerts as
``POST /alerts/generic`` and changes as ``POST /changes/generic`` (adapters/alerts/generic, adapters/changes/generic
formats), authenticated with the alert token, answered by the same handlers ``decklog serve`` mounts; and the
people's messages, clicks and commands as signed Slack requests to ``POST /slack/events`` on the same server, sent
by the local fake Slack workspace (``slack_door.py``).

``dup_delivery`` re-sends the same alert notification (same ``event_id``, a webhook retry); the receiver records
it once. Slack's retry of a message event and a double-clicked Approve are the Slack door's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import web

from decklog.bot.runtime import Runtime
from decklog.bot.wiring import ReceiversPart, build_receivers
from decklog.core.entries import Actor
from decklog.core.store.ports import AlertInbox
from research.experiment.slack_door import SlackDoor

TOKEN = "experiment-alert-token"


class HttpInputs:
    def __init__(self, rt: Runtime, slack: SlackDoor) -> None:
        self.rt = rt
        self.slack = slack
        self.part: ReceiversPart | None = None
        self.inbox: AlertInbox | None = None
        self.routing: asyncio.Task[None] | None = None
        self.runner: web.AppRunner | None = None
        self.session: aiohttp.ClientSession | None = None
        self.base = ""
        self.requests = 0

    async def _build(self) -> ReceiversPart:
        rt = self.rt
        self.inbox = await rt.storage.alert_inbox()
        part = build_receivers(
            rt.store,
            rt.index,
            rt.service,
            rt.clock,
            rt.alarm,
            alerts=rt.config.alerts,
            changes=rt.config.changes,
            token=rt.settings.alert_token,
            locks=rt.storage.route_locks(),
            rates=rt.storage.rate_counter(),
            inbox=self.inbox,
        )
        for sender in part.provides.senders:  # the change links (outbox topic ``changes``)
            rt.dispatcher.register(sender)
        self.routing = asyncio.ensure_future(part.intake.run())  # alerts are routed behind their 202
        return part

    async def start(self) -> None:
        self.part = await self._build()
        app = web.Application()
        for route in [*self.part.provides.routes, *self.slack.routes]:
            app.router.add_route(route.method, route.path, route.handler)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.base = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        self.session = aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"})
        self.slack.listen(self.base + "/slack/events")

    async def stop(self) -> None:
        if self.routing is not None:
            self.routing.cancel()
        if self.inbox is not None:
            await self.inbox.close()
        await self.slack.stop()
        if self.session:
            await self.session.close()
        if self.runner:
            await self.runner.cleanup()

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        self.requests += 1
        async with self.session.post(self.base + path, json=body) as resp:
            answer: dict[str, Any] = await resp.json()
            if resp.status >= 400:
                raise RuntimeError(f"POST {path} → {resp.status}: {answer.get('error')}")
        # What the input's commit sets off (change links through the ``changes`` topic, the index) lands before
        # the next turn reads the state: otherwise a turn's view depends on delivery timing, and runs differ.
        await self.rt.dispatcher.idle()
        return answer

    async def alert(self, body: dict[str, Any], *, times: int = 1) -> list[str]:
        scopes: list[str] = []
        for _ in range(times):
            answer = await self._post("/alerts/generic?wait=60", body)  # the outcomes, routed
            scopes += [s for s in answer.get("scopes", []) if s not in scopes]
        return scopes

    async def change(self, body: dict[str, Any]) -> None:
        await self._post("/changes/generic", body)

    async def message(self, scope: str, user: str, text: str, *, times: int = 1) -> None:
        await self.slack.message(scope, user, text, times=times)

    async def approve(self, scope: str, proposal_id: str, actor: Actor, *, clicks: int = 1) -> None:
        await self.slack.approve(scope, proposal_id, actor, clicks=clicks)

    async def deny(self, scope: str, proposal_id: str, actor: Actor, reason: str) -> None:
        await self.slack.deny(scope, proposal_id, actor, reason)

    async def accept(self, scope: str, suggestion_id: str, actor: Actor) -> None:
        await self.slack.accept(scope, suggestion_id, actor)

    async def record(self, scope: str, kind: str, text: str, actor: Actor) -> None:
        await self.slack.record(scope, kind, text, actor)
