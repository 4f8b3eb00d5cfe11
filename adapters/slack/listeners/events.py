"""Events: messages in routed threads become entries; @mentions run commands; reactions and pins record evidence or
feedback, and taking them back (the reaction removed, the pin removed) records a ``retracted`` entry; App Home."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slack_bolt.async_app import AsyncApp

from decklog.adapters.slack import grammar, render, subcommands
from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.ids import ACCEPT_REACTIONS, DISMISS_REACTIONS, PIN_REACTIONS
from decklog.adapters.slack.listeners.errors import ack_automatically, acked
from decklog.adapters.slack.middleware import (
    counted,
    mention_context,
    message_scope,
    pin_scope,
    reaction_scope,
    thread_scope,
)
from decklog.adapters.slack.request import MESSAGE, Req
from decklog.core.entries import Entry, Evidence, Message, MessageDeleted, MessageEdited, Retracted

IGNORED_SUBTYPES = {"channel_join", "channel_leave", "bot_message", "channel_topic", "channel_purpose", "pinned_item"}


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_message(req: Req) -> None:
        await _message(deps, req)

    async def on_mention(req: Req) -> None:
        await _mention(deps, req)

    async def on_reaction(req: Req) -> None:
        await _reaction(deps, req)

    async def on_unreaction(req: Req) -> None:
        await _reaction_removed(deps, req)

    async def on_pin(req: Req) -> None:
        await _pin(deps, req, added=True)

    async def on_unpin(req: Req) -> None:
        await _pin(deps, req, added=False)

    async def on_home(req: Req) -> None:
        if req.event.get("tab", "home") != "home":
            return
        await req.client.views_publish(user_id=req.event["user"], view=await home_view(deps))

    events = counted(deps, "events")
    for name, work, chain in (
        ("message", on_message, [events, message_scope(deps)]),
        ("app_mention", on_mention, [events, mention_context(deps)]),
        ("reaction_added", on_reaction, [events, reaction_scope(deps)]),
        ("reaction_removed", on_unreaction, [events, reaction_scope(deps)]),
        ("pin_added", on_pin, [events, pin_scope(deps)]),
        ("pin_removed", on_unpin, [events, pin_scope(deps)]),
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
    if name in PIN_REACTIONS:
        await _record_evidence(deps, req, scope, item["channel"], message)
        return
    found = await _suggestion(deps, scope, message)
    if found is None:
        return
    sid = getattr(found.payload, "suggestion_id", "")
    last = await _last_feedback(deps, scope, sid)
    if last is not None and last.kind == "suggestion_feedback":  # the first verdict stands until taken back
        return
    verdict = "accepted" if name in ACCEPT_REACTIONS else "dismissed"
    key = f"slack:feedback:{scope}:{sid}" + (f":{last.seq}" if last is not None else "")
    await deps.service.suggestion_feedback(scope, sid, verdict, req.actor, idempotency_key=key)


async def _reaction_removed(deps: SlackDeps, req: Req) -> None:
    """A 📌 or ✅/❌ removed takes back what it recorded, once no such reaction is left on the message (whoever
    removes the last one); the entry taken back stays in the log and a ``retracted`` entry refers to it."""
    event, scope, message = req.event, req.scope, req.context.get(MESSAGE)
    if scope is None or message is None:
        return
    name = event.get("reaction", "")
    if name in PIN_REACTIONS:
        await _withdraw_evidence(deps, req, scope, event["item"]["channel"], message)
        return
    feedback = ACCEPT_REACTIONS if name in ACCEPT_REACTIONS else DISMISS_REACTIONS
    if _reacted(message, feedback):
        return
    found = await _suggestion(deps, scope, message)
    if found is None:
        return
    sid = getattr(found.payload, "suggestion_id", "")
    last = await _last_feedback(deps, scope, sid)
    verdict = "accepted" if name in ACCEPT_REACTIONS else "dismissed"
    if last is None or last.kind != "suggestion_feedback" or getattr(last.payload, "verdict", "") != verdict:
        return
    taken = Retracted(
        what="suggestion_feedback",
        suggestion_id=sid,
        text=getattr(found.payload, "text", ""),
        action=getattr(found.payload, "action", ""),
        reason=f":{name}: removed",
    )
    key = f"slack:unfeedback:{scope}:{sid}:{last.seq}"
    await deps.service.record(scope, "retracted", taken, req.actor, refs=[last.seq], idempotency_key=key)


async def _pin(deps: SlackDeps, req: Req, *, added: bool) -> None:
    """Slack's own pins: ``pin_added`` records the message as evidence (as 📌 does, once per message);
    ``pin_removed`` takes it back unless a 📌 still stands on it."""
    scope, message = req.scope, req.context.get(MESSAGE)
    if scope is None or message is None:  # not a message in an incident's thread or channel (pin_scope)
        return
    channel = req.event.get("channel_id") or (req.event.get("item") or {}).get("channel", "")
    if added:
        await _record_evidence(deps, req, scope, channel, message)
    else:
        await _withdraw_evidence(deps, req, scope, channel, {**message, "pinned_to": []})


async def _record_evidence(deps: SlackDeps, req: Req, scope: str, channel: str, message: dict[str, Any]) -> None:
    """One evidence entry per message while it stands, whether a 📌 or a pin put it there. The key names the
    message, and after a withdrawal also the withdrawal, so a message pinned again is recorded again."""
    ts = message["ts"]
    last = await _last_pin(deps, scope, channel, ts)
    if last is not None and last.kind == "evidence":
        return
    author = message.get("user", "") or message.get("bot_id", "")
    evidence = Evidence(text=message.get("text", ""), channel=channel, ts=ts, author=author)
    key = f"slack:pin:{channel}:{ts}" + (f":{last.seq}" if last is not None else "")
    await deps.service.record(scope, "evidence", evidence, req.actor, idempotency_key=key)


async def _withdraw_evidence(deps: SlackDeps, req: Req, scope: str, channel: str, message: dict[str, Any]) -> None:
    ts = message["ts"]
    if _reacted(message, PIN_REACTIONS) or message.get("pinned_to"):  # someone's 📌 or a pin still stands
        return
    last = await _last_pin(deps, scope, channel, ts)
    if last is None or last.kind != "evidence":
        return
    taken = Retracted(what="evidence", text=getattr(last.payload, "text", ""), channel=channel, ts=ts)
    key = f"slack:unpin:{channel}:{ts}:{last.seq}"
    await deps.service.record(scope, "retracted", taken, req.actor, refs=[last.seq], idempotency_key=key)


# How far back the log is read for a message's last pin or a suggestion's last verdict: an incident's pins and
# verdicts are few, and what is older than this many of them is not taken back or recorded again from Slack.
LOOKBACK = 500


async def _last_pin(deps: SlackDeps, scope: str, channel: str, ts: str) -> Entry | None:
    """The message's last pin (``evidence`` from Slack) or withdrawal of one, if any."""
    for entry in reversed(await deps.store.read_last(scope, limit=LOOKBACK, kinds=("evidence", "retracted"))):
        p = entry.payload
        if getattr(p, "channel", "") != channel or getattr(p, "ts", "") != ts:
            continue
        if (isinstance(p, Evidence) and p.source == "pin") or (isinstance(p, Retracted) and p.what == "evidence"):
            return entry
    return None


async def _last_feedback(deps: SlackDeps, scope: str, sid: str) -> Entry | None:
    """The suggestion's last verdict (``suggestion_feedback``) or the withdrawal of one, if any."""
    kinds = ("suggestion_feedback", "retracted")
    for entry in reversed(await deps.store.read_last(scope, limit=LOOKBACK, kinds=kinds)):
        p = entry.payload
        if getattr(p, "suggestion_id", "") != sid:
            continue
        if entry.kind == "suggestion_feedback" or (isinstance(p, Retracted) and p.what == "suggestion_feedback"):
            return entry
    return None


async def _suggestion(deps: SlackDeps, scope: str, message: dict[str, Any]) -> Entry | None:
    """The suggestion entry a thread reply carries (its metadata names the entry's seq), if it is one."""
    meta = (message.get("metadata") or {}).get("event_payload") or {}
    if not meta.get("seq"):
        return None
    entries = await deps.store.read_seqs(scope, [int(meta["seq"])])
    return entries[0] if entries and entries[0].kind == "suggestion" else None


def _reacted(message: dict[str, Any], names: tuple[str, ...]) -> bool:
    """Someone's reaction of ``names`` is on the message (Slack's ``reactions`` as ``conversations.replies``
    returns them, read after the change)."""
    return any(r.get("name") in names and (r.get("count") or r.get("users")) for r in message.get("reactions") or [])


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
