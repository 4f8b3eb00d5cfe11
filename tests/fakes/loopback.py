"""A tiny base for loopback fakes: an aiohttp app on 127.0.0.1 with an ephemeral port, usable as ``async with``."""

from __future__ import annotations

from typing import Any

from aiohttp import web


class LoopbackFake:
    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self.calls: list[tuple[str, str, int]] = []
        """(method, path, status) of every request answered."""
        self.queued: list[tuple[int, dict[str, str], Any]] = []
        """Answers to give before the real ones: (status, headers, JSON body), e.g. a rate limit."""

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> str:
        app = web.Application(middlewares=[self._record])
        self.routes(app)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Any:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.queued:
            status, headers, body = self.queued.pop(0)
            resp: web.StreamResponse = web.json_response(body, status=status, headers=headers)
        else:
            try:
                resp = await handler(request)
            except web.HTTPException as exc:
                resp = exc
        self.calls.append((request.method, request.path, resp.status))
        return resp


def error(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)
