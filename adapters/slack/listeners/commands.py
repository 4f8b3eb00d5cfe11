"""``/incident …`` — stored and acked by the intake; the work runs through core and answers ephemerally (or opens the modal)."""

from __future__ import annotations

import logging

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError

from decklog.adapters.slack import render, subcommands
from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.ids import COMMAND
from decklog.adapters.slack.listeners.errors import acked
from decklog.adapters.slack.middleware import command_context, counted
from decklog.adapters.slack.request import Req

log = logging.getLogger("decklog.slack")
FORM_EXPIRED = "The declare form could not be opened in time. Run `/incident declare` again, or give a title."


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_incident(req: Req) -> None:
        command = req.body
        cmd = subcommands.parse(command.get("text", ""))
        reply = await deps.runner.run(cmd, req.actor, req.where, req.key)
        if reply.open_modal:
            try:
                await req.client.views_open(
                    trigger_id=command["trigger_id"], view=render.declare_modal(command["channel_id"])
                )
            except SlackApiError as exc:  # a replayed request's trigger_id expires after 3 s
                log.warning("could not open the declare form: %s", exc.response.get("error"))
                await req.respond(text=FORM_EXPIRED, response_type="ephemeral")
            return
        await req.respond(text=reply.text, blocks=reply.blocks or None, response_type="ephemeral")
        if reply.notify:  # handover shows the new holder the catch-up
            await subcommands.handlers.send_notify(req.client, req.where, reply.notify)

    app.command(COMMAND, middleware=[counted(deps, "commands"), command_context(deps)])(acked(deps, on_incident))
