"""``GET /api/alerts/receipts/{id}``: what became of an alert notification answered 202 with that receipt.

``{"receipt", "source", "accepted", "received_at", "status": "pending"}`` while it waits for routing; once routed,
``"status": "routed"``, ``routed_at``, and ``alerts`` — one object per alert, in the notification's order, as the
synchronous answer gives them (``outcome``, ``scope`` and ``seq``, or ``reason`` when nothing was recorded) —
plus ``scopes`` and ``recorded``; ``"status": "failed"`` with ``error`` when routing was given up. 404 for a receipt
never issued (or routed more than a week ago and pruned).

Who may read: the alert sender (``Authorization: Bearer <DECKLOG_ALERT_TOKEN>``), a REST API client
(``DECKLOG_API_TOKEN``), and — when no API token is set — loopback clients, as for the rest of ``/api``.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, SecretStr

from decklog.adapters.http.hosts import is_loopback_host
from decklog.adapters.http.openapi import ApiDescription, Operation, PathParam
from decklog.core.alerts.intake import AlertIntake

ROUTE = "/api/alerts/receipts/{receipt}"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
NOT_RECORDED = ("duplicate", "ignored")
#: Headers a proxy adds: behind one, every client looks like loopback.
PROXIED = ("Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-IP", "Via")


class ReceiptOut(BaseModel):
    """A receipt's answer: ``pending``, then ``routed`` (with ``alerts``, ``scopes``, ``recorded``) or ``failed``."""

    model_config = ConfigDict(extra="allow")

    receipt: str
    source: str
    accepted: int
    received_at: str
    status: str


class Receipts:
    def __init__(self, intake: AlertIntake, *, alert_token: SecretStr | None, api_token: SecretStr | None) -> None:
        self.intake = intake
        self.tokens = [
            t.get_secret_value().strip().encode("utf-8")
            for t in (alert_token, api_token)
            if t is not None and t.get_secret_value().strip()
        ]
        self.loopback_ok = api_token is None or not api_token.get_secret_value().strip()

    def routes(self) -> list[tuple[str, str, Handler]]:
        return [("GET", ROUTE, self.get)]

    @staticmethod
    def describe(description: ApiDescription) -> None:
        """Registers the route in the API's OpenAPI description (it checks its own tokens: the alert sender's or
        the API's)."""
        description.add(
            Operation(
                "GET",
                ROUTE,
                "What became of an alert notification answered 202 with this receipt",
                "read",
                {200: ReceiptOut},
                params=(PathParam("receipt", {"type": "string"}),),
                tag="alerts",
            )
        )

    async def get(self, request: web.Request) -> web.StreamResponse:
        if not self._allowed(request):
            return web.json_response(
                {"error": "send Authorization: Bearer <DECKLOG_ALERT_TOKEN or DECKLOG_API_TOKEN>"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="decklog"'},
            )
        receipt = request.match_info["receipt"]
        stored = await self.intake.receipt(receipt) if receipt.isalnum() and len(receipt) <= 64 else None
        if stored is None:
            return web.json_response({"error": f"no receipt {receipt[:64]!r}"}, status=404)
        body: dict[str, Any] = {
            "receipt": stored.receipt,
            "source": stored.source,
            "accepted": stored.accepted,
            "received_at": _iso(stored.received_at),
        }
        if stored.outcomes is not None:
            alerts = stored.outcomes
            body.update(
                status="routed",
                routed_at=_iso(stored.routed_at),
                recorded=sum(1 for a in alerts if a.get("outcome") not in NOT_RECORDED),
                alerts=alerts,
                scopes=sorted({a["scope"] for a in alerts if a.get("scope")}),
            )
        elif stored.error is not None:
            body.update(status="failed", routed_at=_iso(stored.routed_at), error=stored.error)
        else:
            body["status"] = "pending"
        return web.json_response(body)

    def _allowed(self, request: web.Request) -> bool:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and given.strip():
            offered = given.strip().encode("utf-8", "replace")
            return any(hmac.compare_digest(offered, token) for token in self.tokens)
        return self.loopback_ok and _loopback(request)


def _loopback(request: web.Request) -> bool:
    if any(name in request.headers for name in PROXIED):
        return False
    remote = request.remote or ""
    try:
        if not ipaddress.ip_address(remote.split("%", 1)[0]).is_loopback:
            return False
    except ValueError:
        return False
    host = request.headers.get("Host", "").strip()
    return not host or is_loopback_host(_host_name(host))


def _host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8080`` → ``::1``)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, colon, port = host.rpartition(":")
    return name if colon and port.isdigit() and ":" not in name else host


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
