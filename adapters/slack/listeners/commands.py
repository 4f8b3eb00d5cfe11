"""``/incident …`` — ack at once, run the command through core, answer ephemerally (or open the declare modal)."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import grammar, render
from adapters.slack.deps import SlackDeps
from adapters.slack.hooks import Where
from adapters.slack.ids import COMMAND


def register(app: AsyncApp, deps: SlackDeps) -> None:
    @app.command(COMMAND)
    async def on_incident(ack: Any, command: dict[str, Any], respond: Any, client: AsyncWebClient) -> None:
        await ack()
        deps.count("commands")
        cmd = grammar.parse(command.get("text", ""))
        actor = await deps.human(command["user_id"], command.get("user_name", ""))
        where = Where(channel=command["channel_id"], user=command["user_id"])
        key = f"slack:cmd:{command.get('trigger_id') or command.get('response_url', '')}"
        reply = await deps.runner.run(cmd, actor, where, key)
        if reply.open_modal:
            await client.views_open(trigger_id=command["trigger_id"], view=render.declare_modal(command["channel_id"]))
            return
        await respond(text=reply.text, blocks=reply.blocks or None, response_type="ephemeral")
