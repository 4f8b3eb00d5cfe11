"""What a Web API method handler gets: the workspace, the call's arguments, and the server's addresses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import SlackError
from ..model import Channel
from ..wire import Args
from ..workspace import FakeSlackWorkspace

__all__ = ["CallContext", "Handler"]

JSON = dict[str, Any]


@dataclass(frozen=True)
class CallContext:
    workspace: FakeSlackWorkspace
    args: Args
    base_url: str  # "http://127.0.0.1:PORT/" (the server root, not the /api/ prefix)
    token: str
    socket_url: Callable[[], str]  # issues a one-time Socket Mode websocket URL

    @property
    def bot(self) -> str:
        return self.workspace.bot_user_id

    def channel(self, name: str = "channel") -> Channel:
        """The channel named by argument ``name`` (an id or a ``#name``); ``channel_not_found`` otherwise."""
        return self.workspace.channel(self.args.required(name, error="channel_not_found"))

    def member_channel(self, name: str = "channel") -> Channel:
        """As :meth:`channel`, and the bot must be a member (``not_in_channel``)."""
        channel = self.channel(name)
        if self.bot not in channel.members:
            raise SlackError("channel_not_found" if channel.is_private else "not_in_channel")
        return channel


Handler = Callable[[CallContext], JSON]
