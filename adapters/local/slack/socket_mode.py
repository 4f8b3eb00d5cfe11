"""Socket Mode, Slack's side: the websocket the app's ``SocketModeClient`` connects to; envelopes, acks.

Speaks what ``slack_sdk.socket_mode.aiohttp.SocketModeClient`` expects: a one-time ``ws://`` URL from
``apps.connections.open``; a ``{"type": "hello"}`` first message; pongs to its pings; envelopes
``{"envelope_id", "type", "payload", "accepts_response_payload"[, "retry_attempt", "retry_reason"]}``;
acks ``{"envelope_id"[, "payload"]}`` back; ``{"type": "disconnect", "reason": ...}`` to make it reconnect.

An app may hold several connections at once (Slack allows 10; several replicas of one app each hold one). By
default an envelope goes to the newest open connection. With ``spread = True`` envelopes go round-robin over the
open connections, as Slack spreads them, and a retry of an event (``retry_attempt`` > 0) goes to a connection
other than the one that carried that ``event_id`` last, when there is one (Slack redelivers an unacknowledged
envelope wherever it likes). ``carried`` says which connection (numbered from 1 in the order they opened) got
each envelope.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import uuid
from typing import Any

from aiohttp import WSMsgType, web

from .model import Identity

__all__ = ["SocketModeHub"]

JSON = dict[str, Any]
_log = logging.getLogger(__name__)


def _accepts_response_payload(kind: str, payload: JSON) -> bool:
    if kind == "slash_commands":
        return True
    if kind == "interactive":
        return payload.get("type") in ("view_submission", "block_suggestion")
    return False


class SocketModeHub:
    def __init__(self, *, identity: Identity) -> None:
        self._identity = identity
        self._tickets: set[str] = set()
        self._connections: list[web.WebSocketResponse] = []
        self._pending: dict[str, asyncio.Future[JSON]] = {}
        self.sent: list[JSON] = []
        self.acks: list[JSON] = []
        self.connections_opened = 0
        self.spread = False
        self.carried: dict[str, int] = {}  # envelope_id -> the connection (1, 2, ...) it was sent on
        self._numbers: dict[int, int] = {}  # id(ws) -> its number
        self._last_carrier: dict[str, int] = {}  # event_id -> the connection that carried it last
        self._turn = 0

    # -- connecting ------------------------------------------------------------------------------------------

    def issue_url(self, ws_base: str) -> str:
        """A single-use websocket URL, as ``apps.connections.open`` returns."""
        ticket = secrets.token_hex(16)
        self._tickets.add(ticket)
        return f"{ws_base}socket?ticket={ticket}&app_id={self._identity.app_id}"

    @property
    def connections(self) -> int:
        return sum(1 for ws in self._connections if not ws.closed)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            raise web.HTTPUnauthorized(text="invalid or already used socket ticket")
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._connections.append(ws)
        self.connections_opened += 1
        self._numbers[id(ws)] = self.connections_opened
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": self.connections,
                "debug_info": {
                    "host": "applink-fake",
                    "build_number": 1,
                    "approximate_connection_time": 18060,
                },
                "connection_info": {"app_id": self._identity.app_id},
            }
        )
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._on_text(message.data)
        finally:
            if ws in self._connections:
                self._connections.remove(ws)
        return ws

    def _on_text(self, data: str) -> None:
        try:
            ack = json.loads(data)
        except json.JSONDecodeError:
            _log.warning("fake socket mode: ignoring a non-JSON message: %r", data[:200])
            return
        if not isinstance(ack, dict) or "envelope_id" not in ack:
            return
        self.acks.append(ack)
        future = self._pending.get(str(ack["envelope_id"]))
        if future is not None and not future.done():
            future.set_result(ack)

    async def wait_connected(self, *, timeout: float = 5.0) -> None:
        await self._connection(timeout, "a Socket Mode connection")

    async def _connection(self, timeout: float, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.connections == 0:
            if loop.time() >= deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.01)

    # -- sending ---------------------------------------------------------------------------------------------

    async def send(
        self,
        kind: str,
        payload: JSON,
        *,
        timeout: float = 5.0,
        accepts_response_payload: bool | None = None,
        retry_attempt: int | None = None,
        retry_reason: str | None = None,
    ) -> JSON:
        """Delivers one envelope to the newest open connection and returns the app's ack."""
        await self._connection(timeout, f"a Socket Mode connection to deliver {kind}")
        envelope: JSON = {
            "envelope_id": str(uuid.uuid4()),
            "type": kind,
            "payload": payload,
            "accepts_response_payload": (
                _accepts_response_payload(kind, payload)
                if accepts_response_payload is None
                else accepts_response_payload
            ),
        }
        if kind == "events_api":
            envelope["retry_attempt"] = retry_attempt or 0
            envelope["retry_reason"] = retry_reason or ""
        future: asyncio.Future[JSON] = asyncio.get_running_loop().create_future()
        self._pending[envelope["envelope_id"]] = future
        try:
            ws = self._pick(payload.get("event_id") if kind == "events_api" else None, bool(retry_attempt))
            number = self._numbers.get(id(ws), 0)
            self.carried[envelope["envelope_id"]] = number
            if kind == "events_api" and payload.get("event_id"):
                self._last_carrier[str(payload["event_id"])] = number
            self.sent.append(envelope)
            await ws.send_json(envelope)
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise AssertionError(
                f"no ack for the {kind} envelope {envelope['envelope_id']} within {timeout}s; Bolt acks only "
                f"when a listener matched and called ack() (payload: {json.dumps(payload)[:300]})"
            ) from None
        finally:
            self._pending.pop(envelope["envelope_id"], None)

    def _pick(self, event_id: Any, retry: bool) -> web.WebSocketResponse:
        """The connection an envelope goes to: the newest, or (``spread``) the next in turn, another than the
        last carrier of a retried event where there is one."""
        open_ = [ws for ws in self._connections if not ws.closed]
        if not self.spread or len(open_) == 1:
            return open_[-1]
        if retry and event_id is not None:
            last = self._last_carrier.get(str(event_id))
            others = [ws for ws in open_ if self._numbers.get(id(ws)) != last]
            if others and len(others) < len(open_):
                return others[0]
        self._turn += 1
        return open_[self._turn % len(open_)]

    def connection_numbers(self) -> list[int]:
        """The numbers of the open connections, oldest first."""
        return [self._numbers.get(id(ws), 0) for ws in self._connections if not ws.closed]

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Asks every client to reconnect (``{"type": "disconnect"}``), as Slack does now and then."""
        for ws in list(self._connections):
            if not ws.closed:
                await ws.send_json({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}})

    async def drop(self) -> None:
        """Closes every connection from the server side (a network blip, a deploy on Slack's side)."""
        for ws in list(self._connections):
            await ws.close(code=1011, message=b"fake slack dropped the connection")

    async def close(self) -> None:
        for ws in list(self._connections):
            await ws.close(code=1001, message=b"server shutdown")
        self._connections.clear()
