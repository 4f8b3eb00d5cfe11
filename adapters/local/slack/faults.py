"""The one hook a test plugs faults into: ``FakeSlackServer.interrupt(method, args)`` may answer a ``Fault``
for a call (an error, a 429, a slow answer, a lost response). The simulator only obeys it; fault plans
(``fail_next``, ``ratelimit_next``, ``delay_next``, ``apply_then_drop``) live with the tests
(``tests/fakes/slack_faults.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Fault", "FaultKind", "Interrupt"]

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


Interrupt = Callable[[str, dict[str, Any]], Fault | None]
"""Called with every Web API call (method, args) and upload; a ``Fault`` changes how the call is answered."""
