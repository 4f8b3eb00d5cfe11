"""Faults a test programs into the fake Slack Web API: errors, 429 storms, slow answers, lost responses.

``slack_faults(server)`` plugs a ``FaultPlan`` into ``FakeSlackServer.interrupt`` (the simulator's one hook) and
returns it; ``fail_next`` / ``ratelimit_next`` / ``delay_next`` / ``apply_then_drop`` queue a ``Fault`` for one
method; the next matching calls consume it (``count`` times). At most one fault applies to a call: the oldest
queued one that matches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapters.local.slack import FakeSlackServer
from adapters.local.slack.faults import Fault

__all__ = ["FaultPlan", "slack_faults"]

Where = Callable[[dict[str, Any]], bool] | None


class FaultPlan:
    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def __call__(self, method: str, args: dict[str, Any]) -> Fault | None:
        return self.take(method, args)

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


def slack_faults(server: FakeSlackServer) -> FaultPlan:
    """The server's fault plan, plugged into its ``interrupt`` hook on first use."""
    if isinstance(server.interrupt, FaultPlan):
        return server.interrupt
    plan = FaultPlan()
    server.interrupt = plan
    return plan
