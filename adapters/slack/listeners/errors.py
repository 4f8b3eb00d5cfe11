"""The one error handler: known errors → an ephemeral message; anything else → logged with a correlation id
that the person is shown, so that an operator can find the traceback."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import render
from adapters.slack.deps import SlackDeps
from adapters.slack.grammar import UsageError
from core.errors import DecklogError

log = logging.getLogger("decklog.slack")


def message_for(error: BaseException) -> tuple[str, list[dict[str, Any]] | None]:
    if isinstance(error, UsageError):
        return f"{error}", render.usage(str(error))
    if isinstance(error, DecklogError):
        return f":warning: {error}", None
    ref = uuid.uuid4().hex[:10]
    log.error("unhandled error in a Slack listener (ref %s)", ref, exc_info=error)
    return f":boom: Something went wrong on our side (ref `{ref}`). It was logged; the on-call can look it up.", None


def register(app: AsyncApp, deps: SlackDeps) -> None:
    @app.error
    async def on_error(error: Exception, body: dict[str, Any], respond: Any, client: AsyncWebClient) -> None:
        deps.count("errors")
        text, blocks = message_for(error)
        try:
            if body.get("response_url") or (body.get("type") in ("block_actions",) and body.get("response_url")):
                await respond(text=text, blocks=blocks, response_type="ephemeral", replace_original=False)
                return
            event = body.get("event") or {}
            channel = event.get("channel") or (event.get("item") or {}).get("channel")
            user = event.get("user")
            if channel and user:
                await client.chat_postEphemeral(
                    channel=channel, user=user, thread_ts=event.get("thread_ts"), text=text, blocks=blocks
                )
        except Exception:  # the error path must not raise
            log.exception("could not tell the user about an error")
