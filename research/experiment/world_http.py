"""The experiment's world as an ``http`` executor target on loopback (DESIGN §7's wire protocol): the desk's
runner POSTs ``/act`` and asks ``GET /reconcile/<idempotency_key>``; this app applies effects to the world
(``research/experiment/world.py``), whose own counters stay the oracle, and reports them.

``POST /act`` → 200 ``{key, params, fence}`` (applied), 409 (the fenced resource refused a stale token), 400 (bad
body, nothing applied). A replay of an idempotency key answers its first response and applies nothing. Under
``executor_timeout`` (``Run.executor_fault``) the call either answers 502 before applying (``5xx``) or applies and
drops the connection without answering (``lost``). ``GET /reconcile/<key>`` → 200 ``{"status": "applied", ...}``
or 404 ``{"status": "not_applied", ...}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from research.experiment.scenario import action_key
from research.experiment.world import WorldSim

FaultHook = Callable[[str], Awaitable[str]]  # scope → "" | "lost" | "5xx"


class WorldApp:
    def __init__(self, world: WorldSim, fault: FaultHook) -> None:
        self.world = world
        self.fault = fault
        self.answers: dict[str, dict[str, Any]] = {}  # idempotency key → the applied effect
        self.seen: dict[str, str] = {}  # idempotency key → action key (received, applied or not)
        self.runner: web.AppRunner | None = None
        self.base = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/act", self.act)
        app.router.add_get("/reconcile/{key}", self.reconcile)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.base = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self.runner:
            await self.runner.cleanup()

    async def act(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
            action, params, fence = str(body["action"]), dict(body["params"]), int(body["fence"])
            idem, scope = str(body["idempotency_key"]), str(body["scope"])
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": f"bad request body: {exc!r}"}, status=400)
        key = action_key(action, params)
        if idem in self.answers:
            return web.json_response(self.answers[idem])
        self.seen[idem] = key
        variant = await self.fault(scope)
        if variant == "5xx":
            return web.json_response({"key": key, "error": "the executor failed before applying"}, status=502)
        if self.world.apply(action, params, fence=fence, resource=key) == "refused":
            return web.json_response({"key": key, "error": f"stale fence {fence}"}, status=409)
        self.answers[idem] = {"key": key, "params": params, "fence": fence}
        if variant == "lost":  # applied; the response never arrives
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=504)
        return web.json_response(self.answers[idem])

    async def reconcile(self, request: web.Request) -> web.Response:
        idem = request.match_info["key"]
        if idem in self.answers:
            return web.json_response({"status": "applied", **self.answers[idem], "effect": self.answers[idem]})
        return web.json_response({"status": "not_applied", "key": self.seen.get(idem, "")}, status=404)
