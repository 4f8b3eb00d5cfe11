"""The features ``decklog serve`` wires in, in order. Each is ``async def feature(server) -> None`` and may add
routes (``server.web.router``), senders (``server.runtime.dispatcher.register``), Slack hooks
(``server.hooks``) and stop callbacks (``server.on_stop``). Adding an integration = one line here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.server import Feature


def all_features() -> list[Feature]:
    from adapters.local.sandbox import sandbox_feature
    from bot.actions import actions_feature
    from bot.agents import agents_feature
    from bot.api import api_feature
    from bot.receivers import receivers_feature
    from bot.reports import reports_feature

    return [
        sandbox_feature,  # first: in sandbox mode it fills the settings later features read (deploy URL, alert token)
        api_feature,  # the read-only REST API under /api/scopes
        receivers_feature,  # POST /alerts/{source} and /changes/{source}; alert summaries; change ↔ incident links
        reports_feature,  # the Slack export hook (the upload itself is the Slack sender's)
        agents_feature,  # debounced agent turns, context agents, ask (the runtime: server.web[bot.agents.AGENTS])
        actions_feature,  # after agents: the action desk plugs itself in as their Proposer and catalog
    ]
