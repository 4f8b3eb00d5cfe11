"""The declare modal's submission."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.deps import SlackDeps
from adapters.slack.ids import DeclareField, View


def register(app: AsyncApp, deps: SlackDeps) -> None:
    @app.view(View.DECLARE)
    async def on_declare(ack: Any, body: dict[str, Any], view: dict[str, Any], client: AsyncWebClient) -> None:
        values = view["state"]["values"]
        title = ((values.get(DeclareField.TITLE_BLOCK) or {}).get(DeclareField.TITLE) or {}).get("value") or ""
        if not title.strip():
            await ack(
                response_action="errors", errors={DeclareField.TITLE_BLOCK: "Say in a few words what is happening."}
            )
            return
        await ack()
        deps.count("views")
        sev_opt = ((values.get(DeclareField.SEVERITY_BLOCK) or {}).get(DeclareField.SEVERITY) or {}).get(
            "selected_option"
        )
        options = ((values.get(DeclareField.OPTIONS_BLOCK) or {}).get(DeclareField.OPTIONS) or {}).get(
            "selected_options"
        ) or []
        user = body["user"]["id"]
        channel = view.get("private_metadata", "")
        result = await deps.service.declare(
            title=title,
            severity=int(sev_opt["value"]) if sev_opt else None,
            actor=await deps.human(user, body["user"].get("username", "")),
            via="slack",
            channel=channel,
            dedicated_channel=any(o.get("value") == "dedicated_channel" for o in options),
            idempotency_key=f"slack:view:{view['id']}",
        )
        if channel[:1] in ("C", "G"):
            await client.chat_postEphemeral(
                channel=channel,
                user=user,
                text=f":rotating_light: Declared `{result.state.scope}`; its thread is on its way.",
            )
