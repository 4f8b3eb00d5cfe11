"""``reactions.*`` methods: the bot adds, removes and reads emoji reactions on messages."""

from __future__ import annotations

import re
from typing import Any

from ..errors import SlackError
from .context import CallContext, Handler

__all__ = ["handlers"]

JSON = dict[str, Any]
_NAME = re.compile(r"^[a-z0-9_+\-']+(::skin-tone-[2-6])?$")


def handlers() -> dict[str, Handler]:
    return {"reactions.add": add, "reactions.remove": remove, "reactions.get": get}


def _target(ctx: CallContext) -> tuple[str, str]:
    channel = ctx.channel()
    ts = ctx.args.required("timestamp", error="no_item_specified")
    return channel.id, ts


def _name(ctx: CallContext) -> str:
    name = ctx.args.required("name", error="invalid_name")
    if not _NAME.match(name):
        raise SlackError("invalid_name", f"{name!r} is not an emoji name (no colons, lowercase)")
    return name


def add(ctx: CallContext) -> JSON:
    channel, ts = _target(ctx)
    ctx.workspace.messages.add_reaction(channel, ts, _name(ctx), ctx.bot)
    return {"ok": True}


def remove(ctx: CallContext) -> JSON:
    channel, ts = _target(ctx)
    ctx.workspace.messages.remove_reaction(channel, ts, _name(ctx), ctx.bot)
    return {"ok": True}


def get(ctx: CallContext) -> JSON:
    channel, ts = _target(ctx)
    message = ctx.workspace.messages.get(channel, ts)
    return {"ok": True, "type": "message", "channel": channel, "message": message.to_api()}
