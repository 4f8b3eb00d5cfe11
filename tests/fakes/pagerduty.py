"""A loopback fake of PagerDuty's Events API v2: ``POST /v2/enqueue``.

202 ``{"status": "success", "message": "Event processed", "dedup_key"}``; an unknown routing key or a malformed
event 400 ``{"status": "invalid event", "message": "Event object is invalid", "errors": [...]}``; ``rate_limit()``
queues a 429. Alerts are folded by ``dedup_key`` like PagerDuty's: a trigger on an open alert adds no page.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackFake, error


class FakePagerDuty(LoopbackFake):
    def __init__(self, *, routing_key: str = "R0UTINGKEY0123456789012345678901") -> None:
        super().__init__()
        self.routing_key = routing_key
        self.events: list[dict[str, Any]] = []
        self.alerts: dict[str, str] = {}  # dedup_key -> triggered | resolved
        self.pages = 0  # triggers that opened an alert (what would wake someone)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v2/enqueue", self._enqueue)

    def rate_limit(self) -> None:
        self.queued.append(
            (429, {}, {"status": "throttle event", "message": "Requests for this service are throttled"})
        )

    async def _enqueue(self, request: web.Request) -> web.Response:
        try:
            event = await request.json()
        except ValueError:
            return self._invalid("The request body is not JSON")
        if not isinstance(event, dict) or event.get("routing_key") != self.routing_key:
            return self._invalid("Invalid routing key")
        action, key = event.get("event_action"), event.get("dedup_key")
        if action not in ("trigger", "acknowledge", "resolve"):
            return self._invalid("'event_action' is invalid")
        if action == "trigger":
            payload = event.get("payload")
            if not isinstance(payload, dict) or not payload.get("summary") or not payload.get("source"):
                return self._invalid("'payload' is invalid or missing")
            key = key or f"generated-{len(self.events)}"
            if self.alerts.get(key) != "triggered":
                self.pages += 1
            self.alerts[key] = "triggered"
        elif not key:
            return self._invalid("'dedup_key' is required for resolve and acknowledge")
        elif action == "resolve" and key in self.alerts:
            self.alerts[key] = "resolved"
        self.events.append(event)
        return web.json_response({"status": "success", "message": "Event processed", "dedup_key": key}, status=202)

    def _invalid(self, why: str) -> web.Response:
        return error(400, {"status": "invalid event", "message": "Event object is invalid", "errors": [why]})
