"""Who's who: ``auth.test``, ``users.info``, ``users.list``, and ``apps.connections.open`` (Socket Mode)."""

from __future__ import annotations

from typing import Any

from .context import CallContext, Handler

__all__ = ["handlers"]

JSON = dict[str, Any]


def handlers() -> dict[str, Handler]:
    return {
        "auth.test": auth_test,
        "users.info": users_info,
        "users.list": users_list,
        "apps.connections.open": connections_open,
    }


def auth_test(ctx: CallContext) -> JSON:
    identity = ctx.workspace.identity
    return {
        "ok": True,
        "url": identity.url,
        "team": identity.team_name,
        "user": identity.bot_name,
        "team_id": identity.team_id,
        "user_id": identity.bot_user_id,
        "bot_id": identity.bot_id,
        "is_enterprise_install": False,
    }


def users_info(ctx: CallContext) -> JSON:
    user = ctx.workspace.user(ctx.args.required("user", error="user_not_found"))
    return {"ok": True, "user": user.to_api()}


def users_list(ctx: CallContext) -> JSON:
    return {
        "ok": True,
        "members": [u.to_api() for u in ctx.workspace.directory.users()],
        "cache_ts": int(ctx.workspace.clock.now()),
        "response_metadata": {"next_cursor": ""},
    }


def connections_open(ctx: CallContext) -> JSON:
    return {"ok": True, "url": ctx.socket_url()}
