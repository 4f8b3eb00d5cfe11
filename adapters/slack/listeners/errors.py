"""The one error handler: known errors → an ephemeral message; anything else → logged with a correlation id
that the person is shown, so that an operator can find the traceback.

Listeners ack at once and do their work in a Bolt *lazy* function (``lazy``), so the HTTP response never waits
for the log or for Slack; ``lazy`` routes every failure of that work through ``report`` — the same handler Bolt
calls (``app.error``) for failures before the ack.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import render
from adapters.slack.deps import SlackDeps
from adapters.slack.grammar import UsageError
from core.errors import DecklogError

log = logging.getLogger("decklog.slack")


@dataclass
class Req:
    """One Slack request as a lazy listener sees it."""

    body: dict[str, Any]
    respond: Any
    client: AsyncWebClient
    context: Any

    @property
    def event(self) -> dict[str, Any]:
        return self.body.get("event") or {}

    @property
    def action(self) -> dict[str, Any]:
        actions: list[dict[str, Any]] = self.body.get("actions") or [{}]
        return actions[0]

    @property
    def view(self) -> dict[str, Any]:
        return self.body.get("view") or {}


Work = Callable[[Req], Awaitable[None]]


def message_for(error: BaseException) -> tuple[str, list[dict[str, Any]] | None]:
    if isinstance(error, UsageError):
        return f"{error}", render.usage(str(error))
    if isinstance(error, DecklogError):
        return f":warning: {error}", None
    ref = uuid.uuid4().hex[:10]
    log.error("unhandled error in a Slack listener (ref %s)", ref, exc_info=error)
    return f":boom: Something went wrong on our side (ref `{ref}`). It was logged; the on-call can look it up.", None


async def report(
    deps: SlackDeps, error: BaseException, body: dict[str, Any], respond: Any, client: AsyncWebClient
) -> None:
    deps.count("errors")
    text, blocks = message_for(error)
    try:
        if body.get("response_url"):
            await respond(text=text, blocks=blocks, response_type="ephemeral", replace_original=False)
            return
        event = body.get("event") or {}
        channel = event.get("channel") or (event.get("item") or {}).get("channel")
        user = event.get("user") or (body.get("user") or {}).get("id")
        channel = channel or (body.get("view") or {}).get("private_metadata", "")
        if channel and user and channel[:1] in ("C", "G", "D"):
            await client.chat_postEphemeral(
                channel=channel, user=user, thread_ts=event.get("thread_ts"), text=text, blocks=blocks
            )
    except Exception:  # the error path must not raise
        log.exception("could not tell the user about an error")


def lazy(deps: SlackDeps, work: Work) -> Callable[..., Awaitable[None]]:
    """Wrap listener work as a Bolt lazy function whose failures reach ``report``."""

    async def run(body: dict[str, Any], respond: Any, client: AsyncWebClient, context: Any) -> None:
        # Bolt injects arguments by these parameter names.
        deps.work_in_flight += 1
        try:
            async with deps.work_slots:  # acks first: see SlackDeps.work_slots
                try:
                    await work(Req(body, respond, client, context))
                except Exception as exc:
                    await report(deps, exc, body, respond, client)
        finally:
            deps.work_in_flight -= 1

    run.__name__ = f"lazy_{work.__name__}"
    return run


async def ack_now(ack: Any) -> None:
    await ack()


def register(app: AsyncApp, deps: SlackDeps) -> None:
    @app.error
    async def on_error(error: Exception, body: dict[str, Any], respond: Any, client: AsyncWebClient) -> None:
        await report(deps, error, body, respond, client)
