"""``conversations.*`` methods: create, invite, join, archive, open, info, list, history, replies.

``conversations.archive`` answers as Slack documents it (docs.slack.dev/reference/methods/conversations.archive):
``{"ok": true}``, or ``channel_not_found``, ``method_not_supported_for_channel_type`` (a DM),
``cant_archive_general``, ``not_in_channel`` (the bot is not a member) and ``already_archived``.
"""

from __future__ import annotations

from typing import Any

from ..errors import SlackError
from ..pagination import page_messages, page_offset
from .context import CallContext, Handler

__all__ = ["handlers"]

JSON = dict[str, Any]


def handlers() -> dict[str, Handler]:
    return {
        "conversations.create": create,
        "conversations.invite": invite,
        "conversations.join": join,
        "conversations.archive": archive,
        "conversations.open": open_dm,
        "conversations.info": info,
        "conversations.list": list_channels,
        "conversations.history": history,
        "conversations.replies": replies,
    }


def create(ctx: CallContext) -> JSON:
    name = ctx.args.text("name", "") or ""
    channel = ctx.workspace.directory.create_channel(name, creator=ctx.bot, is_private=ctx.args.flag("is_private"))
    return {"ok": True, "channel": channel.to_api(viewer=ctx.bot)}


def invite(ctx: CallContext) -> JSON:
    channel = ctx.member_channel()
    user_ids = ctx.args.listed("users")
    if not user_ids:
        raise SlackError("no_user")
    users = [ctx.workspace.user(u) for u in user_ids]
    if any(u.id == ctx.bot for u in users):
        raise SlackError("cant_invite_self")
    added = [ctx.workspace.directory.join(channel.id, u.id) for u in users]
    if not any(added):
        raise SlackError(
            "already_in_channel",
            errors=[{"user": u.id, "ok": False, "error": "already_in_channel"} for u in users],
        )
    return {"ok": True, "channel": channel.to_api(viewer=ctx.bot)}


def join(ctx: CallContext) -> JSON:
    channel = ctx.channel()
    if channel.is_private or channel.is_im:
        raise SlackError("method_not_supported_for_channel_type")
    if channel.is_archived:
        raise SlackError("is_archived")
    joined = ctx.workspace.directory.join(channel.id, ctx.bot)
    body: JSON = {"ok": True, "channel": channel.to_api(viewer=ctx.bot)}
    if not joined:
        body["warning"] = "already_in_channel"
        body["response_metadata"] = {"warnings": ["already_in_channel"]}
    return body


def archive(ctx: CallContext) -> JSON:
    channel = ctx.channel()
    if channel.is_im:
        raise SlackError("method_not_supported_for_channel_type")
    if channel.is_private and ctx.bot not in channel.members:
        raise SlackError("channel_not_found")
    if channel.is_archived:
        raise SlackError("already_archived")
    if channel.name == "general":
        raise SlackError("cant_archive_general")
    if ctx.bot not in channel.members:
        raise SlackError("not_in_channel")
    ctx.workspace.directory.archive(channel.id, ctx.bot)
    return {"ok": True}


def open_dm(ctx: CallContext) -> JSON:
    users = ctx.args.listed("users")
    if len(users) != 1:
        raise SlackError("invalid_arguments", "the fake opens one-to-one DMs only")
    channel = ctx.workspace.directory.im_with(ctx.workspace.user(users[0]).id)
    return {"ok": True, "channel": {"id": channel.id}}


def info(ctx: CallContext) -> JSON:
    channel = ctx.channel()
    if channel.is_private and ctx.bot not in channel.members:
        raise SlackError("channel_not_found")
    return {"ok": True, "channel": channel.to_api(viewer=ctx.bot)}


def list_channels(ctx: CallContext) -> JSON:
    wanted = set(ctx.args.listed("types") or ["public_channel"])
    visible = []
    for channel in ctx.workspace.directory.channels():
        kind = "im" if channel.is_im else "private_channel" if channel.is_private else "public_channel"
        if kind not in wanted or (kind != "public_channel" and ctx.bot not in channel.members):
            continue
        visible.append(channel)
    page = page_offset(visible, ctx.args)
    return {
        "ok": True,
        "channels": [c.to_api(viewer=ctx.bot) for c in page.items],
        "response_metadata": page.metadata(),
    }


def history(ctx: CallContext) -> JSON:
    channel = ctx.member_channel()
    page = page_messages(ctx.workspace.messages.top_level(channel.id), ctx.args, newest_first=True)
    with_metadata = ctx.args.flag("include_all_metadata")
    return {
        "ok": True,
        "messages": [m.to_api(include_metadata=with_metadata) for m in page.items],
        "has_more": page.has_more,
        "pin_count": 0,
        "channel_actions_ts": None,
        "channel_actions_count": 0,
        "response_metadata": page.metadata(),
    }


def replies(ctx: CallContext) -> JSON:
    channel = ctx.member_channel()
    ts = ctx.args.required("ts", error="thread_not_found")
    parent, *rest = ctx.workspace.messages.thread(channel.id, ts)
    page = page_messages(rest, ctx.args, newest_first=False)
    with_metadata = ctx.args.flag("include_all_metadata")
    return {
        "ok": True,
        "messages": [m.to_api(include_metadata=with_metadata) for m in [parent, *page.items]],
        "has_more": page.has_more,
        "response_metadata": page.metadata(),
    }
