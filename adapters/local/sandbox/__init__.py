"""The local sandbox: a browser page that is a small Slack workspace for decklog, so nobody needs a Slack app
to try it.

``decklog serve`` without Slack credentials talks to an in-process fake Slack (``open_local_slack``); the page
(``build_page``) is served on the bot's own port (``http://127.0.0.1:8080/`` by default) and shows that
workspace — channels, threads, Block Kit messages, reactions, modals, App Home — and lets a person act in it.
Every input reaches the bot as a signed Slack request through ``/slack/events``; the sample alert and deploy go
through the bot's public receivers. See :mod:`adapters.local.sandbox.page` for the routes,
:mod:`adapters.local.sandbox.environment` for the settings it fills (deploy URL, status page URL, alert token,
approvers: returned as overrides, never written into the bot's settings) and
:mod:`adapters.local.sandbox.persistence` for how the workspace and the deploy service outlive a restart
(``DATA_DIR/sandbox/``).

The composition root calls, in this order: ``open_local_slack`` (the Slack endpoint), ``open_world`` (restores
the workspace before the dispatcher starts, so the Slack sender never posts into a workspace that has not been
restored yet; starts the services; returns the overrides), then, once the runtime exists, ``build_page``.
Nothing here imports ``bot``.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from decklog.adapters.local.sandbox.environment import LocalWants, SandboxEnvironment, SettingsOverrides, prepare
from decklog.adapters.local.sandbox.live import LiveFeed
from decklog.adapters.local.sandbox.page import SandboxPage
from decklog.adapters.local.sandbox.persistence import SandboxPersistence, sandbox_dir
from decklog.adapters.local.sandbox.samples import SampleSender
from decklog.adapters.local.slack import FakeSlack
from decklog.core.service import ScopeService

__all__ = [
    "LocalPage",
    "LocalSlack",
    "LocalWants",
    "LocalWorld",
    "SandboxEnvironment",
    "SandboxPage",
    "SandboxPersistence",
    "SettingsOverrides",
    "build_page",
    "open_local_slack",
    "open_world",
]

Stopper = Callable[[], Awaitable[None]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class LocalSlack:
    """The fake Slack the sandbox talks to, with credentials only it accepts (nothing reaches a real workspace)."""

    slack: FakeSlack
    token: str
    base_url: str
    signing_secret: str


async def open_local_slack() -> LocalSlack:
    slack = FakeSlack(bot_token=f"xoxb-sandbox-{secrets.token_hex(8)}")
    token = slack.server.bot_token
    assert token is not None
    await slack.start()
    return LocalSlack(slack, token, slack.base_url, secrets.token_hex(16))


@dataclass
class LocalWorld:
    slack: FakeSlack
    env: SandboxEnvironment
    keeper: SandboxPersistence
    drains: list[Stopper] = field(default_factory=list)

    @property
    def overrides(self) -> SettingsOverrides:
        return self.env.overrides


async def open_world(slack: FakeSlack, wants: LocalWants, data_dir: Path | str) -> LocalWorld:
    """Restore the workspace, start the fake services, and say which settings they fill."""
    keeper = SandboxPersistence(sandbox_dir(data_dir))
    keeper.restore_workspace(slack.workspace)  # before the dispatcher starts: senders see the old threads
    env = await prepare(wants, slack.workspace, persistence=keeper)
    keeper.watch(slack.workspace, env.deploy)
    return LocalWorld(slack, env, keeper, drains=[env.stop, keeper.close])  # drained in reverse: keeper first


@dataclass
class LocalPage:
    page: SandboxPage
    routes: list[tuple[str, str, Handler]]
    drains: list[Stopper]


def build_page(
    world: LocalWorld,
    *,
    service: ScopeService,
    base_url: Callable[[], str],
    routes: Callable[[], set[str]],
    public: bool = False,
) -> LocalPage:
    """The page, its sample buttons (through the bot's receivers at ``base_url()``) and its live feed."""
    samples = SampleSender(
        base_url=base_url, token=world.env.alert_token, routes=routes, deploy=world.env.deploy, service=service
    )
    live = LiveFeed(world.slack.workspace)
    page = SandboxPage(world.slack, world.env, samples, live, routes=routes, public=public)
    return LocalPage(page, page.routes(), drains=[samples.close, live.close])
