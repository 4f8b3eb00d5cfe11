"""Block actions: header controls, the scope picker, suggestion and proposal buttons (stored and acked by the intake)."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from adapters.slack import subcommands
from adapters.slack.deps import SlackDeps
from adapters.slack.ids import Action
from adapters.slack.listeners.errors import Req, Work, acked
from adapters.slack.ports import Where
from core.entries import Actor
from core.errors import InvalidInput


def _split(value: str) -> tuple[str, str]:
    scope, sep, item = value.partition("|")
    if not sep or not scope or not item:
        raise InvalidInput(f"malformed button value {value!r}")
    return scope, item


async def _who(deps: SlackDeps, req: Req) -> tuple[Actor, Where, str]:
    body = req.body
    user = body["user"]["id"]
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id", "")
    message = body.get("message") or {}
    where = Where(channel=channel, user=user, thread_ts=message.get("thread_ts", ""), message_ts=message.get("ts", ""))
    key = f"slack:act:{req.action.get('action_ts', '')}:{user}:{req.action.get('action_id', '')}"
    actor = await deps.human(user, body["user"].get("username") or body["user"].get("name") or "")
    return actor, where, key


async def _tell(req: Req, text: str) -> None:
    await req.respond(text=text, response_type="ephemeral", replace_original=False)


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_severity(req: Req) -> None:
        actor, _where, key = await _who(deps, req)
        scope = req.action.get("block_id", "").removeprefix("header:")
        severity = int(req.action["selected_option"]["value"])
        result = await deps.service.set_severity(scope, severity, actor, idempotency_key=key)
        await _tell(req, f"`{scope}` is SEV{result.state.severity}.")

    async def on_resolve(req: Req) -> None:
        actor, _where, key = await _who(deps, req)
        await deps.service.resolve(req.action["value"], actor, idempotency_key=key)
        await _tell(req, f":white_check_mark: `{req.action['value']}` is resolved.")

    async def on_export(req: Req) -> None:
        actor, _where, key = await _who(deps, req)
        if deps.ports.export is None:
            await _tell(req, "Reports are not available here.")
            return
        await _tell(req, await deps.ports.export(scope=req.action["value"], fmt="md", actor=actor, key=key))

    async def on_pick(req: Req) -> None:
        actor, where, key = await _who(deps, req)
        scope, _, text = req.action["selected_option"]["value"].partition(" ")
        result = await deps.runner.run(subcommands.parse(f"{text} {scope}"), actor, where, key)
        await req.respond(
            text=result.text, blocks=result.blocks or None, response_type="ephemeral", replace_original=True
        )

    async def on_suggestion(req: Req) -> None:
        actor, _where, _key = await _who(deps, req)
        scope, sid = _split(req.action["value"])
        verdict = "accepted" if req.action["action_id"] == Action.SUGGESTION_ACCEPT else "dismissed"
        result = await deps.service.suggestion_feedback(
            scope, sid, verdict, actor, idempotency_key=f"slack:feedback:{scope}:{sid}"
        )
        await _tell(
            req,
            f"Suggestion {verdict}."
            if result.entries and not result.duplicate
            else "That suggestion was already answered.",
        )

    async def on_proposal(req: Req) -> None:
        actor, _where, key = await _who(deps, req)
        scope, pid = _split(req.action["value"])
        if deps.ports.decide is None:
            await _tell(req, "Approvals are not available here.")
            return
        approve = req.action["action_id"] == Action.PROPOSAL_APPROVE
        await _tell(
            req, await deps.ports.decide(scope=scope, proposal_id=pid, approve=approve, actor=actor, reason="", key=key)
        )

    async def on_home_link(req: Req) -> None:
        return None  # a link button: Slack opens the URL; nothing to record

    handlers: dict[Action, Work] = {
        Action.SEVERITY: on_severity,
        Action.RESOLVE: on_resolve,
        Action.EXPORT: on_export,
        Action.PICK_SCOPE: on_pick,
        Action.SUGGESTION_ACCEPT: on_suggestion,
        Action.SUGGESTION_DISMISS: on_suggestion,
        Action.PROPOSAL_APPROVE: on_proposal,
        Action.PROPOSAL_DENY: on_proposal,
        Action.HOME_OPEN: on_home_link,
    }
    for action_id, work in handlers.items():
        deps_counted = _counted(deps, work)
        app.action(action_id.value)(acked(deps, deps_counted))


def _counted(deps: SlackDeps, work: Work) -> Work:
    async def counted(req: Req) -> None:
        deps.count("actions")
        await work(req)

    counted.__name__ = work.__name__
    return counted
