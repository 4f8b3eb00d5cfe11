"""The one error handler: known errors → an ephemeral message; anything else → logged with a correlation id
that the person is shown, so that an operator can find the traceback.

Slack requests are stored in the inbox and acknowledged before Bolt sees them (adapters/slack/intake.py); Bolt
runs here only to route a stored request to its listener, whose ``ack()`` then answers nobody. ``acked`` wraps the
work of a listener: it runs inline (the intake holds a work slot around the whole dispatch and marks the request
done when it returns), and every failure goes through ``failed`` — the same handler Bolt calls (``app.error``).
An unexpected error is handed back to the intake (``Outcome``): retried instead of being shown, and after the last
attempt shown and parked. See docs/decisions/0043-durable-inbox-persist-then-ack.md.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack import render, subcommands
from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.grammar import UsageError
from decklog.adapters.slack.request import FAILED, Req
from decklog.core.entries.registry import invalid_input
from decklog.core.errors import DecklogError

log = logging.getLogger("decklog.slack")


Work = Callable[[Req], Awaitable[None]]


def message_for(error: BaseException) -> tuple[str, list[dict[str, Any]] | None]:
    # An error's message may quote what the person typed: escaped, so it never pings or links anyone.
    if isinstance(error, UsageError):
        return render.esc(str(error)), subcommands.usage_blocks(str(error))
    if isinstance(error, DecklogError):
        return f":warning: {render.esc(str(error))}", None
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


OUTCOME = "decklog_outcome"  # the Bolt context key under which the intake passes an Outcome


@dataclass
class Outcome:
    """How one processing attempt of a stored request went, for the intake: ``error`` is an unexpected failure.
    It is shown to the person only on the ``final`` attempt; before that the intake retries the request, and after
    the final one it parks it with this error (``decklog doctor`` lists it)."""

    final: bool = True
    error: BaseException | None = None


async def failed(deps: SlackDeps, error: BaseException, req: Req) -> None:
    """An error in a stored request's work: a known one is shown to the person; an unexpected one is handed to the
    intake (``Outcome``), and shown to the person on the last attempt only."""
    if isinstance(error, ValidationError):  # a model built from what the person typed: their mistake, not a bug
        error = invalid_input(error)
    outcome = req.context.get(OUTCOME) if req.context is not None else None
    if not isinstance(error, UsageError | DecklogError) and isinstance(outcome, Outcome):
        outcome.error = error
        if not outcome.final:
            return
    await report(deps, error, req.body, req.respond, req.client)


def acked(deps: SlackDeps, work: Work, ack_with: AckWith = ack_now) -> Callable[..., Awaitable[None]]:
    """A Bolt listener that acks (``ack_with``; the request was acknowledged already) and runs ``work``, after the
    middleware it is registered with (``app.command(…, middleware=[…])``) filled the context in."""

    async def listener(ack: Any, body: dict[str, Any], respond: Any, client: AsyncWebClient, context: Any) -> None:
        # Bolt injects arguments by these parameter names.
        await ack_with(ack, body)
        await run_work(deps, work, Req(body, respond, client, context))

    listener.__name__ = f"acked_{work.__name__}"
    return listener


async def run_work(deps: SlackDeps, work: Work, req: Req) -> None:
    """Run ``work``; a known error is shown to the person; an unexpected one is shown on the last attempt only."""
    try:
        earlier = req.context.get(FAILED) if req.context is not None else None
        if earlier is not None:
            raise earlier
        await work(req)
    except Exception as exc:
        await failed(deps, exc, req)


def register(app: AsyncApp, deps: SlackDeps) -> None:
    @app.error
    async def on_error(
        error: Exception, body: dict[str, Any], respond: Any, client: AsyncWebClient, context: Any
    ) -> None:
        """Bolt's own failures (its global middleware, a listener's matcher) go the way a listener's go."""
        await failed(deps, error, Req(body, respond, client, context))
