"""The record of every Web API call the fake served, and waiting on it from a test."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["CallLog", "RecordedCall"]

T = TypeVar("T")


@dataclass(frozen=True)
class RecordedCall:
    """One call: ``args`` as decoded (query + body; the token is not included), ``ok`` as answered.

    ``status`` is the HTTP status; ``error`` Slack's error code; ``dropped`` when the connection was closed
    without an answer (the effect happened, the client never learned).
    """

    method: str
    args: dict[str, Any]
    at: float
    ok: bool
    error: str | None = None
    status: int = 200
    dropped: bool = False
    response: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def describe(self) -> str:
        outcome = "ok" if self.ok else f"error={self.error}"
        if self.dropped:
            outcome += " (response dropped)"
        args = json.dumps(self.args, default=str, sort_keys=True)
        return f"{self.method} [{self.status} {outcome}] {args[:300]}"


class CallLog:
    def __init__(self) -> None:
        self.calls: list[RecordedCall] = []

    def record(self, call: RecordedCall) -> None:
        self.calls.append(call)

    def calls_to(self, method: str, *, ok: bool | None = None) -> list[RecordedCall]:
        return [c for c in self.calls if c.method == method and (ok is None or c.ok == ok)]

    def describe_recent(self, n: int = 20) -> str:
        recent = self.calls[-n:]
        if not recent:
            return "no Web API calls were made"
        lines = "\n".join(f"  {c.describe()}" for c in recent)
        return f"last {len(recent)} of {len(self.calls)} Web API calls:\n{lines}"

    def find_call(
        self, method: str, where: Callable[[dict[str, Any]], bool] | None = None, *, ok: bool | None = True
    ) -> RecordedCall | None:
        """The first recorded call to ``method`` (answered ``ok``, whose ``args`` satisfy ``where``), if any."""
        return next((c for c in self.calls_to(method, ok=ok) if where is None or where(c.args)), None)
