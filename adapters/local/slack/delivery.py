"""How the fake hands requests to the app: a signed HTTP POST (``SlackDriver``) or a Socket Mode envelope.

:class:`Delivery` gives both the same three calls (an event, a slash command, an interaction) and the same
answer, a :class:`DriverResponse`; every delivery is kept in ``log``. In Socket Mode an envelope the app never
acks (Bolt does not ack when no listener matched) answers ``DriverResponse(0, "")`` after ``ack_timeout``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from .driver import DriverResponse, SlackDriver
from .server import FakeSlackServer

__all__ = ["Delivered", "Delivery"]

JSON = dict[str, Any]
Kind = Literal["events_api", "slash_commands", "interactive"]


@dataclass(frozen=True)
class Delivered:
    kind: Kind
    payload: JSON
    response: DriverResponse
    at: float


class Delivery:
    def __init__(self, server: FakeSlackServer, *, ack_timeout: float = 3.0) -> None:
        self._server = server
        self.ack_timeout = ack_timeout
        self.driver: SlackDriver | None = None
        self.log: list[Delivered] = []
        self._retired: list[SlackDriver] = []

    @property
    def mode(self) -> str:
        return "http" if self.driver is not None else "socket"

    def use_http(self, events_url: str, signing_secret: str) -> SlackDriver:
        if self.driver is not None:
            self._retired.append(self.driver)
        self.driver = SlackDriver(events_url, signing_secret, server=self._server)
        return self.driver

    async def use_socket_mode(self) -> None:
        if self.driver is not None:
            self._retired.append(self.driver)
        self.driver = None

    async def close(self) -> None:
        for driver in [*self._retired, *([self.driver] if self.driver is not None else [])]:
            await driver.close()
        self._retired.clear()

    async def event(
        self, envelope: JSON, *, retry_num: int | None = None, retry_reason: str | None = None
    ) -> DriverResponse:
        if self.driver is not None:
            response = await self._http(
                self.driver.send_event_callback(envelope, retry_num=retry_num, retry_reason=retry_reason)
            )
        else:
            response = await self._socket("events_api", envelope, retry_num=retry_num, retry_reason=retry_reason)
        return self._logged("events_api", envelope, response)

    async def command(self, fields: dict[str, str]) -> DriverResponse:
        if self.driver is not None:
            response = await self._http(self.driver.send_form(fields))
        else:
            response = await self._socket("slash_commands", dict(fields))
        return self._logged("slash_commands", dict(fields), response)

    async def interaction(self, payload: JSON) -> DriverResponse:
        if self.driver is not None:
            response = await self._http(self.driver.send_interaction(payload))
        else:
            response = await self._socket("interactive", payload)
        return self._logged("interactive", payload, response)

    async def redeliver(self, delivered: Delivered, *, retry_num: int, retry_reason: str) -> DriverResponse:
        """Sends an event again, as Slack's retry (same ``event_id``, retry headers / envelope fields)."""
        if delivered.kind != "events_api":
            raise ValueError("Slack retries event deliveries only, not commands or interactions")
        return await self.event(delivered.payload, retry_num=retry_num, retry_reason=retry_reason)

    @staticmethod
    async def _http(sending: Coroutine[Any, Any, DriverResponse]) -> DriverResponse:
        try:
            return await sending
        except (TimeoutError, aiohttp.ClientError) as exc:
            return DriverResponse(0, f"{type(exc).__name__}: {exc}")

    async def _socket(
        self, kind: Kind, payload: JSON, *, retry_num: int | None = None, retry_reason: str | None = None
    ) -> DriverResponse:
        try:
            ack = await self._server.socket_send(
                kind, payload, timeout=self.ack_timeout, retry_attempt=retry_num, retry_reason=retry_reason
            )
        except AssertionError:
            return DriverResponse(0, "")
        return DriverResponse(200, json.dumps(ack["payload"]) if ack.get("payload") is not None else "")

    def _logged(self, kind: Kind, payload: JSON, response: DriverResponse) -> DriverResponse:
        self.log.append(Delivered(kind, payload, response, time.time()))
        return response
