"""Block actions: header controls, the scope picker, suggestion and proposal buttons (stored and acked by the intake)."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from adapters.slack import subcommands
from adapters.slack.deps import SlackDeps
from adapters.slack.ids import Action
from adapters.slack.listeners.errors import Work, acked
from adapters.slack.middleware import action_context, counted
from adapters.slack.request import Req
from core.errors import InvalidInput


def _split(value: str) -> tuple[str, str]:
    scope, sep, item = value.partition("|")
    if not sep or not scope or not item:
        raise InvalidInput(f"malformed button value {value!r}")
    return scope, item


async def _tell(req: Req, text: str) -> None:
    await req.respond(text=text, response_type="ephemeral", replace_original=False)


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_severity(req: Req) -> None:
        scope = req.action.get("block_id", "").removeprefix("header:")
        severity = int(req.action["selected_option"]["value"])
        result = await deps.service.set_severity(scope, severity, req.actor, idempotency_key=req.key)
        await _tell(req, f"`{scope}` is SEV{result.state.severity}.")

    async def on_resolve(req: Req) -> None:
        await deps.service.resolve(req.action["value"], req.actor, idempotency_key=req.key)
        await _tell(req, f":white_check_mark: `{req.action['value']}` is resolved.")

    async def on_export(req: Req) -> None:
        if deps.ports.export is None:
            await _tell(req, "Reports are not available here.")
            return
        await _tell(req, await deps.ports.export(scope=req.action["value"], fmt="md", actor=req.actor, key=req.key))

    async def on_pick(req: Req) -> None:
        scope, _, text = req.action["selected_option"]["value"].partition(" ")
        result = await deps.runner.run(subcommands.parse(f"{text} {scope}"), req.actor, req.where, req.key)
        await req.respond(
            text=result.text, blocks=result.blocks or None, response_type="ephemeral", replace_original=True
        )

    async def on_suggestion(req: Req) -> None:
        scope, sid = _split(req.action["value"])
        verdict = "accepted" if req.action["action_id"] == Action.SUGGESTION_ACCEPT else "dismissed"
        result = await deps.service.suggestion_feedback(
            scope, sid, verdict, req.actor, idempotency_key=f"slack:feedback:{scope}:{sid}"
        )
        await _tell(
            req,
            f"Suggestion {verdict}."
            if result.entries and not result.duplicate
            else "That suggestion was already answered.",
        )

    async def on_proposal(req: Req) -> None:
        scope, pid = _split(req.action["value"])
        if deps.ports.decide is None:
            await _tell(req, "Approvals are not available here.")
            return
        approve = req.action["action_id"] == Action.PROPOSAL_APPROVE
        await _tell(
            req,
            await deps.ports.decide(
                scope=scope, proposal_id=pid, approve=approve, actor=req.actor, reason="", key=req.key
            ),
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
        chain = [counted(deps, "actions")]
        if action_id != Action.HOME_OPEN:  # a link button: no one to look up
            chain.append(action_context(deps))
        app.action(action_id.value, middleware=chain)(acked(deps, work))
