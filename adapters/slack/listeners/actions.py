"""Block actions: header controls, the scope picker, suggestion and proposal buttons."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp

from adapters.slack import grammar
from adapters.slack.deps import SlackDeps
from adapters.slack.hooks import Where
from adapters.slack.ids import Action
from core.entries import Actor
from core.errors import InvalidInput


def _split(value: str) -> tuple[str, str]:
    scope, sep, item = value.partition("|")
    if not sep or not scope or not item:
        raise InvalidInput(f"malformed button value {value!r}")
    return scope, item


async def _context(deps: SlackDeps, body: dict[str, Any]) -> tuple[Actor, Where, str]:
    user = body["user"]["id"]
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id", "")
    message = body.get("message") or {}
    where = Where(channel=channel, user=user, thread_ts=message.get("thread_ts", ""), message_ts=message.get("ts", ""))
    action = body["actions"][0]
    key = f"slack:act:{action.get('action_ts', '')}:{user}:{action['action_id']}"
    return await deps.human(user, body["user"].get("username") or body["user"].get("name") or ""), where, key


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def reply(respond: Any, text: str) -> None:
        await respond(text=text, response_type="ephemeral", replace_original=False)

    @app.action(Action.SEVERITY)
    async def on_severity(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any) -> None:
        await ack()
        deps.count("actions")
        actor, _where, key = await _context(deps, body)
        scope = action.get("block_id", "").removeprefix("header:")
        severity = int(action["selected_option"]["value"])
        result = await deps.service.set_severity(scope, severity, actor, idempotency_key=key)
        await reply(respond, f"`{scope}` is SEV{result.state.severity}.")

    @app.action(Action.RESOLVE)
    async def on_resolve(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any) -> None:
        await ack()
        deps.count("actions")
        actor, _where, key = await _context(deps, body)
        await deps.service.resolve(action["value"], actor, idempotency_key=key)
        await reply(respond, f":white_check_mark: `{action['value']}` is resolved.")

    @app.action(Action.EXPORT)
    async def on_export(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any) -> None:
        await ack()
        deps.count("actions")
        actor, _where, key = await _context(deps, body)
        if deps.hooks.export is None:
            await reply(respond, "Reports are not available here.")
            return
        await reply(respond, await deps.hooks.export(action["value"], "md", actor, key))

    @app.action(Action.PICK_SCOPE)
    async def on_pick(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any) -> None:
        await ack()
        deps.count("actions")
        actor, where, key = await _context(deps, body)
        scope, _, text = action["selected_option"]["value"].partition(" ")
        cmd = grammar.parse(f"{text} {scope}")
        result = await deps.runner.run(cmd, actor, where, key)
        await respond(text=result.text, blocks=result.blocks or None, response_type="ephemeral", replace_original=True)

    @app.action(Action.SUGGESTION_ACCEPT)
    @app.action(Action.SUGGESTION_DISMISS)
    async def on_suggestion(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any) -> None:
        await ack()
        deps.count("actions")
        actor, _where, _key = await _context(deps, body)
        scope, sid = _split(action["value"])
        verdict = "accepted" if action["action_id"] == Action.SUGGESTION_ACCEPT else "dismissed"
        result = await deps.service.suggestion_feedback(
            scope, sid, verdict, actor, idempotency_key=f"slack:feedback:{scope}:{sid}"
        )
        await reply(respond, f"Suggestion {verdict}." if result.entries else "That suggestion was already answered.")

    @app.action(Action.PROPOSAL_APPROVE)
    @app.action(Action.PROPOSAL_DENY)
    async def on_proposal(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any) -> None:
        await ack()
        deps.count("actions")
        actor, _where, key = await _context(deps, body)
        scope, pid = _split(action["value"])
        if deps.hooks.decide is None:
            await reply(respond, "Approvals are not available here.")
            return
        text = await deps.hooks.decide(scope, pid, action["action_id"] == Action.PROPOSAL_APPROVE, actor, "", key)
        await reply(respond, text)

    @app.action(Action.HOME_OPEN)
    async def on_home_link(ack: Any) -> None:
        await ack()
