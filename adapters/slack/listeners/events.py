"""Events: messages in routed threads become entries; @mentions run commands; reactions pin / give feedback; App Home."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import grammar, render, subcommands
from adapters.slack.deps import SlackDeps
from adapters.slack.ids import ACCEPT_REACTIONS, DISMISS_REACTIONS, PIN_REACTIONS
from adapters.slack.listeners.errors import Req, ack_automatically, acked
from adapters.slack.ports import Where
from core.entries import Evidence, Message, MessageDeleted, MessageEdited

IGNORED_SUBTYPES = {"channel_join", "channel_leave", "bot_message", "channel_topic", "channel_purpose", "pinned_item"}


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_message(req: Req) -> None:
        event = req.event
        deps.count("events")
        subtype = event.get("subtype")
        if subtype in IGNORED_SUBTYPES or event.get("bot_id"):
            return
        channel = event.get("channel", "")
        if subtype == "message_changed":
            await _edited(deps, channel, event)
            return
        if subtype == "message_deleted":
            await _deleted(deps, channel, event)
            return
        if subtype not in (None, "thread_broadcast", "file_share") or not event.get("user"):
            return
        scope = await deps.index.route(channel, event.get("thread_ts") or "")
        if scope is None:
            return
        payload = Message(
            text=event.get("text", ""), channel=channel, ts=event["ts"], thread_ts=event.get("thread_ts", "")
        )
        result = await deps.service.record(
            scope,
            "message",
            payload,
            await deps.human(event["user"]),
            idempotency_key=f"slack:msg:{channel}:{event['ts']}",
        )
        if result.duplicate:
            deps.count("duplicate_deliveries")

    async def on_mention(req: Req) -> None:
        event, context, client = req.event, req.context, req.client
        deps.count("events")
        channel, user = event["channel"], event.get("user", "")
        thread_ts = event.get("thread_ts") or ""
        text = grammar.strip_mention(event.get("text", ""), context.get("bot_user_id"))
        cmd = subcommands.parse(text)
        where = Where(channel=channel, user=user, thread_ts=thread_ts, message_ts=event["ts"])
        if cmd.name == "declare" and not cmd.args.get("title"):
            reply_text, blocks = (
                "Give the incident a title: `@decklog declare <title> [sev1-4]`, or use `/incident declare`.",
                None,
            )
        else:
            reply = await deps.runner.run(cmd, await deps.human(user), where, f"slack:mention:{channel}:{event['ts']}")
            reply_text, blocks = reply.text, reply.blocks or None
        if reply_text:
            await client.chat_postEphemeral(
                channel=channel, user=user, thread_ts=thread_ts or None, text=reply_text, blocks=blocks
            )

    async def on_reaction(req: Req) -> None:
        event, client = req.event, req.client
        deps.count("events")
        item = event.get("item") or {}
        name = event.get("reaction", "")
        if item.get("type") != "message" or name not in (*PIN_REACTIONS, *ACCEPT_REACTIONS, *DISMISS_REACTIONS):
            return
        channel, ts, user = item["channel"], item["ts"], event.get("user", "")
        message = await _fetch(client, channel, ts)
        if message is None:
            return
        scope = await _route_with_patience(deps, channel, ts, message.get("thread_ts") or ts)
        if scope is None:
            return
        if name in PIN_REACTIONS:
            evidence = Evidence(
                text=message.get("text", ""),
                channel=channel,
                ts=ts,
                author=message.get("user", "") or message.get("bot_id", ""),
            )
            await deps.service.record(
                scope, "evidence", evidence, await deps.human(user), idempotency_key=f"slack:pin:{channel}:{ts}"
            )
            return
        meta = (message.get("metadata") or {}).get("event_payload") or {}
        if not meta.get("seq"):
            return
        entries = await deps.store.read_seqs(scope, [int(meta["seq"])])
        if not entries or entries[0].kind != "suggestion":
            return
        verdict = "accepted" if name in ACCEPT_REACTIONS else "dismissed"
        sid = getattr(entries[0].payload, "suggestion_id", "")
        await deps.service.suggestion_feedback(
            scope, sid, verdict, await deps.human(user), idempotency_key=f"slack:feedback:{scope}:{sid}"
        )

    async def on_home(req: Req) -> None:
        deps.count("events")
        if req.event.get("tab", "home") != "home":
            return
        await req.client.views_publish(user_id=req.event["user"], view=await home_view(deps))

    for name, work in (
        ("message", on_message),
        ("app_mention", on_mention),
        ("reaction_added", on_reaction),
        ("app_home_opened", on_home),
    ):
        app.event(name)(acked(deps, work, ack_automatically))


async def home_view(deps: SlackDeps) -> dict[str, Any]:
    rows = await deps.index.list_scopes(kind="incident", open_only=True)
    pending = []
    for row in rows:
        if row.pending_approvals:
            state = await deps.store.get_state(row.id)
            waiting = [(p.id, p.action, p.risk) for p in state.proposals.values() if p.status == "waiting_for_approval"]
            if waiting:
                pending.append((row, waiting))
    return render.home_view(rows, pending)


async def _fetch(client: AsyncWebClient, channel: str, ts: str) -> dict[str, Any] | None:
    try:
        resp = await client.conversations_replies(channel=channel, ts=ts, include_all_metadata=True, limit=200)
    except SlackApiError:
        return None
    messages: list[dict[str, Any]] = resp.get("messages", [])
    return next((m for m in messages if m.get("ts") == ts), None)


async def _route_with_patience(deps: SlackDeps, channel: str, ts: str, root_ts: str) -> str | None:
    """The index trails the log by milliseconds: a reaction right after a message may need a moment."""
    deadline = time.monotonic() + 2.0
    while True:
        scope = await deps.index.route(channel, ts) or await deps.index.route(channel, root_ts)
        if scope is not None or time.monotonic() > deadline:
            return scope
        await asyncio.sleep(0.05)


async def _edited(deps: SlackDeps, channel: str, event: dict[str, Any]) -> None:
    new, old = event.get("message") or {}, event.get("previous_message") or {}
    if new.get("bot_id") or not new.get("user"):
        return
    scope = await deps.index.route(channel, new.get("thread_ts") or "")
    if scope is None or new.get("text") == old.get("text"):
        return
    edit = MessageEdited(
        text=new.get("text", ""), channel=channel, ts=new.get("ts", ""), previous_text=old.get("text", "")
    )
    key = f"slack:edit:{channel}:{new.get('ts')}:{(new.get('edited') or {}).get('ts', event.get('event_ts', ''))}"
    await deps.service.record(scope, "message_edited", edit, await deps.human(new["user"]), idempotency_key=key)


async def _deleted(deps: SlackDeps, channel: str, event: dict[str, Any]) -> None:
    old = event.get("previous_message") or {}
    if old.get("bot_id"):
        return
    scope = await deps.index.route(channel, old.get("thread_ts") or "")
    if scope is None:
        return
    gone = MessageDeleted(channel=channel, ts=event.get("deleted_ts", ""), previous_text=old.get("text", ""))
    actor = await deps.human(old.get("user") or "unknown")
    await deps.service.record(
        scope, "message_deleted", gone, actor, idempotency_key=f"slack:delete:{channel}:{gone.ts}"
    )
