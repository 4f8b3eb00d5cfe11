"""One Slack request as a listener's work sees it, and the Bolt context keys the middleware fill in for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.ports import Where
from core.entries import Actor

# Bolt context keys the middleware (adapters/slack/middleware.py) fill in for the listeners.
ACTOR = "decklog_actor"
WHERE = "decklog_where"
KEY = "decklog_key"  # the request's idempotency key
SCOPE = "decklog_scope"  # the scope the request is about, when the middleware found one
MESSAGE = "decklog_message"  # the message a reaction is on
FAILED = "decklog_failed"  # an error raised in a middleware, raised again by run_work


@dataclass
class Req:
    """One Slack request, as the work behind its ack sees it (``actor``, ``where``, ``key``, ``scope``: from the
    middleware the listener was registered with)."""

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
