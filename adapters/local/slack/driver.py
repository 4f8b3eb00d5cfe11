"""``SlackDriver``: acts as Slack delivering requests to an app over HTTP, signed exactly as Slack signs.

Slash commands go as form fields, interactions as a form with one ``payload=<json>`` field, events as JSON
``event_callback`` envelopes; each request carries ``X-Slack-Request-Timestamp`` and ``X-Slack-Signature``.
Every method returns a :class:`DriverResponse` ``(status, body)``.

>>> driver = SlackDriver("http://127.0.0.1:8080/slack/events", "secret", server=fake_server)  # doctest: +SKIP
>>> status, body = await driver.slash_command("declare db down", user="U0ALICE", channel="C0ALERTS")
>>> status, _ = await driver.signed_with(signature="v0=forged").event({"type": "app_mention", ...})
"""

from __future__ import annotations

import json
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, Self
from urllib.parse import urlencode

import aiohttp

from .model import Channel, User
from .payloads import PayloadFactory
from .signing import signed_headers
from .workspace import FakeSlackWorkspace

if TYPE_CHECKING:
    from .server import FakeSlackServer

__all__ = ["DriverResponse", "SlackDriver"]

JSON = dict[str, Any]


class DriverResponse(NamedTuple):
    """The app's answer: HTTP status and body text (Socket Mode: 200 and the ack's payload as JSON)."""

    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body) if self.body.strip() else None


class SlackDriver:
    def __init__(
        self,
        events_url: str,
        signing_secret: str,
        server: FakeSlackServer | None = None,
        *,
        workspace: FakeSlackWorkspace | None = None,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 10.0,
    ) -> None:
        """``server`` (a started :class:`FakeSlackServer`) makes trigger ids usable with ``views.open`` and
        ``response_url`` land in ``server.responses``; without it they are well-formed but unknown."""
        self.events_url = events_url
        self.signing_secret = signing_secret
        self.server = server
        self.workspace = workspace or (server.workspace if server is not None else FakeSlackWorkspace())
        self.payloads = PayloadFactory(self.workspace)
        self.timeout = timeout
        self._session = session
        self._owns_session = session is None
        self._timestamp: int | str | None = None
        self._signature: str | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def signed_with(self, *, timestamp: int | str | None = None, signature: str | None = None) -> SlackDriver:
        """A driver sharing this one's session that signs with a forced timestamp and/or signature."""
        other = SlackDriver(
            self.events_url, self.signing_secret, self.server, workspace=self.workspace, timeout=self.timeout
        )
        other._session, other._owns_session = self._session_now(), False
        other.payloads = self.payloads
        other._timestamp, other._signature = timestamp, signature
        return other

    def stale(self, seconds: int = 600) -> SlackDriver:
        """A driver whose requests are signed correctly but ``seconds`` in the past (Bolt allows 300)."""
        return self.signed_with(timestamp=int(time.time()) - seconds)

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
            self._owns_session = True
        return self._session

    # -- raw delivery ----------------------------------------------------------------------------------------

    async def post(
        self,
        body: bytes,
        content_type: str,
        *,
        retry_num: int | None = None,
        retry_reason: str | None = None,
    ) -> DriverResponse:
        headers = {"Content-Type": content_type, "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)"}
        headers.update(signed_headers(self.signing_secret, body, timestamp=self._timestamp, signature=self._signature))
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = retry_reason or "http_timeout"
        async with self._session_now().post(self.events_url, data=body, headers=headers) as response:
            return DriverResponse(response.status, await response.text())

    async def send_event_callback(
        self, envelope: JSON, *, retry_num: int | None = None, retry_reason: str | None = None
    ) -> DriverResponse:
        body = json.dumps(envelope).encode()
        return await self.post(body, "application/json", retry_num=retry_num, retry_reason=retry_reason)

    async def send_form(self, fields: dict[str, str]) -> DriverResponse:
        return await self.post(urlencode(fields).encode(), "application/x-www-form-urlencoded")

    async def send_interaction(self, payload: JSON) -> DriverResponse:
        return await self.send_form({"payload": json.dumps(payload)})

    # -- what Slack sends ------------------------------------------------------------------------------------

    def new_trigger_id(self, user: str) -> str:
        if self.server is not None:
            return self.workspace.issue_trigger(user)
        return f"{int(time.time())}.{abs(hash(user)) % 10**9}.{self.workspace.ids.token(16)}"

    def new_response_url(
        self, channel: str, user: str, *, message_ts: str | None = None, thread_ts: str | None = None
    ) -> str:
        if self.server is not None:
            return self.server.response_url(channel, user, message_ts=message_ts, thread_ts=thread_ts)
        team = self.workspace.identity.team_id
        return f"https://hooks.slack.com/actions/{team}/{int(time.time())}/{self.workspace.ids.token(12)}"

    def _who(self, user: str, channel: str) -> tuple[User, Channel]:
        return self.workspace.user(user), self.workspace.channel(channel)

    async def slash_command(
        self,
        text: str,
        user: str,
        channel: str,
        command: str = "/incident",
        trigger_id: str | None = None,
    ) -> DriverResponse:
        person, room = self._who(user, channel)
        fields = self.payloads.slash_command(
            person,
            room,
            command=command,
            text=text,
            trigger_id=trigger_id or self.new_trigger_id(person.id),
            response_url=self.new_response_url(room.id, person.id),
        )
        return await self.send_form(fields)

    async def event(
        self,
        event: JSON,
        event_id: str | None = None,
        retry_num: int | None = None,
        retry_reason: str | None = None,
    ) -> DriverResponse:
        envelope = self.payloads.event_callback(event, event_id=event_id)
        return await self.send_event_callback(envelope, retry_num=retry_num, retry_reason=retry_reason)

    async def block_action(
        self,
        user: str,
        channel: str,
        message_ts: str,
        action_id: str,
        value: str | None = None,
        block_id: str = "actions",
        selected_option: JSON | None = None,
        thread_ts: str | None = None,
        container: JSON | None = None,
    ) -> DriverResponse:
        """A click (``value``) or a select (``selected_option``) on a message, as ``block_actions``."""
        person, room = self._who(user, channel)
        stored = self.workspace.messages.find(room.id, message_ts)
        message = stored.to_api() if stored is not None else {"type": "message", "ts": message_ts, "text": ""}
        action: JSON = {
            "action_id": action_id,
            "block_id": block_id,
            "action_ts": self.workspace.clock.next(),
        }
        if selected_option is not None:
            action.update(type="static_select", selected_option=selected_option)
        else:
            action.update(type="button", text={"type": "plain_text", "text": action_id}, value=value or "")
        default_container: JSON = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": room.id,
            "is_ephemeral": False,
        }
        if thread_ts:
            default_container["thread_ts"] = thread_ts
        payload = self.payloads.block_actions(
            person,
            actions=[action],
            trigger_id=self.new_trigger_id(person.id),
            container=container or default_container,
            state_values={},
            channel=room,
            message=message,
            response_url=self.new_response_url(room.id, person.id, message_ts=message_ts, thread_ts=thread_ts),
        )
        return await self.send_interaction(payload)

    async def view_submission(
        self,
        user: str,
        view_callback_id: str,
        state_values: JSON,
        private_metadata: str = "",
        view_id: str | None = None,
    ) -> DriverResponse:
        person = self.workspace.user(user)
        vid = view_id or self.workspace.ids.mint("V")
        view: JSON = {
            "id": vid,
            "team_id": self.workspace.identity.team_id,
            "type": "modal",
            "callback_id": view_callback_id,
            "private_metadata": private_metadata,
            "blocks": [],
            "state": {"values": state_values},
            "hash": self.workspace.ids.token(6),
            "title": {"type": "plain_text", "text": view_callback_id[:24] or "view"},
            "root_view_id": vid,
            "previous_view_id": None,
            "app_id": self.workspace.identity.app_id,
            "external_id": "",
            "bot_id": self.workspace.identity.bot_id,
        }
        payload = self.payloads.view_submission(person, view, trigger_id=self.new_trigger_id(person.id))
        return await self.send_interaction(payload)

    async def url_verification(self, challenge: str) -> DriverResponse:
        return await self.send_event_callback(self.payloads.url_verification(challenge))
