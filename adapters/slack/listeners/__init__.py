"""Bolt listener families, one ``register(app, deps)`` each; every handler validates, calls core, replies."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.listeners import actions, commands, errors, events, views


def register_all(app: AsyncApp, deps: SlackDeps) -> None:
    errors.register(app, deps)
    commands.register(app, deps)
    events.register(app, deps)
    actions.register(app, deps)
    views.register(app, deps)
