"""What the read tools reach: a metrics source (Prometheus' HTTP API) and an alert source (Alertmanager's).

Implementations live in adapters/monitoring/. Each call either answers the decoded ``data`` of the API or raises
``SourceError`` with one line saying why (unreachable, refused by the egress allowlist, an error status, an answer
larger than the size bound, a timeout). The caller (``core.evidence.observer.Evidence``) records either.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol


class SourceError(Exception):
    """A read that did not answer: ``reason`` is one line for the observation (never a secret)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MetricsPort(Protocol):
    """Prometheus' HTTP API (``/api/v1/query``, ``/api/v1/query_range``, ``/api/v1/alerts``, ``/api/v1/rules``)."""

    name: str
    url: str

    async def query(self, expr: str, *, at: datetime | None = None) -> list[dict[str, Any]]:
        """An instant query: the result vector (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        ...

    async def query_range(self, expr: str, *, start: datetime, end: datetime, step_s: float) -> list[dict[str, Any]]:
        """A range query: the result matrix (``[{"metric": {...}, "values": [[t, "v"], ...]}]``)."""
        ...

    async def alerts(self) -> list[dict[str, Any]]:
        """The alerts its rules hold (pending and firing)."""
        ...

    async def rules(self) -> list[dict[str, Any]]:
        """Its rule groups."""
        ...


class AlertsPort(Protocol):
    """Alertmanager's API v2 (``/api/v2/alerts``, ``/api/v2/silences``)."""

    name: str
    url: str

    async def alerts(self) -> list[dict[str, Any]]:
        """What it holds now: each alert with ``labels``, ``startsAt`` and ``status.state``."""
        ...

    async def silences(self) -> list[dict[str, Any]]:
        """Its silences, each with ``matchers`` and ``status.state``."""
        ...
