"""Alertmanager's API v2 as an ``AlertsPort`` (``DECKLOG_ALERTMANAGER_URL``): what is firing or silenced now."""

from __future__ import annotations

from typing import Any

from decklog.adapters.monitoring.reader import JsonReader
from decklog.core.evidence.ports import SourceError


class AlertmanagerSource:
    name = "alertmanager"

    def __init__(self, reader: JsonReader) -> None:
        self.reader = reader
        self.url = reader.base_url

    async def _list(self, path: str, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
        answer = await self.reader.get(path, params)
        if not isinstance(answer, list):
            raise SourceError(f"{path} did not answer a list")
        return [a for a in answer if isinstance(a, dict)]

    async def alerts(self) -> list[dict[str, Any]]:
        return await self._list("/api/v2/alerts", {"active": "true", "silenced": "true", "inhibited": "true"})

    async def silences(self) -> list[dict[str, Any]]:
        return await self._list("/api/v2/silences")
