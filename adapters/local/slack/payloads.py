"""What Slack sends to an app, built from the fake workspace: slash commands, events, interactions.

Shapes follow Slack's: a slash command is a flat dict of strings (form fields over HTTP, the envelope payload
in Socket Mode); an event is wrapped in an ``event_callback`` with ``event_id``, ``event_time`` and
``authorizations`` naming the bot; interactions (``block_actions``, ``view_submission``, ``view_closed``)
carry ``user``, ``team``, ``trigger_id``, and for messages ``container``, ``channel``, ``message`` and
``response_url``.
"""

from __future__ import annotations

from typing import Any

from .model import Channel, Identity, Message, User, View
from .workspace import FakeSlackWorkspace

__all__ = ["PayloadFactory"]

JSON = dict[str, Any]


class PayloadFactory:
    def __init__(self, workspace: FakeSlackWorkspace, *, verification_token: str = "fake-verification-token") -> None:
        self._ws = workspace
        self.verification_token = verification_token

    @property
    def _identity(self) -> Identity:
        return self._ws.identity

    def _user(self, user: User) -> JSON:
        return {"id": user.id, "username": user.name, "name": user.name, "team_id": user.team_id}

    def _team(self) -> JSON:
        return {"id": self._identity.team_id, "domain": self._identity.domain}

    @staticmethod
    def channel_type(channel: Channel) -> str:
        return "im" if channel.is_im else "group" if channel.is_private else "channel"

    # -- slash commands --------------------------------------------------------------------------------------

    def slash_command(
        self, user: User, channel: Channel, *, command: str, text: str, trigger_id: str, response_url: str
    ) -> dict[str, str]:
        return {
            "token": self.verification_token,
            "team_id": self._identity.team_id,
            "team_domain": self._identity.domain,
            "channel_id": channel.id,
            "channel_name": "directmessage" if channel.is_im else channel.name,
            "user_id": user.id,
            "user_name": user.name,
            "command": command,
            "text": text,
            "api_app_id": self._identity.app_id,
            "is_enterprise_install": "false",
            "response_url": response_url,
            "trigger_id": trigger_id,
        }

    # -- events ----------------------------------------------------------------------------------------------

    def event_callback(self, event: JSON, *, event_id: str | None = None, event_time: int | None = None) -> JSON:
        identity = self._identity
        return {
            "token": self.verification_token,
            "team_id": identity.team_id,
            "context_team_id": identity.team_id,
            "context_enterprise_id": None,
            "api_app_id": identity.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or self._ws.ids.mint("Ev") + self._ws.ids.token(4).upper(),
            "event_time": int(self._ws.clock.now()) if event_time is None else event_time,
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": identity.team_id,
                    "user_id": identity.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": "4-" + self._ws.ids.token(16),
        }

    def url_verification(self, challenge: str) -> JSON:
        return {"token": self.verification_token, "challenge": challenge, "type": "url_verification"}

    def message_event(self, message: Message, channel: Channel) -> JSON:
        event = message.to_api(include_metadata=False)
        event.update(channel=channel.id, event_ts=message.ts, channel_type=self.channel_type(channel))
        return event

    def app_mention_event(self, message: Message) -> JSON:
        event = message.to_api(include_metadata=False)
        event.pop("reply_count", None)
        event.update(type="app_mention", channel=message.channel, event_ts=message.ts)
        return event

    def message_changed_event(self, channel: Channel, previous: JSON, message: Message) -> JSON:
        ts = self._ws.clock.next()
        return {
            "type": "message",
            "subtype": "message_changed",
            "message": message.to_api(include_metadata=False),
            "previous_message": previous,
            "channel": channel.id,
            "hidden": True,
            "ts": ts,
            "event_ts": ts,
            "channel_type": self.channel_type(channel),
        }

    def message_deleted_event(self, channel: Channel, previous: JSON) -> JSON:
        ts = self._ws.clock.next()
        return {
            "type": "message",
            "subtype": "message_deleted",
            "previous_message": previous,
            "channel": channel.id,
            "hidden": True,
            "deleted_ts": previous["ts"],
            "ts": ts,
            "event_ts": ts,
            "channel_type": self.channel_type(channel),
        }

    def reaction_event(self, kind: str, user: User, name: str, message: Message) -> JSON:
        event: JSON = {
            "type": kind,
            "user": user.id,
            "reaction": name,
            "item": {"type": "message", "channel": message.channel, "ts": message.ts},
            "event_ts": self._ws.clock.next(),
        }
        if message.user:
            event["item_user"] = message.user
        return event

    def app_home_opened_event(self, user: User, channel: Channel, view: View | None, *, tab: str = "home") -> JSON:
        event: JSON = {
            "type": "app_home_opened",
            "user": user.id,
            "channel": channel.id,
            "tab": tab,
            "event_ts": self._ws.clock.next(),
        }
        if view is not None and tab == "home":
            event["view"] = view.to_api(self._identity)
        return event

    # -- interactions ----------------------------------------------------------------------------------------

    def block_actions(
        self,
        user: User,
        *,
        actions: list[JSON],
        trigger_id: str,
        container: JSON,
        state_values: JSON,
        channel: Channel | None = None,
        message: JSON | None = None,
        view: View | None = None,
        response_url: str | None = None,
    ) -> JSON:
        payload: JSON = {
            "type": "block_actions",
            "user": self._user(user),
            "api_app_id": self._identity.app_id,
            "token": self.verification_token,
            "container": container,
            "trigger_id": trigger_id,
            "team": self._team(),
            "enterprise": None,
            "is_enterprise_install": False,
        }
        if channel is not None:
            payload["channel"] = {
                "id": channel.id,
                "name": "directmessage" if channel.is_im else channel.name,
            }
        if message is not None:
            payload["message"] = message
        if view is not None:
            payload["view"] = view.to_api(self._identity)
        payload["state"] = {"values": state_values}
        if response_url is not None:
            payload["response_url"] = response_url
        payload["actions"] = actions
        return payload

    def message_action(
        self,
        user: User,
        channel: Channel,
        message: JSON,
        *,
        callback_id: str,
        trigger_id: str,
        action_ts: str,
        response_url: str,
    ) -> JSON:
        """A message shortcut (Slack's ``message_action`` interaction): the person, the channel and the message."""
        return {
            "type": "message_action",
            "token": self.verification_token,
            "action_ts": action_ts,
            "team": self._team(),
            "user": self._user(user),
            "channel": {"id": channel.id, "name": "directmessage" if channel.is_im else channel.name},
            "is_enterprise_install": False,
            "enterprise": None,
            "callback_id": callback_id,
            "trigger_id": trigger_id,
            "response_url": response_url,
            "message_ts": message.get("ts", ""),
            "message": message,
        }

    def view_submission(self, user: User, view: JSON, *, trigger_id: str) -> JSON:
        return {
            "type": "view_submission",
            "team": self._team(),
            "user": self._user(user),
            "api_app_id": self._identity.app_id,
            "token": self.verification_token,
            "trigger_id": trigger_id,
            "view": view,
            "response_urls": [],
            "is_enterprise_install": False,
            "enterprise": None,
        }

    def view_closed(self, user: User, view: JSON, *, is_cleared: bool = False) -> JSON:
        return {
            "type": "view_closed",
            "team": self._team(),
            "user": self._user(user),
            "api_app_id": self._identity.app_id,
            "token": self.verification_token,
            "view": view,
            "is_cleared": is_cleared,
            "is_enterprise_install": False,
            "enterprise": None,
        }
