"""The Slack listeners' shared concerns as Bolt listener middleware: counting, the actor, where, the idempotency
key and the scope. Each middleware puts what it found in the Bolt context; listeners read it through ``Req``.

The request reached Bolt only after the intake stored and acknowledged it (adapters/slack/intake.py). A failure in
a middleware must go the way a failure in the listener goes (shown to the person, or handed back to the intake to
retry), so a middleware never raises: it records the error under ``FAILED``, the later middleware skip, and the
listener's ``run_work`` raises it inside its own error handling. The middleware always call ``next()``, so Bolt
never sees an unhandled request. The key strings are stored with entries already: do not change them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.ids import ACCEPT_REACTIONS, DISMISS_REACTIONS, PIN_REACTIONS
from decklog.adapters.slack.ports import Where
from decklog.adapters.slack.request import ACTOR, FAILED, KEY, MESSAGE, SCOPE, WHERE, Req

Step = Callable[[Req], Awaitable[None]]
BoltMiddleware = Callable[..., Awaitable[Any]]
RECORDED_SUBTYPES = (None, "thread_broadcast", "file_share")  # the message subtypes recorded as messages


def middleware(step: Step) -> BoltMiddleware:
    """A Bolt listener middleware running ``step`` (Bolt injects the arguments by these names)."""

    async def run(body: dict[str, Any], respond: Any, client: AsyncWebClient, context: Any, next: Any) -> Any:
        if context.get(FAILED) is None:
            try:
                await step(Req(body, respond, client, context))
            except Exception as exc:  # handled by the listener's run_work, like its own errors
                context[FAILED] = exc
        return await next()

    run.__name__ = getattr(step, "__name__", "step")
    return run


def counted(deps: SlackDeps, family: str) -> BoltMiddleware:
    async def count(_req: Req) -> None:
        deps.count(family)

    return middleware(count)


def command_context(deps: SlackDeps) -> BoltMiddleware:
    """``/incident``: the person, the channel, ``slack:cmd:<trigger id>``."""

    async def person(req: Req) -> None:
        body = req.body
        req.context[KEY] = f"slack:cmd:{body.get('trigger_id') or body.get('response_url', '')}"
        req.context[WHERE] = Where(channel=body["channel_id"], user=body["user_id"])
        req.context[ACTOR] = await deps.human(body["user_id"], body.get("user_name", ""))

    return middleware(person)


def action_context(deps: SlackDeps) -> BoltMiddleware:
    """A button or select: the person, the message it is on, ``slack:act:<action ts>:<user>:<action id>``."""

    async def person(req: Req) -> None:
        body, action = req.body, req.action
        user = body["user"]["id"]
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id", "")
        message = body.get("message") or {}
        req.context[WHERE] = Where(
            channel=channel, user=user, thread_ts=message.get("thread_ts", ""), message_ts=message.get("ts", "")
        )
        req.context[KEY] = f"slack:act:{action.get('action_ts', '')}:{user}:{action.get('action_id', '')}"
        req.context[ACTOR] = await deps.human(user, body["user"].get("username") or body["user"].get("name") or "")

    return middleware(person)


def view_context(deps: SlackDeps) -> BoltMiddleware:
    """A modal submission: the person and ``slack:view:<view id>``."""

    async def person(req: Req) -> None:
        user = req.body["user"]
        req.context[KEY] = f"slack:view:{req.view['id']}"
        req.context[ACTOR] = await deps.human(user["id"], user.get("username", ""))

    return middleware(person)


def mention_context(deps: SlackDeps) -> BoltMiddleware:
    """An @mention: the person, the thread, ``slack:mention:<channel>:<ts>``."""

    async def person(req: Req) -> None:
        event = req.event
        channel, user = event["channel"], event.get("user", "")
        req.context[WHERE] = Where(
            channel=channel, user=user, thread_ts=event.get("thread_ts") or "", message_ts=event["ts"]
        )
        req.context[KEY] = f"slack:mention:{channel}:{event['ts']}"
        req.context[ACTOR] = await deps.human(user)

    return middleware(person)


def message_scope(deps: SlackDeps) -> BoltMiddleware:
    """A person's message: the scope of its thread or channel, if any; then the person and ``slack:msg:…``."""

    async def route(req: Req) -> None:
        event = req.event
        if event.get("subtype") not in RECORDED_SUBTYPES or event.get("bot_id") or not event.get("user"):
            return
        channel = event.get("channel", "")
        scope = await thread_scope(deps, req, channel, event.get("thread_ts") or "")
        if scope is None:
            return
        req.context[SCOPE] = scope
        req.context[KEY] = f"slack:msg:{channel}:{event['ts']}"
        req.context[ACTOR] = await deps.human(event["user"])

    return middleware(route)


def reaction_scope(deps: SlackDeps) -> BoltMiddleware:
    """A reaction decklog reads (📌, ✅, ❌) on a message: the message, its scope, and the person who reacted."""

    async def route(req: Req) -> None:
        event = req.event
        item = event.get("item") or {}
        if item.get("type") != "message" or event.get("reaction") not in (
            *PIN_REACTIONS,
            *ACCEPT_REACTIONS,
            *DISMISS_REACTIONS,
        ):
            return
        channel, ts = item["channel"], item["ts"]
        message = await _fetch(req.client, channel, ts)
        if message is not None:
            await _on_message(req, deps, channel, ts, message)

    return middleware(route)


def pin_scope(deps: SlackDeps) -> BoltMiddleware:
    """A pin (``pin_added`` / ``pin_removed``) of a message: the message as Slack has it now (the event's copy if
    it cannot be read), its scope, and the person who pinned or unpinned it."""

    async def route(req: Req) -> None:
        event = req.event
        item = event.get("item") or {}
        pinned = item.get("message") or {}
        channel = event.get("channel_id") or item.get("channel") or ""
        if item.get("type") != "message" or not channel or not pinned.get("ts"):
            return
        ts = pinned["ts"]
        await _on_message(req, deps, channel, ts, await _fetch(req.client, channel, ts) or pinned)

    return middleware(route)


async def _on_message(req: Req, deps: SlackDeps, channel: str, ts: str, message: dict[str, Any]) -> None:
    """A reaction's or pin's message in an incident's thread: the message, its scope and the person, for the
    listener. Nothing when the message is in no incident's thread."""
    scope = await route_with_patience(deps, channel, ts, message.get("thread_ts") or ts)
    if scope is None:
        return
    req.context[MESSAGE] = message
    req.context[SCOPE] = scope
    req.context[ACTOR] = await deps.human(req.event.get("user", ""))


async def _fetch(client: AsyncWebClient, channel: str, ts: str) -> dict[str, Any] | None:
    try:
        resp = await client.conversations_replies(channel=channel, ts=ts, include_all_metadata=True, limit=200)
    except SlackApiError:
        return None
    messages: list[dict[str, Any]] = resp.get("messages", [])
    return next((m for m in messages if m.get("ts") == ts), None)


async def thread_scope(deps: SlackDeps, req: Req, channel: str, thread_ts: str) -> str | None:
    """The scope of a thread (or dedicated channel) by the index; for a thread under decklog's own message that
    the index does not know yet, by the header's metadata (``header_scope``)."""
    scope = await deps.index.route(channel, thread_ts)
    parent = req.event.get("parent_user_id")
    if scope is None and thread_ts and parent and parent == req.context.get("bot_user_id"):
        scope = await header_scope(deps, req.client, channel, thread_ts)
    return scope


async def header_scope(deps: SlackDeps, client: AsyncWebClient, channel: str, thread_ts: str) -> str | None:
    """The scope named by the metadata of decklog's own header at the root of a thread the index does not know yet.

    The sender indexes a header's thread only after ``chat.postMessage`` (and ``chat.getPermalink``) returned, and
    on another replica that write lands later still; a reply typed the moment the header appeared would otherwise be
    acknowledged and not recorded (the two-replica Socket Mode test's lost ``socket update 0``)."""
    root = await _fetch(client, channel, thread_ts)
    metadata = (root or {}).get("metadata") or {}
    if metadata.get("event_type") != "decklog_header":
        return None
    scope = str((metadata.get("event_payload") or {}).get("scope") or "")
    return scope if scope and await deps.store.exists(scope) else None


async def route_with_patience(deps: SlackDeps, channel: str, ts: str, root_ts: str) -> str | None:
    """The index trails the log by milliseconds: a reaction right after a message may need a moment."""
    deadline = time.monotonic() + 2.0
    while True:
        scope = await deps.index.route(channel, ts) or await deps.index.route(channel, root_ts)
        if scope is not None or time.monotonic() > deadline:
            return scope
        await asyncio.sleep(0.05)
