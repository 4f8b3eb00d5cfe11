"""Records the fake workspace holds, and how each one looks on Slack's wire (``to_api``).

Everything here is plain data. The shapes follow what the Web API returns (``conversations.history`` messages,
``users.info`` users, ``views.*`` views, ``files.info`` files) closely enough for Bolt and for a renderer.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["Channel", "Ephemeral", "Identity", "Message", "SlackFile", "User", "View"]

JSON = dict[str, Any]


@dataclass(frozen=True)
class Identity:
    """Who the workspace and the installed app are."""

    team_id: str = "T0DECKLOG"
    team_name: str = "decklog sandbox"
    domain: str = "decklog-sandbox"
    app_id: str = "A0DECKLOG"
    bot_user_id: str = "U0BOT"
    bot_id: str = "B0BOT"
    bot_name: str = "decklog"

    @property
    def url(self) -> str:
        return f"https://{self.domain}.slack.com/"


@dataclass
class User:
    id: str
    name: str
    real_name: str
    team_id: str
    is_bot: bool = False
    bot_id: str | None = None
    tz: str = "UTC"

    def to_api(self) -> JSON:
        profile: JSON = {
            "real_name": self.real_name,
            "display_name": self.name,
            "real_name_normalized": self.real_name,
            "display_name_normalized": self.name,
            "team": self.team_id,
        }
        if self.bot_id:
            profile["bot_id"] = self.bot_id
        else:
            profile["email"] = f"{self.name}@example.com"
        return {
            "id": self.id,
            "team_id": self.team_id,
            "name": self.name,
            "real_name": self.real_name,
            "deleted": False,
            "is_bot": self.is_bot,
            "is_app_user": False,
            "is_admin": False,
            "tz": self.tz,
            "profile": profile,
        }


@dataclass
class Channel:
    id: str
    name: str
    created: int
    creator: str
    is_private: bool = False
    is_im: bool = False
    members: list[str] = field(default_factory=list)
    topic: str = ""
    purpose: str = ""
    is_archived: bool = False

    def to_api(self, viewer: str | None = None) -> JSON:
        body: JSON = {
            "id": self.id,
            "created": self.created,
            "creator": self.creator,
            "is_archived": self.is_archived,
            "is_general": self.name == "general",
            "is_shared": False,
            "is_ext_shared": False,
            "is_org_shared": False,
            "num_members": len(self.members),
            "topic": {"value": self.topic, "creator": "", "last_set": 0},
            "purpose": {"value": self.purpose, "creator": "", "last_set": 0},
        }
        if self.is_im:
            body.update(is_im=True, user=next((m for m in self.members if m != viewer), viewer))
        else:
            body.update(
                name=self.name,
                name_normalized=self.name,
                is_channel=not self.is_private,
                is_group=self.is_private,
                is_im=False,
                is_mpim=False,
                is_private=self.is_private,
            )
        if viewer is not None:
            body["is_member"] = viewer in self.members
        return body


@dataclass
class Message:
    """One message in a channel: a human's (``user``) or the app's (``bot_id`` set, ``user`` = bot user)."""

    channel: str
    ts: str
    text: str
    user: str | None = None
    bot_id: str | None = None
    app_id: str | None = None
    team: str | None = None
    blocks: list[JSON] | None = None
    attachments: list[JSON] | None = None
    thread_ts: str | None = None
    parent_user_id: str | None = None
    metadata: JSON | None = None
    subtype: str | None = None
    reactions: dict[str, list[str]] = field(default_factory=dict)
    edited: JSON | None = None
    files: list[JSON] = field(default_factory=list)
    reply_users: list[str] = field(default_factory=list)
    reply_count: int = 0
    latest_reply: str | None = None
    client_msg_id: str | None = None

    @property
    def is_reply(self) -> bool:
        return self.thread_ts is not None and self.thread_ts != self.ts

    def to_api(self, *, include_metadata: bool = True) -> JSON:
        body: JSON = {"type": "message", "ts": self.ts, "text": self.text}
        if self.subtype:
            body["subtype"] = self.subtype
        if self.user:
            body["user"] = self.user
        if self.bot_id:
            body["bot_id"] = self.bot_id
            body["app_id"] = self.app_id
        if self.team:
            body["team"] = self.team
        if self.client_msg_id:
            body["client_msg_id"] = self.client_msg_id
        if self.blocks is not None:
            body["blocks"] = copy.deepcopy(self.blocks)
        if self.attachments is not None:
            body["attachments"] = copy.deepcopy(self.attachments)
        if self.files:
            body["files"] = copy.deepcopy(self.files)
            body["upload"] = False
        if self.edited:
            body["edited"] = dict(self.edited)
        if self.thread_ts:
            body["thread_ts"] = self.thread_ts
        if self.is_reply and self.parent_user_id:
            body["parent_user_id"] = self.parent_user_id
        if self.reply_count:
            body.update(
                reply_count=self.reply_count,
                reply_users_count=len(self.reply_users),
                latest_reply=self.latest_reply,
                reply_users=list(self.reply_users),
                is_locked=False,
                subscribed=False,
            )
        if self.reactions:
            body["reactions"] = [
                {"name": name, "users": list(users), "count": len(users)} for name, users in self.reactions.items()
            ]
        if include_metadata and self.metadata is not None:
            body["metadata"] = copy.deepcopy(self.metadata)
        return body


@dataclass
class Ephemeral:
    """A message only ``user`` sees (``chat.postEphemeral``, a slash command's ack text, ``respond()``)."""

    channel: str
    user: str
    ts: str
    text: str
    blocks: list[JSON] | None = None
    thread_ts: str | None = None

    def to_api(self) -> JSON:
        body: JSON = {"type": "message", "subtype": "ephemeral", "ts": self.ts, "text": self.text}
        if self.blocks is not None:
            body["blocks"] = copy.deepcopy(self.blocks)
        if self.thread_ts:
            body["thread_ts"] = self.thread_ts
        return body


@dataclass
class View:
    """A modal (in a user's stack) or an App Home tab (one per user). ``body`` is the view the app sent."""

    id: str
    user: str
    body: JSON
    hash: str
    root_view_id: str
    previous_view_id: str | None = None
    state_values: JSON = field(default_factory=dict)
    errors: JSON | None = None

    @property
    def type(self) -> str:
        return str(self.body.get("type", "modal"))

    @property
    def external_id(self) -> str:
        return str(self.body.get("external_id", ""))

    @property
    def callback_id(self) -> str:
        return str(self.body.get("callback_id", ""))

    @property
    def private_metadata(self) -> str:
        return str(self.body.get("private_metadata", ""))

    def to_api(self, identity: Identity) -> JSON:
        body = copy.deepcopy(self.body)
        body.setdefault("blocks", [])
        body.update(
            id=self.id,
            team_id=identity.team_id,
            type=self.type,
            private_metadata=self.private_metadata,
            callback_id=self.callback_id,
            external_id=self.external_id,
            state={"values": copy.deepcopy(self.state_values)},
            hash=self.hash,
            clear_on_close=bool(self.body.get("clear_on_close", False)),
            notify_on_close=bool(self.body.get("notify_on_close", False)),
            root_view_id=self.root_view_id,
            previous_view_id=self.previous_view_id,
            app_id=identity.app_id,
            app_installed_team_id=identity.team_id,
            bot_id=identity.bot_id,
        )
        return body


@dataclass
class SlackFile:
    id: str
    name: str
    title: str
    length: int
    user: str
    created: int
    content: bytes | None = None
    alt_txt: str | None = None
    shares: dict[str, list[JSON]] = field(default_factory=dict)

    @property
    def uploaded(self) -> bool:
        return self.content is not None

    def to_api(self, *, download_base: str = "") -> JSON:
        ext = self.name.rsplit(".", 1)[-1].lower() if "." in self.name else "binary"
        url = f"{download_base}files/{self.id}/{self.name}"
        body: JSON = {
            "id": self.id,
            "created": self.created,
            "timestamp": self.created,
            "name": self.name,
            "title": self.title,
            "mimetype": _MIMETYPES.get(ext, "application/octet-stream"),
            "filetype": ext,
            "pretty_type": ext.upper(),
            "user": self.user,
            "size": len(self.content) if self.content is not None else self.length,
            "mode": "hosted",
            "is_public": bool(self.shares),
            "url_private": url,
            "url_private_download": url,
            "permalink": url,
            "channels": sorted(c for c, s in self.shares.items() if s),
            "shares": {"public": copy.deepcopy(self.shares)} if self.shares else {},
        }
        if self.alt_txt:
            body["alt_txt"] = self.alt_txt
        return body


_MIMETYPES = MappingProxyType(
    {
        "md": "text/markdown",
        "txt": "text/plain",
        "json": "application/json",
        "html": "text/html",
        "csv": "text/csv",
        "png": "image/png",
        "pdf": "application/pdf",
    }
)
