"""Faults a test programs into the fake Web API: errors, 429 storms, slow answers, lost responses.

Each ``FakeSlackServer.fail_next`` / ``ratelimit_next`` / ``delay_next`` / ``apply_then_drop`` queues a
:class:`Fault` for one method; the next matching calls consume it (``count`` times). At most one fault
applies to a call: the oldest queued one that matches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Fault", "FaultKind", "FaultPlan"]

FaultKind = Literal["fail", "ratelimit", "delay", "drop"]


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
    where: Callable[[dict[str, Any]], bool] | None = None

    def matches(self, method: str, args: dict[str, Any]) -> bool:
        return self.remaining > 0 and self.method == method and (self.where is None or bool(self.where(args)))


class FaultPlan:
    def __init__(self) -> None:
        self._faults: list[Fault] = []

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
