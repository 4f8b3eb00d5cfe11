"""A round-robin HTTP load balancer on loopback, in front of several ``decklog serve`` replicas (as a real one:
it forwards each request unchanged to the next live backend; a backend that refuses the connection is skipped —
nothing was sent to it — and one that fails mid-request gives the client a 502, never a retry elsewhere)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

HOP = {"host", "content-length", "transfer-encoding", "connection", "content-encoding"}


@dataclass
class Balancer:
    backends: list[str] = field(default_factory=list)  # base URLs, e.g. http://127.0.0.1:8123
    forwarded: int = 0
    _turn: itertools.count[int] = field(default_factory=itertools.count)
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None
    url: str = ""

    async def __aenter__(self) -> Balancer:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def remove(self, backend: str) -> None:
        """The health check noticed a dead backend."""
        if backend in self.backends:
            self.backends.remove(backend)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        for _ in range(max(1, len(self.backends))):
            if not self.backends:
                break
            backend = self.backends[next(self._turn) % len(self.backends)]
            try:
                async with self._session.request(
                    request.method, backend + request.path_qs, data=body, headers=headers
                ) as resp:
                    payload = await resp.read()
                    out = {k: v for k, v in resp.headers.items() if k.lower() not in HOP}
                    self.forwarded += 1
                    return web.Response(status=resp.status, body=payload, headers=out)
            except aiohttp.ClientConnectorError:
                continue  # refused: nothing reached that backend, the next one gets it
            except (aiohttp.ClientError, TimeoutError):
                return web.Response(status=502, text="backend failed mid-request")
        return web.Response(status=503, text="no live backend")
