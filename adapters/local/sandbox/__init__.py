"""The local sandbox: a browser page that is a small Slack workspace for decklog, so nobody needs a Slack app
to try it.

``decklog serve`` without Slack credentials talks to an in-process fake Slack (``server.sandbox``); this feature
serves a page on the bot's own port (``http://127.0.0.1:8080/`` by default) that shows that workspace —
channels, threads, Block Kit messages, reactions, modals, App Home — and lets a person act in it. Every input
reaches the bot as a signed Slack request through ``/slack/events``; the sample alert and deploy go through the
bot's public receivers. See :mod:`adapters.local.sandbox.page` for the routes,
:mod:`adapters.local.sandbox.environment` for the settings it fills (deploy URL, status page URL, alert token,
approvers) and :mod:`adapters.local.sandbox.persistence` for how the workspace and the deploy service outlive a
restart (``DATA_DIR/sandbox/``).

It must run before the features that read those settings (``bot.features`` lists it first), and it restores the
workspace before the server starts its dispatcher, so the Slack sender never posts into a workspace that has
not been restored yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from adapters.local.sandbox.environment import SandboxEnvironment, prepare
from adapters.local.sandbox.live import LiveFeed
from adapters.local.sandbox.page import SandboxPage
from adapters.local.sandbox.persistence import SandboxPersistence, sandbox_dir
from adapters.local.sandbox.samples import SampleSender
from adapters.local.slack import FakeSlack

if TYPE_CHECKING:
    from bot.server import DecklogServer

__all__ = ["SANDBOX_KEY", "SandboxEnvironment", "SandboxPage", "SandboxPersistence", "sandbox_feature"]

SANDBOX_KEY: web.AppKey[SandboxPage] = web.AppKey("sandbox_page", SandboxPage)


async def sandbox_feature(server: DecklogServer) -> None:
    """Serve the sandbox page; does nothing unless ``server.mode == "sandbox"``."""
    if server.mode != "sandbox" or not isinstance(server.sandbox, FakeSlack):
        return
    slack: FakeSlack = server.sandbox
    keeper = SandboxPersistence(sandbox_dir(server.settings.data_dir))
    keeper.restore_workspace(slack.workspace)  # before the dispatcher starts: senders see the old threads
    env = await prepare(server.settings, server.config, slack.workspace, persistence=keeper)
    server.on_stop(env.stop)
    keeper.watch(slack.workspace, env.deploy)
    server.on_stop(keeper.close)  # stoppers run in reverse: this one before the services stop

    def routes() -> set[str]:
        return {resource.canonical for resource in server.web.router.resources()}

    samples = SampleSender(
        base_url=lambda: server.url,
        token=env.alert_token,
        routes=routes,
        deploy=env.deploy,
        service=server.runtime.service,
    )
    server.on_stop(samples.close)
    live = LiveFeed(slack.workspace)
    server.on_stop(live.close)
    page = SandboxPage(slack, env, samples, live, routes=routes)
    page.add_routes(server.web.router)
    server.web[SANDBOX_KEY] = page
    _publish(
        server,
        sandbox_deploy=env.deploy,
        sandbox_deploy_url=env.deploy.base_url,
        sandbox_alert_token=env.alert_token,
        sandbox_statuspage_url=env.statuspage_url,
        sandbox_persistence=keeper,
    )


def _publish(server: Any, **values: object) -> None:
    """Attributes other features may read (``getattr(server, "sandbox_deploy_url", None)``)."""
    for name, value in values.items():
        setattr(server, name, value)
