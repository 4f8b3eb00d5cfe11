"""The declare modal: validated in the ack (errors show in the form; see ``validation_errors``), then declared."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp

from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.ids import DeclareField, View
from decklog.adapters.slack.listeners.errors import acked
from decklog.adapters.slack.middleware import counted, view_context
from decklog.adapters.slack.request import Req
from decklog.core.entries import TITLE_MAX


def _title(view: dict[str, Any]) -> str:
    """The title typed in the form ("" when the form is not shaped as Slack sends it)."""
    found: Any = view
    for step in ("state", "values", DeclareField.TITLE_BLOCK, DeclareField.TITLE, "value"):
        found = found.get(step) if isinstance(found, dict) else None
    return found if isinstance(found, str) else ""


def validation_errors(body: dict[str, Any]) -> dict[str, Any] | None:
    """The ack that keeps the modal open with its errors (``response_action: errors``), or None if it is valid.
    Called by the intake before anything is stored, and by Bolt's listener (whose ack then answers nobody)."""
    view = body.get("view")
    if not isinstance(view, dict) or view.get("callback_id") != View.DECLARE.value:
        return None
    title = " ".join(_title(view).split())
    if not title:
        problem = "Say in a few words what is happening."
    elif len(title) > TITLE_MAX:
        problem = f"At most {TITLE_MAX} characters (this one has {len(title)}): put the details in the summary."
    else:
        return None
    return {"response_action": "errors", "errors": {DeclareField.TITLE_BLOCK: problem}}


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def validate(ack: Any, body: dict[str, Any]) -> None:
        errors = validation_errors(body)
        await (ack(**errors) if errors else ack())

    async def on_declare(req: Req) -> None:
        view = req.view
        title = _title(view)
        if not title.strip():
            return
        values = view["state"]["values"]
        sev_opt = ((values.get(DeclareField.SEVERITY_BLOCK) or {}).get(DeclareField.SEVERITY) or {}).get(
            "selected_option"
        )
        options = ((values.get(DeclareField.OPTIONS_BLOCK) or {}).get(DeclareField.OPTIONS) or {}).get(
            "selected_options"
        ) or []
        user = req.body["user"]["id"]
        channel = view.get("private_metadata", "")
        result = await deps.service.declare(
            title=title,
            severity=int(sev_opt["value"]) if sev_opt else None,
            actor=req.actor,
            via="slack",
            channel=channel,
            dedicated_channel=any(o.get("value") == "dedicated_channel" for o in options),
            idempotency_key=req.key,
        )
        if channel[:1] in ("C", "G"):
            await req.client.chat_postEphemeral(
                channel=channel,
                user=user,
                text=f":rotating_light: Declared `{result.state.scope}`; its thread is on its way.",
            )

    app.view(View.DECLARE.value, middleware=[counted(deps, "views"), view_context(deps)])(
        acked(deps, on_declare, validate)
    )
