"""``chat.*`` methods: post, update, delete, ephemeral messages, permalinks."""

from __future__ import annotations

from typing import Any

from ..block_rules import validate_blocks
from ..blocks import assign_ids
from ..errors import SlackError
from ..model import Channel
from .context import CallContext, Handler

__all__ = ["handlers"]

JSON = dict[str, Any]
MAX_TEXT = 40_000


def handlers() -> dict[str, Handler]:
    return {
        "chat.postMessage": post_message,
        "chat.update": update,
        "chat.delete": delete,
        "chat.postEphemeral": post_ephemeral,
        "chat.getPermalink": get_permalink,
    }


def _target(ctx: CallContext) -> Channel:
    """``channel`` may be a channel id, a ``#name``, or a user id (their DM with the bot)."""
    ref = ctx.args.required("channel", error="channel_not_found")
    if ref[:1] in ("U", "W"):
        try:
            return ctx.workspace.directory.im_with(ctx.workspace.user(ref).id)
        except SlackError:
            pass
    return ctx.member_channel()


def _content(ctx: CallContext, *, required: bool) -> JSON:
    """``text``/``blocks``/``attachments``/``metadata`` as given (absent ones omitted), validated."""
    args = ctx.args
    content: JSON = {}
    text = args.text("text")
    blocks = args.structured("blocks", error="invalid_blocks_format")
    attachments = args.structured("attachments", error="invalid_attachments")
    if required and not text and not blocks and not attachments:
        raise SlackError("no_text")
    if text is not None:
        if len(text) > MAX_TEXT:
            raise SlackError("msg_too_long")
        content["text"] = text
    if blocks is not None:
        content["blocks"] = assign_ids(validate_blocks(blocks), lambda: ctx.workspace.ids.token(3))
    if attachments is not None:
        if not isinstance(attachments, list):
            raise SlackError("invalid_attachments")
        content["attachments"] = attachments
    metadata = args.structured("metadata", error="invalid_metadata_format")
    if metadata is not None:
        if not isinstance(metadata, dict) or not isinstance(metadata.get("event_type"), str):
            raise SlackError("invalid_metadata_format", "metadata needs event_type and event_payload")
        if not isinstance(metadata.get("event_payload", {}), dict):
            raise SlackError("invalid_metadata_schema", "event_payload must be an object")
        content["metadata"] = {
            "event_type": metadata["event_type"],
            "event_payload": metadata.get("event_payload", {}),
        }
    return content


def post_message(ctx: CallContext) -> JSON:
    channel = _target(ctx)
    if channel.is_archived:
        raise SlackError("is_archived")
    content = _content(ctx, required=True)
    message = ctx.workspace.messages.post(
        channel.id,
        text=content.get("text", ""),
        user=ctx.bot,
        as_bot=True,
        blocks=content.get("blocks"),
        attachments=content.get("attachments"),
        metadata=content.get("metadata"),
        thread_ts=ctx.args.text("thread_ts"),
        reply_broadcast=ctx.args.flag("reply_broadcast"),
    )
    return {"ok": True, "channel": channel.id, "ts": message.ts, "message": message.to_api()}


def _own_message(ctx: CallContext, channel: Channel, ts: str, error: str) -> None:
    message = ctx.workspace.messages.get(channel.id, ts)
    if message.subtype == "tombstone":
        raise SlackError("message_not_found")
    if message.bot_id != ctx.workspace.identity.bot_id:
        raise SlackError(error)


def update(ctx: CallContext) -> JSON:
    channel = ctx.channel()
    if channel.is_archived:
        raise SlackError("is_archived")
    ts = ctx.args.required("ts", error="message_not_found")
    _own_message(ctx, channel, ts, "cant_update_message")
    content = _content(ctx, required=True)
    _, message = ctx.workspace.messages.update(channel.id, ts, editor=ctx.bot, **content)
    return {"ok": True, "channel": channel.id, "ts": ts, "text": message.text, "message": message.to_api()}


def delete(ctx: CallContext) -> JSON:
    channel = ctx.channel()
    ts = ctx.args.required("ts", error="message_not_found")
    _own_message(ctx, channel, ts, "cant_delete_message")
    ctx.workspace.messages.delete(channel.id, ts)
    return {"ok": True, "channel": channel.id, "ts": ts}


def post_ephemeral(ctx: CallContext) -> JSON:
    channel = ctx.member_channel()
    user = ctx.workspace.user(ctx.args.required("user", error="user_not_found"))
    if user.id not in channel.members:
        raise SlackError("user_not_in_channel")
    content = _content(ctx, required=True)
    ephemeral = ctx.workspace.messages.post_ephemeral(
        channel.id,
        user.id,
        text=content.get("text", ""),
        blocks=content.get("blocks"),
        thread_ts=ctx.args.text("thread_ts"),
    )
    return {"ok": True, "message_ts": ephemeral.ts}


def get_permalink(ctx: CallContext) -> JSON:
    channel = ctx.channel()
    ts = ctx.args.required("message_ts", error="message_not_found")
    message = ctx.workspace.messages.get(channel.id, ts)
    link = f"{ctx.workspace.identity.url}archives/{channel.id}/p{ts.replace('.', '')}"
    if message.is_reply:
        link += f"?thread_ts={message.thread_ts}&cid={channel.id}"
    return {"ok": True, "channel": channel.id, "permalink": link}
