"""What Slack does with the app's answer to a slash command or a view submission.

A slash command's ack text (or ``{"text"|"blocks", "response_type"}`` JSON) becomes an ephemeral message to
the person, or a channel message with ``response_type: "in_channel"``; a failed delivery shows Slack's
"failed with the error" notice. A view submission's ``response_action`` (``errors``, ``update``, ``push``,
``clear``) keeps, replaces, stacks or closes modals; an empty ack closes the submitted view.
"""

from __future__ import annotations

import json
from typing import Any

from .blocks import assign_ids
from .driver import DriverResponse
from .model import Channel, User, View
from .workspace import FakeSlackWorkspace

__all__ = ["apply_command_ack", "apply_submission_ack"]

JSON = dict[str, Any]


def _body(response: DriverResponse) -> JSON | str:
    text = response.body.strip()
    if not text:
        return ""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return text
    return parsed if isinstance(parsed, dict) else text


def apply_command_ack(
    workspace: FakeSlackWorkspace, user: User, channel: Channel, command: str, response: DriverResponse
) -> None:
    messages = workspace.messages
    if response.status != 200:
        error = "operation_timeout" if response.status == 0 else "dispatch_failed"
        notice = f'{command} failed with the error "{error}"'
        messages.post_ephemeral(channel.id, user.id, text=notice)
        return
    body = _body(response)
    if not body:
        return
    if isinstance(body, str):
        messages.post_ephemeral(channel.id, user.id, text=body)
        return
    text, blocks = str(body.get("text", "")), body.get("blocks")
    if body.get("response_type") == "in_channel":
        messages.post(channel.id, text=text, user=workspace.bot_user_id, as_bot=True, blocks=blocks)
    elif text or blocks:
        messages.post_ephemeral(channel.id, user.id, text=text, blocks=blocks)


def apply_submission_ack(workspace: FakeSlackWorkspace, view: View, response: DriverResponse) -> str:
    """Applies the ack to the modal stack; returns what happened (``closed``, ``errors``, ...)."""
    views = workspace.views
    if response.status != 200:
        return "kept"  # Slack shows "We had some trouble connecting" and leaves the modal open
    body = _body(response)
    action = body.get("response_action") if isinstance(body, dict) else None

    def new_id() -> str:
        return workspace.ids.token(3)

    if isinstance(body, dict) and action == "errors":
        view.errors = dict(body.get("errors", {}))
        return "errors"
    if isinstance(body, dict) and action == "update":
        new = dict(body["view"])
        views.update(view, {**new, "blocks": assign_ids(new.get("blocks", []), new_id)})
        return "updated"
    if isinstance(body, dict) and action == "push":
        new = dict(body["view"])
        views.push(view.user, {**new, "blocks": assign_ids(new.get("blocks", []), new_id)})
        return "pushed"
    if action == "clear":
        views.clear(view.user)
        return "cleared"
    views.close(view.id)
    return "closed"
