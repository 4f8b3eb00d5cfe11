"""``response_url``: where an app answers a slash command or a click later (Bolt's ``respond()``).

The fake issues one URL per delivered command or interaction, records every JSON body POSTed to it
(``FakeSlackServer.responses``) and applies it as Slack would: ``delete_original``, ``replace_original``,
``response_type: "in_channel"`` (a message everyone sees) or, by default, an ephemeral message to the person.
A URL takes at most 5 responses.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from .block_rules import validate_blocks
from .errors import SlackError
from .workspace import FakeSlackWorkspace

__all__ = ["RecordedResponse", "ResponseTarget", "ResponseUrls"]

JSON = dict[str, Any]
MAX_USES = 5


@dataclass(frozen=True)
class ResponseTarget:
    """Where the command or interaction happened."""

    channel: str
    user: str
    message_ts: str | None = None
    is_ephemeral: bool = False
    thread_ts: str | None = None


@dataclass(frozen=True)
class RecordedResponse:
    url: str
    body: JSON
    target: ResponseTarget | None
    at: float
    applied: str  # "ephemeral", "in_channel", "replaced", "deleted", or an error


class ResponseUrls:
    def __init__(self, workspace: FakeSlackWorkspace) -> None:
        self._workspace = workspace
        self._targets: dict[str, ResponseTarget] = {}
        self._uses: dict[str, int] = {}
        self.responses: list[RecordedResponse] = []

    def issue(self, root_url: str, target: ResponseTarget) -> str:
        token = secrets.token_hex(12)
        self._targets[token] = target
        return f"{root_url}actions/{self._workspace.identity.team_id}/{secrets.randbelow(10**12)}/{token}"

    def respond(self, token: str, url: str, body: JSON) -> tuple[int, str]:
        """Records and applies one response; returns the HTTP status and text to answer with."""
        target = self._targets.get(token)
        if target is None:
            self.responses.append(RecordedResponse(url, body, None, time.time(), "invalid_token"))
            return 404, "invalid_token"
        self._uses[token] = self._uses.get(token, 0) + 1
        if self._uses[token] > MAX_USES:
            self.responses.append(RecordedResponse(url, body, target, time.time(), "used_url"))
            return 404, "used_url"
        try:
            applied = self._apply(target, body)
        except SlackError as exc:
            self.responses.append(RecordedResponse(url, body, target, time.time(), exc.code))
            return 400, exc.code
        self.responses.append(RecordedResponse(url, body, target, time.time(), applied))
        return 200, "ok"

    def _apply(self, target: ResponseTarget, body: JSON) -> str:
        messages, bot = self._workspace.messages, self._workspace.bot_user_id
        blocks = body.get("blocks")
        if blocks is not None:
            validate_blocks(blocks)
        text = str(body.get("text", ""))
        if _truthy(body.get("delete_original")) and target.message_ts:
            if target.is_ephemeral:
                messages.delete_ephemeral(target.message_ts)
            else:
                messages.delete(target.channel, target.message_ts)
            return "deleted"
        if _truthy(body.get("replace_original")) and target.message_ts:
            if target.is_ephemeral:
                messages.replace_ephemeral(target.message_ts, text=text, blocks=blocks)
            else:
                messages.update(target.channel, target.message_ts, editor=bot, text=text, blocks=blocks or [])
            return "replaced"
        thread_ts = body.get("thread_ts") or target.thread_ts
        if body.get("response_type") == "in_channel":
            messages.post(target.channel, text=text, user=bot, as_bot=True, blocks=blocks, thread_ts=thread_ts)
            return "in_channel"
        messages.post_ephemeral(target.channel, target.user, text=text, blocks=blocks, thread_ts=thread_ts)
        return "ephemeral"


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1")
