"""Live updates for the page: the fake workspace's change feed as Server-Sent Events.

Each connection gets ``event: hello`` (with the current ``version``, the number of changes so far) and then one
``event: change`` per workspace change (``kind``, ``channel``, ``ts``, ``user``, ``version``); the page refetches
``/sandbox/state`` when told. A comment line every 15 s keeps idle connections open; :meth:`close` ends every
stream, so stopping the server never waits for a browser.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from decklog.adapters.local.slack import Change, FakeSlackWorkspace

KEEPALIVE_S = 15.0
_CLOSE = Change("sandbox_closed")


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class LiveFeed:
    def __init__(self, workspace: FakeSlackWorkspace, *, keepalive: float = KEEPALIVE_S) -> None:
        self._workspace = workspace
        self._keepalive = keepalive
        self._queues: set[asyncio.Queue[Change]] = set()
        self._closed = False

    @property
    def version(self) -> int:
        """How many changes the workspace has seen: a snapshot taken at version N includes changes 1..N."""
        return len(self._workspace.feed.history)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        if self._closed:
            return web.json_response({"error": "the sandbox is stopping"}, status=503)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        queue = self._workspace.subscribe()
        self._queues.add(queue)
        try:
            await response.write(b"retry: 1000\n" + _event("hello", {"version": self.version}))
            while True:
                try:
                    change = await asyncio.wait_for(queue.get(), timeout=self._keepalive)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if change is _CLOSE:
                    break
                data = {"kind": change.kind, "channel": change.channel, "ts": change.ts, "user": change.user}
                await response.write(_event("change", {**data, "version": self.version}))
        except ConnectionResetError:
            pass  # the browser went away
        finally:
            self._queues.discard(queue)
            self._workspace.unsubscribe(queue)
        return response

    async def close(self) -> None:
        self._closed = True
        for queue in list(self._queues):
            queue.put_nowait(_CLOSE)
