"""Prometheus' HTTP API as a ``MetricsPort`` (``DECKLOG_PROMETHEUS_URL``): instant and range queries, the alerts
and the rules it holds. An answer whose ``status`` is not ``success`` raises ``SourceError`` with Prometheus'
``errorType: error`` (a PromQL mistake reads as such in the observation)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from decklog.adapters.monitoring.reader import JsonReader
from decklog.core.evidence.ports import SourceError


class PrometheusSource:
    name = "prometheus"

    def __init__(self, reader: JsonReader) -> None:
        self.reader = reader
        self.url = reader.base_url

    async def _data(self, path: str, params: dict[str, str] | None = None) -> Any:
        answer = await self.reader.get(path, params)
        if not isinstance(answer, dict) or answer.get("status") != "success":
            kind = answer.get("errorType", "error") if isinstance(answer, dict) else "error"
            what = answer.get("error", "unexpected answer") if isinstance(answer, dict) else "unexpected answer"
            raise SourceError(f"{path}: {kind}: {what}")
        return answer.get("data")

    async def query(self, expr: str, *, at: datetime | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        data = await self._data("/api/v1/query", params)
        result = data.get("result", []) if isinstance(data, dict) else []
        if isinstance(data, dict) and data.get("resultType") == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    async def query_range(self, expr: str, *, start: datetime, end: datetime, step_s: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}"}
        params["step"] = f"{max(step_s, 0.001):g}"
        data = await self._data("/api/v1/query_range", params)
        return list(data.get("result", [])) if isinstance(data, dict) else []

    async def alerts(self) -> list[dict[str, Any]]:
        data = await self._data("/api/v1/alerts")
        return list(data.get("alerts", [])) if isinstance(data, dict) else []

    async def rules(self) -> list[dict[str, Any]]:
        data = await self._data("/api/v1/rules")
        return list(data.get("groups", [])) if isinstance(data, dict) else []
