"""The one error handler: known errors → an ephemeral message; anything else → logged with a correlation id
that the person is shown, so that an operator can find the traceback.

Listeners ack at once and hand their work to a background task (``acked``), so the HTTP response never waits
for the log or for Slack; every failure of that work goes through ``report`` — the same handler Bolt calls
(``app.error``) for failures before the ack. Not Bolt's lazy listeners: Bolt deep-copies the whole request for
each one *before* it answers Slack, which put that copy on every ack's path and, with a backlog of work, filled the
heap that the garbage collector then paused the event loop to walk (100–300 ms pauses, measured). See
docs/decisions.md.
"""

from __future__ import annotations

import asyncio
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
    """One Slack request, as the work behind its ack sees it."""

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


AckWith = Callable[[Any, dict[str, Any]], Awaitable[None]]


async def ack_now(ack: Any, _body: dict[str, Any]) -> None:
    await ack()


async def ack_automatically(_ack: Any, _body: dict[str, Any]) -> None:
    """Events: Bolt acknowledges them itself as soon as the listener returns."""


def acked(deps: SlackDeps, work: Work, ack_with: AckWith = ack_now) -> Callable[..., Awaitable[None]]:
    """A Bolt listener that acks (``ack_with``), starts ``work`` in the background and returns: Bolt answers
    Slack as soon as it returns."""

    async def listener(ack: Any, body: dict[str, Any], respond: Any, client: AsyncWebClient, context: Any) -> None:
        # Bolt injects arguments by these parameter names.
        await ack_with(ack, body)
        start_work(deps, work, Req(body, respond, client, context))

    listener.__name__ = f"acked_{work.__name__}"
    return listener


def start_work(deps: SlackDeps, work: Work, req: Req) -> None:
    """Run ``work`` in a task that waits for one of ``deps.work_slots`` (acks first: see SlackDeps.work_slots);
    tracked in ``deps.work_tasks`` so that a stopping server lets it finish."""

    async def run() -> None:
        async with deps.work_slots:
            try:
                await work(req)
            except Exception as exc:
                await report(deps, exc, req.body, req.respond, req.client)

    task = asyncio.get_running_loop().create_task(run(), name=f"slack:{work.__name__}")
    deps.work_tasks.add(task)
    task.add_done_callback(deps.work_tasks.discard)


def register(app: AsyncApp, deps: SlackDeps) -> None:
    @app.error
    async def on_error(error: Exception, body: dict[str, Any], respond: Any, client: AsyncWebClient) -> None:
        await report(deps, error, body, respond, client)
