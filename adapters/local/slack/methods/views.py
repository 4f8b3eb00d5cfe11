"""``views.*`` methods: modals (open, push, update) and the App Home tab (publish)."""

from __future__ import annotations

from typing import Any

from ..block_rules import validate_blocks
from ..blocks import assign_ids
from ..errors import SlackError
from .context import CallContext, Handler

__all__ = ["handlers"]

JSON = dict[str, Any]


def handlers() -> dict[str, Handler]:
    return {"views.open": open_view, "views.push": push, "views.update": update, "views.publish": publish}


def _view(ctx: CallContext, *, kind: str) -> JSON:
    view = ctx.args.structured("view", error="invalid_arguments")
    if not isinstance(view, dict):
        raise SlackError("invalid_arguments", "missing required field: view")
    view_type = view.get("type")
    if view_type != kind and not (kind == "modal" and view_type == "workflow_step"):
        raise SlackError("invalid_arguments", f"view.type must be {kind}")
    if kind == "modal":
        title = view.get("title")
        if not isinstance(title, dict) or title.get("type") != "plain_text" or not title.get("text"):
            raise SlackError("invalid_arguments", "view.title must be a plain_text object")
        if len(str(title["text"])) > 24:
            raise SlackError("invalid_arguments", "must be less than 25 characters [json-pointer:/view/title/text]")
    blocks = validate_blocks(view.get("blocks", []), limit=100, error="invalid_arguments")
    if len(str(view.get("private_metadata", ""))) > 3000:
        raise SlackError("invalid_arguments", "private_metadata must be less than 3001 characters")
    return {**view, "blocks": assign_ids(blocks, lambda: ctx.workspace.ids.token(3))}


def _respond(ctx: CallContext, view: Any) -> JSON:
    return {"ok": True, "view": view.to_api(ctx.workspace.identity)}


def open_view(ctx: CallContext) -> JSON:
    trigger = ctx.args.required("trigger_id", error="invalid_trigger_id")
    body = _view(ctx, kind="modal")
    user = ctx.workspace.triggers.consume(trigger)
    return _respond(ctx, ctx.workspace.views.open(user, body))


def push(ctx: CallContext) -> JSON:
    trigger = ctx.args.required("trigger_id", error="invalid_trigger_id")
    body = _view(ctx, kind="modal")
    user = ctx.workspace.triggers.consume(trigger)
    return _respond(ctx, ctx.workspace.views.push(user, body))


def update(ctx: CallContext) -> JSON:
    views = ctx.workspace.views
    view_id, external_id = ctx.args.text("view_id"), ctx.args.text("external_id")
    if view_id:
        target = views.get(view_id)
    elif external_id:
        target = views.by_external_id(external_id)
    else:
        raise SlackError("invalid_arguments", "view_id or external_id is required")
    body = _view(ctx, kind=target.type)
    return _respond(ctx, views.update(target, body, hash=ctx.args.text("hash")))


def publish(ctx: CallContext) -> JSON:
    user = ctx.workspace.user(ctx.args.required("user_id", error="invalid_arguments"))
    if user.is_bot:
        raise SlackError("invalid_arguments", "cannot publish a home tab for a bot user")
    body = _view(ctx, kind="home")
    return _respond(ctx, ctx.workspace.views.publish(user.id, body, hash=ctx.args.text("hash")))
