"""The fake status page: a subset of the Atlassian Statuspage REST API v1 (incidents of one page), authenticated
with ``Authorization: OAuth <api key>`` as the real API is."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from aiohttp import web

from decklog.adapters.local.services.loopback import Call, LoopbackService, Outcome, canon, now_iso

__all__ = ["FakeStatuspage"]

_INCIDENT_STATUSES = frozenset(
    {
        "investigating",
        "identified",
        "monitoring",
        "resolved",
        "scheduled",
        "in_progress",
        "verifying",
        "completed",
    }
)
_IMPACTS = frozenset({"none", "minor", "major", "critical", "maintenance"})
_COMPONENT_STATUSES = frozenset(
    {"operational", "degraded_performance", "partial_outage", "major_outage", "under_maintenance"}
)
_IMPACT_OF_COMPONENT_STATUS: Mapping[str, str] = MappingProxyType(
    {"degraded_performance": "minor", "partial_outage": "major", "major_outage": "critical"}
)
_IMPACT_ORDER = ("none", "maintenance", "minor", "major", "critical")


class FakeStatuspage(LoopbackService):
    """A subset of the Statuspage REST API v1: incidents of one page.

    ``POST /v1/pages/{page_id}/incidents`` with ``{"incident": {...}}`` → 201 incident;
    ``PATCH``/``PUT /v1/pages/{page_id}/incidents/{incident_id}`` → 200 incident (a new incident update when
    ``status`` or ``body`` is given); ``GET`` one → 200 / 404; ``GET`` the list → 200 array, newest first.
    Every request needs ``Authorization: OAuth <api_key>`` (401 otherwise); an unknown page is 404. An
    ``Idempotency-Key`` header, when present, is honoured like the deploy service does.
    """

    _label = "fake-statuspage"

    def __init__(
        self,
        *,
        api_key: str = "sp-test-key",
        page_id: str = "fakepage0001",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(host=host, port=port)
        self.api_key = api_key
        self.page_id = page_id
        self._incidents: dict[str, dict[str, Any]] = {}
        self._ids = 0

    def _add_routes(self, app: web.Application) -> None:
        base = "/v1/pages/{page_id}/incidents"
        app.router.add_post(base, self._on_create)
        app.router.add_get(base, self._on_list)
        app.router.add_get(base + "/{incident_id}", self._on_get)
        app.router.add_patch(base + "/{incident_id}", self._on_update)
        app.router.add_put(base + "/{incident_id}", self._on_update)

    @property
    def incidents(self) -> list[dict[str, Any]]:
        """The page's incidents (copies), newest first."""
        return [json.loads(canon(i)) for i in reversed(self._incidents.values())]

    def incident(self, incident_id: str) -> dict[str, Any] | None:
        found = self._incidents.get(incident_id)
        return json.loads(canon(found)) if found is not None else None

    # ---- handlers

    async def _guard(self, request: web.Request) -> tuple[Call, web.Response | None]:
        call = await self._record(request)
        if request.headers.get("Authorization") != f"OAuth {self.api_key}":
            return call, self._json(call, 401, {"error": "Could not authenticate"})
        if request.match_info["page_id"] != self.page_id:
            return call, self._json(call, 404, {"error": "Not found"})
        return call, None

    def _new_id(self) -> str:
        self._ids += 1
        digest = hashlib.sha256(f"{self.page_id}:{self._ids}".encode()).hexdigest()
        alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
        number = int(digest, 16)
        chars = []
        for _ in range(12):
            number, rem = divmod(number, 36)
            chars.append(alphabet[rem])
        return "".join(chars)

    @staticmethod
    def _fields(call: Call) -> tuple[dict[str, Any] | None, str | None]:
        body = call.body
        if not isinstance(body, dict) or not isinstance(body.get("incident"), dict):
            return None, "param is missing or the value is empty: incident"
        fields: dict[str, Any] = body["incident"]
        status = fields.get("status")
        if status is not None and status not in _INCIDENT_STATUSES:
            return None, f"Status is not included in the list: {status}"
        impact = fields.get("impact_override")
        if impact is not None and impact not in _IMPACTS:
            return None, f"Impact override is not included in the list: {impact}"
        components = fields.get("components")
        if components is not None and (
            not isinstance(components, dict) or any(c not in _COMPONENT_STATUSES for c in components.values())
        ):
            return None, "components must map component ids to a component status"
        component_ids = fields.get("component_ids")
        if component_ids is not None and (
            not isinstance(component_ids, list) or not all(isinstance(c, str) for c in component_ids)
        ):
            return None, "component_ids must be a list of component ids"
        return fields, None

    @staticmethod
    def _components(fields: Mapping[str, Any], previous: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        statuses: dict[str, str] = {c["id"]: c["status"] for c in previous}
        for cid in fields.get("component_ids") or []:
            statuses.setdefault(cid, "operational")
        for cid, status in (fields.get("components") or {}).items():
            statuses[cid] = status
        return [{"id": cid, "name": cid, "status": status} for cid, status in statuses.items()]

    def _update(self, incident: dict[str, Any], fields: Mapping[str, Any], now: str) -> None:
        status = fields.get("status") or incident["status"]
        if status == "resolved":
            for component in incident["components"]:
                component["status"] = "operational"
        if fields.get("status") is not None or fields.get("body") is not None:
            incident["incident_updates"].insert(
                0,
                {
                    "id": self._new_id(),
                    "incident_id": incident["id"],
                    "status": status,
                    "body": fields.get("body") or "",
                    "created_at": now,
                    "display_at": now,
                    "updated_at": now,
                    "deliver_notifications": bool(fields.get("deliver_notifications", True)),
                    "affected_components": [dict(c) for c in incident["components"]] or None,
                },
            )
        incident["status"] = status
        incident["updated_at"] = now
        if status == "monitoring" and incident["monitoring_at"] is None:
            incident["monitoring_at"] = now
        if status == "resolved" and incident["resolved_at"] is None:
            incident["resolved_at"] = now

    @staticmethod
    def _impact(incident: Mapping[str, Any]) -> str:
        if incident.get("impact_override"):
            return str(incident["impact_override"])
        worst = "none"
        for component in incident["components"]:
            impact = _IMPACT_OF_COMPONENT_STATUS.get(component["status"], "none")
            if _IMPACT_ORDER.index(impact) > _IMPACT_ORDER.index(worst):
                worst = impact
        return worst

    async def _on_create(self, request: web.Request) -> web.Response:
        call, refused = await self._guard(request)
        if refused is not None:
            return refused

        def create() -> Outcome:
            fields, problem = self._fields(call)
            if fields is None:
                return (400 if "missing" in (problem or "") else 422), {"error": problem}
            name = fields.get("name")
            if not isinstance(name, str) or not name.strip():
                return 422, {"error": "Name can't be blank"}
            now = now_iso()
            incident_id = self._new_id()
            incident: dict[str, Any] = {
                "id": incident_id,
                "page_id": self.page_id,
                "name": name,
                "status": "investigating",
                "impact_override": fields.get("impact_override"),
                "impact": "none",
                "created_at": now,
                "updated_at": now,
                "started_at": fields.get("started_at") or now,
                "monitoring_at": None,
                "resolved_at": None,
                "scheduled_for": fields.get("scheduled_for"),
                "scheduled_until": fields.get("scheduled_until"),
                "shortlink": f"http://stspg.io/{incident_id[:7]}",
                "backfilled": False,
                "postmortem_body": None,
                "metadata": fields.get("metadata") or {},
                "components": self._components(fields, []),
                "incident_updates": [],
            }
            self._update(incident, {**fields, "status": fields.get("status") or "investigating"}, now)
            incident["impact"] = self._impact(incident)
            self._incidents[incident_id] = incident
            return 201, json.loads(canon(incident))

        return await self._effect(
            request, call, kind="incident.create", fingerprint_of=call.body, apply=create, success_status=201
        )

    async def _on_update(self, request: web.Request) -> web.Response:
        call, refused = await self._guard(request)
        if refused is not None:
            return refused
        incident_id = request.match_info["incident_id"]

        def update() -> Outcome:
            incident = self._incidents.get(incident_id)
            if incident is None:
                return 404, {"error": "Not found"}
            fields, problem = self._fields(call)
            if fields is None:
                return (400 if "missing" in (problem or "") else 422), {"error": problem}
            if "name" in fields:
                if not isinstance(fields["name"], str) or not fields["name"].strip():
                    return 422, {"error": "Name can't be blank"}
                incident["name"] = fields["name"]
            if "impact_override" in fields:
                incident["impact_override"] = fields["impact_override"]
            if "metadata" in fields and isinstance(fields["metadata"], dict):
                incident["metadata"] = fields["metadata"]
            incident["components"] = self._components(fields, incident["components"])
            self._update(incident, fields, now_iso())
            incident["impact"] = self._impact(incident)
            return 200, json.loads(canon(incident))

        return await self._effect(request, call, kind="incident.update", fingerprint_of=call.body, apply=update)

    async def _on_get(self, request: web.Request) -> web.Response:
        call, refused = await self._guard(request)
        if refused is not None:
            return refused
        faulted = await self._read_fault(request, call)
        if faulted is not None:
            return faulted
        incident = self._incidents.get(request.match_info["incident_id"])
        if incident is None:
            return self._json(call, 404, {"error": "Not found"})
        return self._json(call, 200, incident)

    async def _on_list(self, request: web.Request) -> web.Response:
        call, refused = await self._guard(request)
        if refused is not None:
            return refused
        faulted = await self._read_fault(request, call)
        if faulted is not None:
            return faulted
        found = self.incidents
        query = request.query.get("q")
        if query:
            needle = query.lower()
            found = [
                i
                for i in found
                if needle in i["name"].lower() or any(needle in u["body"].lower() for u in i["incident_updates"])
            ]
        try:
            limit = int(request.query.get("limit", "100"))
            page = int(request.query.get("page", "1"))
        except ValueError:
            return self._json(call, 400, {"error": "limit and page must be integers"})
        start = max(0, (page - 1) * limit)
        return self._json(call, 200, found[start : start + max(0, limit)])
