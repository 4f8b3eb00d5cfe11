"""Block actions: header controls (and the "Follow-up" button on each open obligation), the scope picker,
suggestion and proposal buttons (stored and acked by the intake). One module-level handler per action
(``HANDLERS``), given the deps and the request."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from slack_bolt.async_app import AsyncApp

from decklog.adapters.slack import render, subcommands
from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.ids import RECORD_AS, Action, Shortcut
from decklog.adapters.slack.listeners.errors import Work, acked
from decklog.adapters.slack.middleware import action_context, counted, middleware
from decklog.adapters.slack.ports import Where
from decklog.adapters.slack.request import ACTOR, KEY, WHERE, Req
from decklog.core.agents.answers import answer_finding
from decklog.core.errors import InvalidInput
from decklog.core.oncall import desk as oncall_desk

FINDING_VERDICTS = {
    Action.HYPOTHESIS_CONFIRM: "confirmed",
    Action.HYPOTHESIS_RULE_OUT: "ruled_out",
    Action.OBLIGATION_TAKE: "taken",
    Action.OBLIGATION_DONE: "done",
}
RECORD_KINDS = ("goal", "constraint", "decision", "hypothesis")


def _split(value: str) -> tuple[str, str]:
    scope, sep, item = value.partition("|")
    if not sep or not scope or not item:
        raise InvalidInput(f"malformed button value {value!r}")
    return scope, item


async def _tell(req: Req, text: str) -> None:
    await req.respond(text=text, response_type="ephemeral", replace_original=False)


async def on_severity(deps: SlackDeps, req: Req) -> None:
    scope = req.action.get("block_id", "").removeprefix("header:")
    severity = int(req.action["selected_option"]["value"])
    result = await deps.service.set_severity(scope, severity, req.actor, idempotency_key=req.key)
    await _tell(req, f"`{scope}` is SEV{result.state.severity}.")


async def on_resolve(deps: SlackDeps, req: Req) -> None:
    await deps.service.resolve(req.action["value"], req.actor, idempotency_key=req.key)
    await _tell(req, f":white_check_mark: `{req.action['value']}` is resolved.")


async def on_export(deps: SlackDeps, req: Req) -> None:
    if deps.ports.export is None:
        await _tell(req, "Reports are not available here.")
        return
    await _tell(req, await deps.ports.export(scope=req.action["value"], fmt="md", actor=req.actor, key=req.key))


async def on_pick(deps: SlackDeps, req: Req) -> None:
    scope, _, text = req.action["selected_option"]["value"].partition(" ")
    result = await deps.runner.run(subcommands.parse(f"{text} {scope}"), req.actor, req.where, req.key)
    await req.respond(text=result.text, blocks=result.blocks or None, response_type="ephemeral", replace_original=True)


async def on_suggestion(deps: SlackDeps, req: Req) -> None:
    scope, sid = _split(req.action["value"])
    verdict = "accepted" if req.action["action_id"] == Action.SUGGESTION_ACCEPT else "dismissed"
    result = await deps.service.suggestion_feedback(
        scope, sid, verdict, req.actor, idempotency_key=f"slack:feedback:{scope}:{sid}"
    )
    answered = result.entries and not result.duplicate
    await _tell(req, f"Suggestion {verdict}." if answered else "That suggestion was already answered.")


async def on_proposal(deps: SlackDeps, req: Req) -> None:
    scope, pid = _split(req.action["value"])
    if deps.ports.decide is None:
        await _tell(req, "Approvals are not available here.")
        return
    approve = req.action["action_id"] == Action.PROPOSAL_APPROVE
    line = await deps.ports.decide(
        scope=scope, proposal_id=pid, approve=approve, actor=req.actor, reason="", key=req.key
    )
    await _tell(req, line)


async def on_finding(deps: SlackDeps, req: Req) -> None:
    scope, seq = _split(req.action["value"])
    if not seq.isdigit():
        raise InvalidInput(f"malformed button value {req.action['value']!r}")
    verdict = FINDING_VERDICTS[Action(req.action["action_id"])]
    key = f"slack:finding:{scope}:{seq}:{req.actor.id}:{verdict}"
    line = await answer_finding(deps.store, scope, int(seq), verdict, req.actor, now=datetime.now(UTC), key=key)
    await _tell(req, line)


async def on_follow_up(deps: SlackDeps, req: Req) -> None:
    """The "Follow-up" button on an open obligation (in the header, on the resolve's notice, in
    ``obligations``) → kept as a follow-up: a ``follow_up`` entry (its text, its holder as the owner,
    ``obligation_id``) that the ``trackers`` outbox topic files, and the obligation closed — once per obligation."""
    scope, oid = _split(req.action["value"])
    key = f"slack:follow_up:{scope}:{oid}"
    await _tell(req, await subcommands.handlers.keep_obligation(deps.service, scope, oid, req.actor, key=key))


async def on_record_as(deps: SlackDeps, req: Req) -> None:
    """A kind button of the "Record in incident…" shortcut: the message becomes a goal/constraint/… entry."""
    try:
        v = json.loads(req.action["value"])
        scope, kind, ts, text = str(v["s"]), str(v["k"]), str(v["ts"]), str(v["t"])
    except (ValueError, KeyError, TypeError):
        raise InvalidInput(f"malformed button value {req.action['value']!r}") from None
    if kind not in RECORD_KINDS or not text.strip():
        raise InvalidInput(f"cannot record that message as {kind!r}")
    messages = await deps.store.read(scope, kinds=["message"])
    refs = [e.seq for e in messages if getattr(e.payload, "ts", "") == ts][-1:]
    result = await deps.service.record(
        scope, kind, {"text": text}, req.actor, refs=refs, idempotency_key=f"slack:record:{scope}:{ts}:{kind}"
    )
    done = "was already recorded" if result.duplicate else "is recorded"
    await _tell(req, f"That message {done} as a {kind} in `{scope}`.")


async def on_page_button(deps: SlackDeps, req: Req) -> None:
    """The page DM's Acknowledge (stops the escalation) and Escalate (pages the next level now)."""
    scope, seq = _split(req.action["value"])
    if not seq.isdigit():
        raise InvalidInput(f"malformed button value {req.action['value']!r}")
    if req.action["action_id"] == Action.ONCALL_ACK:
        await oncall_desk.acknowledge(deps.store, scope, req.actor.id, via="button")
        await _tell(req, f":white_check_mark: Acknowledged `{scope}`: the escalation stops.")
        return
    result = await oncall_desk.escalate(deps.store, scope, int(seq), req.actor.id)
    step = getattr(result.entries[-1].payload, "to_level", 0)
    await _tell(req, f":arrow_double_up: Escalating `{scope}`: the next level (step {step + 1}) is paged now.")


async def on_home_link(deps: SlackDeps, req: Req) -> None:
    return None  # a link button: Slack opens the URL; nothing to record


async def on_record_shortcut(deps: SlackDeps, req: Req) -> None:
    """The "Record in incident…" message shortcut: offers the four kinds, only to the person who asked."""
    body = req.body
    channel = (body.get("channel") or {}).get("id", "")
    message = body.get("message") or {}
    ts, text = str(message.get("ts", "")), str(message.get("text", ""))
    scope = await deps.index.route(channel, str(message.get("thread_ts") or ts)) or await deps.index.route(channel)
    if scope is None:
        await _tell(req, "That message is not in an incident's thread or channel.")
        return
    await req.respond(
        text=f"Record this message in `{scope}` as…",
        blocks=record_choices(scope, ts, text),
        response_type="ephemeral",
        replace_original=False,
    )


Handler = Callable[[SlackDeps, Req], Awaitable[None]]
HANDLERS: Mapping[Action, Handler] = MappingProxyType(
    {
        Action.SEVERITY: on_severity,
        Action.RESOLVE: on_resolve,
        Action.EXPORT: on_export,
        Action.PICK_SCOPE: on_pick,
        Action.SUGGESTION_ACCEPT: on_suggestion,
        Action.SUGGESTION_DISMISS: on_suggestion,
        Action.PROPOSAL_APPROVE: on_proposal,
        Action.PROPOSAL_DENY: on_proposal,
        Action.HOME_OPEN: on_home_link,
        Action.OBLIGATION_FOLLOW_UP: on_follow_up,
        Action.ONCALL_ACK: on_page_button,
        Action.ONCALL_ESCALATE: on_page_button,
        **dict.fromkeys(FINDING_VERDICTS, on_finding),
        **dict.fromkeys(RECORD_AS.values(), on_record_as),
    }
)


def _bound(handler: Handler, deps: SlackDeps) -> Work:
    async def work(req: Req) -> None:
        await handler(deps, req)

    return work


def register(app: AsyncApp, deps: SlackDeps) -> None:
    for action_id, handler in HANDLERS.items():
        chain = [counted(deps, "actions")]
        if action_id != Action.HOME_OPEN:  # a link button: no one to look up
            chain.append(action_context(deps))
        app.action(action_id.value, middleware=chain)(acked(deps, _bound(handler, deps)))
    chain = [counted(deps, "shortcuts"), shortcut_context(deps)]
    app.shortcut(Shortcut.RECORD.value, middleware=chain)(acked(deps, _bound(on_record_shortcut, deps)))


def shortcut_context(deps: SlackDeps) -> Any:
    """A message shortcut: the person, where the message is, ``slack:shortcut:<trigger id>``."""

    async def person(req: Req) -> None:
        body = req.body
        user = body["user"]["id"]
        message = body.get("message") or {}
        channel = (body.get("channel") or {}).get("id", "")
        req.context[WHERE] = Where(
            channel=channel, user=user, thread_ts=message.get("thread_ts", ""), message_ts=message.get("ts", "")
        )
        req.context[KEY] = f"slack:shortcut:{body.get('trigger_id', '')}"
        req.context[ACTOR] = await deps.human(user, body["user"].get("username") or body["user"].get("name") or "")

    return middleware(person)


def record_choices(scope: str, ts: str, text: str) -> list[dict[str, Any]]:
    """The shortcut's ephemeral answer: the message, and one button per kind (each value carries the text)."""
    clipped = text[:1500]
    buttons = [
        render.button(kind.capitalize(), RECORD_AS[kind], json.dumps({"s": scope, "k": kind, "ts": ts, "t": clipped}))
        for kind in RECORD_KINDS
    ]
    quote = render.esc(clipped[:300])
    return [
        render.section(f"Record this message in `{scope}` as…\n> {quote}"),
        {"type": "actions", "block_id": f"record:{ts}", "elements": buttons},
    ]
