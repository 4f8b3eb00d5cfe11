"""One Slack request as a listener's work sees it, and the Bolt context keys the middleware fill in for it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.ports import Where
from decklog.core.entries import Actor

# Bolt context keys the middleware (adapters/slack/middleware.py) fill in for the listeners.
ACTOR = "decklog_actor"
WHERE = "decklog_where"
KEY = "decklog_key"  # the request's idempotency key
SCOPE = "decklog_scope"  # the scope the request is about, when the middleware found one
MESSAGE = "decklog_message"  # the message a reaction is on
FAILED = "decklog_failed"  # an error raised in a middleware, raised again by run_work

log = logging.getLogger("decklog.slack")


@dataclass
class Req:
    """One Slack request, as the work behind its ack sees it (``actor``, ``where``, ``key``, ``scope``: from the
    middleware the listener was registered with)."""

    body: dict[str, Any]
    respond: Any
    client: AsyncWebClient
    context: Any

    def __post_init__(self) -> None:
        if callable(self.respond) and not getattr(self.respond, "checked", False):
            self.respond = _checked(self.respond)

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

    @property
    def actor(self) -> Actor:
        actor: Actor = self.context[ACTOR]
        return actor

    @property
    def where(self) -> Where:
        where: Where = self.context[WHERE]
        return where

    @property
    def key(self) -> str:
        return str(self.context[KEY])

    @property
    def scope(self) -> str | None:
        scope: str | None = self.context.get(SCOPE)
        return scope


def _checked(respond: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``respond`` that says so in the log when Slack refuses the answer (a ``response_url`` answering 4xx, e.g.
    ``invalid_blocks``): Bolt returns the refusal instead of raising, and the person would see nothing."""

    async def respond_checked(*args: Any, **kwargs: Any) -> Any:
        response = await respond(*args, **kwargs)
        status = getattr(response, "status_code", 200)
        if isinstance(status, int) and status >= 300:
            text = str(kwargs.get("text", ""))[:80]
            log.warning("slack: the response_url answered %s (%s) to %r", status, getattr(response, "body", ""), text)
        return response

    respond_checked.checked = True  # type: ignore[attr-defined]
    return respond_checked
