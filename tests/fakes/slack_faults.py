"""Faults a test programs into the fake Slack Web API: errors, 429 storms, slow answers, lost responses.

``slack_faults(fake)`` puts a ``FaultPlan`` among the fake server's ``middlewares`` (after the call recorder, so
the record shows what the client saw) and returns it; ``fail_next`` / ``ratelimit_next`` / ``delay_next`` /
``apply_then_drop`` queue a ``Fault`` for one method; the next matching calls consume it (``count`` times). At most
one fault applies to a call: the oldest queued one that matches. Uploads of file bytes are the method ``UPLOAD``
(``fail`` and ``ratelimit`` only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from decklog.adapters.local.slack import FakeSlack, FakeSlackServer
from decklog.adapters.local.slack.methods import method_table
from decklog.adapters.local.slack.server import Handler
from tests.fakes.slack_calls import DROPPED, UPLOAD, call_of

__all__ = ["Fault", "FaultKind", "FaultPlan", "slack_faults"]

Where = Callable[[dict[str, Any]], bool] | None
FaultKind = Literal["fail", "ratelimit", "delay", "drop"]
_METHODS = frozenset(method_table())


@dataclass
class Fault:
    """``fail``: answer ``{"ok": false, "error": error}`` with ``status``, no effect.
    ``ratelimit``: HTTP 429, ``Retry-After: retry_after``, ``error: ratelimited``, no effect.
    ``delay``: wait ``seconds`` before (or, with ``apply_first``, after) performing the call normally.
    ``drop``: perform the call, then close the connection without answering.
    """

    kind: FaultKind
    method: str
    remaining: int = 1
    error: str = "internal_error"
    status: int = 200
    retry_after: int = 1
    seconds: float = 0.0
    apply_first: bool = False
    where: Where = None

    def matches(self, method: str, args: dict[str, Any]) -> bool:
        return self.remaining > 0 and self.method == method and (self.where is None or bool(self.where(args)))


class FaultPlan:
    def __init__(self) -> None:
        self._faults: list[Fault] = []

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The middleware: answer a call as the fault it takes says, or pass it on."""
        call = await call_of(request)
        if call is None or (call[0] != UPLOAD and call[0] not in _METHODS):
            return await handler(request)
        fault = self.take(*call)
        if fault is None:
            return await handler(request)
        if call[0] == UPLOAD:
            if fault.kind in ("fail", "ratelimit"):  # a slow or lost upload is not simulated
                status = 429 if fault.kind == "ratelimit" else max(fault.status, 400)
                return web.Response(status=status, text=fault.error, content_type="text/plain")
            return await handler(request)
        if fault.kind == "fail":
            return web.json_response({"ok": False, "error": fault.error}, status=fault.status)
        if fault.kind == "ratelimit":
            body = {"ok": False, "error": "ratelimited"}
            return web.json_response(body, status=429, headers={"Retry-After": str(fault.retry_after)})
        if fault.kind == "delay" and not fault.apply_first:
            await asyncio.sleep(fault.seconds)
        response = await handler(request)
        if fault.kind == "delay" and fault.apply_first:
            await asyncio.sleep(fault.seconds)
        if fault.kind == "drop":
            request[DROPPED] = response
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=500)  # never reaches the client: the connection is gone
        return response

    def add(self, fault: Fault) -> Fault:
        if fault.remaining < 1:
            raise ValueError("count must be at least 1")
        self._faults.append(fault)
        return fault

    def take(self, method: str, args: dict[str, Any]) -> Fault | None:
        """Consumes one use of the oldest fault matching this call."""
        for fault in self._faults:
            if fault.matches(method, args):
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.remove(fault)
                return fault
        return None

    def pending(self, method: str | None = None) -> list[Fault]:
        return [f for f in self._faults if method is None or f.method == method]

    def clear(self) -> None:
        self._faults.clear()

    def fail_next(
        self, method: str, error: str = "internal_error", *, status: int = 200, count: int = 1, where: Where = None
    ) -> Fault:
        """The next ``count`` calls answer ``{"ok": false, "error": error}``, HTTP ``status``; no effect."""
        return self.add(Fault("fail", method, remaining=count, error=error, status=status, where=where))

    def ratelimit_next(self, method: str, retry_after: int = 1, *, count: int = 1, where: Where = None) -> Fault:
        """A 429 storm: the next ``count`` calls answer 429 with ``Retry-After: retry_after``; no effect."""
        return self.add(Fault("ratelimit", method, remaining=count, retry_after=int(retry_after), where=where))

    def delay_next(
        self, method: str, seconds: float, *, count: int = 1, apply_first: bool = False, where: Where = None
    ) -> Fault:
        """The next ``count`` calls answer ``seconds`` late (doing the effect first with ``apply_first``).

        The effect happens even when the client gave up waiting (aiohttp does not cancel the handler)."""
        return self.add(Fault("delay", method, remaining=count, seconds=seconds, apply_first=apply_first, where=where))

    def apply_then_drop(self, method: str, count: int = 1, *, where: Where = None) -> Fault:
        """The next ``count`` calls take effect, then the connection closes unanswered (a lost response)."""
        return self.add(Fault("drop", method, remaining=count, where=where))


def slack_faults(target: FakeSlack | FakeSlackServer) -> FaultPlan:
    """The server's fault plan, put among its middlewares on first use."""
    server = target.server if isinstance(target, FakeSlack) else target
    for middleware in server.middlewares:
        if isinstance(middleware, FaultPlan):
            return middleware
    plan = FaultPlan()
    server.middlewares.append(plan)
    return plan
