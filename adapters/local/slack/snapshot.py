"""A JSON picture of the whole fake workspace, for a web page to render (the local sandbox).

Channels with their messages (threads nested under their parent as ``replies``), people, each person's
ephemeral messages, App Home and open modals, and files, all in Slack's wire shapes. Pair it with the change
feed (``FakeSlackWorkspace.subscribe``) for live updates.
"""

from __future__ import annotations

from typing import Any

from .workspace import FakeSlackWorkspace

__all__ = ["workspace_snapshot"]

JSON = dict[str, Any]


def workspace_snapshot(workspace: FakeSlackWorkspace) -> JSON:
    identity = workspace.identity
    channels = []
    for channel in workspace.directory.channels():
        messages = []
        for message in workspace.messages.top_level(channel.id):
            shape = message.to_api()
            if message.reply_count and not message.is_reply:
                shape["replies"] = [m.to_api() for m in workspace.messages.thread(channel.id, message.ts)[1:]]
            messages.append(shape)
        channels.append(
            {
                **channel.to_api(viewer=identity.bot_user_id),
                "members": list(channel.members),
                "messages": messages,
            }
        )
    people = {}
    for user in workspace.directory.users():
        home = workspace.views.home(user.id)
        people[user.id] = {
            "user": user.to_api(),
            "ephemerals": [{"channel": e.channel, **e.to_api()} for e in workspace.messages.ephemerals(user=user.id)],
            "home": home.to_api(identity) if home is not None else None,
            "modals": [v.to_api(identity) | {"errors": v.errors} for v in workspace.views.stack(user.id)],
        }
    return {
        "team": {"id": identity.team_id, "name": identity.team_name, "domain": identity.domain},
        "bot": {"user_id": identity.bot_user_id, "bot_id": identity.bot_id, "name": identity.bot_name},
        "channels": channels,
        "people": people,
        "files": [f.to_api() for f in workspace.files.all()],
    }
