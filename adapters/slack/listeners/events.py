"""Events: messages in routed threads become entries; @mentions run commands; reactions pin / give feedback; App Home."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slack_bolt.async_app import AsyncApp

from decklog.adapters.slack import grammar, render, subcommands
from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.ids import ACCEPT_REACTIONS, PIN_REACTIONS
from decklog.adapters.slack.listeners.errors import ack_automatically, acked
from decklog.adapters.slack.middleware import counted, mention_context, message_scope, reaction_scope, thread_scope
from decklog.adapters.slack.request import MESSAGE, Req
from decklog.core.entries import Evidence, Message, MessageDeleted, MessageEdited

IGNORED_SUBTYPES = {"channel_join", "channel_leave", "bot_message", "channel_topic", "channel_purpose", "pinned_item"}


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_message(req: Req) -> None:
        await _message(deps, req)

    async def on_mention(req: Req) -> None:
        await _mention(deps, req)

    async def on_reaction(req: Req) -> None:
        await _reaction(deps, req)

    async def on_home(req: Req) -> None:
        if req.event.get("tab", "home") != "home":
            return
        await req.client.views_publish(user_id=req.event["user"], view=await home_view(deps))

    events = counted(deps, "events")
    for name, work, chain in (
        ("message", on_message, [events, message_scope(deps)]),
        ("app_mention", on_mention, [events, mention_context(deps)]),
        ("reaction_added", on_reaction, [events, reaction_scope(deps)]),
        ("app_home_opened", on_home, [events]),
    ):
        app.event(name, middleware=chain)(acked(deps, work, ack_automatically))


async def _message(deps: SlackDeps, req: Req) -> None:
    event = req.event
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
    if req.scope is None:  # not a person's message in an incident's thread or channel (message_scope)
        return
    payload = Message(text=event.get("text", ""), channel=channel, ts=event["ts"], thread_ts=event.get("thread_ts", ""))
    result = await deps.service.record(req.scope, "message", payload, req.actor, idempotency_key=req.key)
    if result.duplicate:
        deps.count("duplicate_deliveries")


async def _mention(deps: SlackDeps, req: Req) -> None:
    event, where = req.event, req.where
    text = grammar.strip_mention(event.get("text", ""), req.context.get("bot_user_id"))
    cmd = await _in_unindexed_thread(deps, req, subcommands.parse(text))
    if cmd.name == "declare" and not cmd.args.get("title"):
        reply_text, blocks = (
            "Give the incident a title: `@decklog declare <title> [sev1-4]`, or use `/incident declare`.",
            None,
        )
    else:
        reply = await deps.runner.run(cmd, req.actor, where, req.key)
        reply_text, blocks = reply.text, reply.blocks or None
        if reply.notify:  # handover shows the new holder the catch-up
            await subcommands.handlers.send_notify(req.client, where, reply.notify)
    if reply_text:
        await req.client.chat_postEphemeral(
            channel=where.channel,
            user=where.user,
            thread_ts=where.thread_ts or None,
            text=reply_text,
            blocks=blocks,
        )


async def _in_unindexed_thread(deps: SlackDeps, req: Req, cmd: grammar.Command) -> grammar.Command:
    """A mention in the thread of a header the index does not know yet (decision 122) names the header's scope."""
    where = req.where
    if cmd.scope or not where.thread_ts:
        return cmd
    found = await thread_scope(deps, req, where.channel, where.thread_ts)
    return replace(cmd, scope=found) if found else cmd


async def _reaction(deps: SlackDeps, req: Req) -> None:
    event, scope, message = req.event, req.scope, req.context.get(MESSAGE)
    if scope is None or message is None:  # not a reaction decklog reads, or not in an incident (reaction_scope)
        return
    item, name = event["item"], event.get("reaction", "")
    channel, ts = item["channel"], item["ts"]
    if name in PIN_REACTIONS:
        author = message.get("user", "") or message.get("bot_id", "")
        evidence = Evidence(text=message.get("text", ""), channel=channel, ts=ts, author=author)
        await deps.service.record(scope, "evidence", evidence, req.actor, idempotency_key=f"slack:pin:{channel}:{ts}")
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
        scope, sid, verdict, req.actor, idempotency_key=f"slack:feedback:{scope}:{sid}"
    )


async def home_view(deps: SlackDeps) -> dict[str, Any]:
    rows = await deps.index.list_scopes(kind="incident", open_only=True)
    pending = []
    for row in rows:
        if row.pending_approvals:
            state = await deps.store.get_state(row.id)
            waiting = [(p.id, p.action, p.risk) for p in state.proposals.values() if p.status == "waiting_for_approval"]
            if waiting:
                pending.append((row, waiting))
    from datetime import UTC, datetime

    from decklog.core.insights import compute

    numbers = await compute(deps.index, since_days=30, now=datetime.now(UTC).timestamp())
    return render.home_view(rows, pending, numbers, await oncall_now(deps))


async def oncall_now(deps: SlackDeps) -> list[tuple[str, str | None, str]]:
    """App Home's on-call block: each schedule's person on call now and the next handoff."""
    port = deps.ports.oncall
    if port is None or not port.setup.schedules:
        return []
    from decklog.core.oncall.desk import read_overrides
    from decklog.core.oncall.rotation import next_handoff, on_call

    now = port.clock.now()
    out = []
    for s in port.setup.schedules:
        overrides = await read_overrides(deps.store, s.name)
        until = next_handoff(s, now, overrides)
        out.append((s.name, on_call(s, now, overrides), until.strftime("%Y-%m-%d %H:%M") if until else ""))
    return out


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
