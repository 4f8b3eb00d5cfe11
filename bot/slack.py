"""The Slack part, in two halves the root builds apart (the features sit between them):

- ``build_slack_out``: the Web API client and the Slack outbox sender (posts, header updates, uploads). Agents and
  actions need both (progress reactions, message updaters).
- ``build_slack_in``: what Slack sends us: the listeners' ports, Bolt, the intake that stores a request in the
  durable inbox before its ack, and the ``/slack/events`` route (adapters/slack/http.py). It needs the ports (ask,
  decide, export, compensate) that the features built.

Socket Mode is connected once the server listens (adapters/slack/socket_mode.py; the intake acks each envelope
after storing it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.app import build_slack_app, build_web_client
from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.http import EVENTS_ROUTE, events_handler
from decklog.adapters.slack.intake import SlackIntake
from decklog.adapters.slack.pacing import ChannelPacer, SharedChannelPacer
from decklog.adapters.slack.ports import SlackPorts
from decklog.adapters.slack.runner import CommandRunner
from decklog.adapters.slack.sender import SlackSender
from decklog.bot.config import SlackConfig
from decklog.bot.parts import Job, Provides, Route
from decklog.bot.settings import Settings, SlackMode
from decklog.core.alarm import Alarm
from decklog.core.outbox.sender import LeaseFence
from decklog.core.service import ScopeService
from decklog.core.store.ports import Inbox, IndexPort, LogStore, PaceSlots

log = logging.getLogger("decklog")

SANDBOX_ALERTS_CHANNEL = "C0ALERTS"
INBOX_PRUNE_S = 3600.0


@dataclass(frozen=True)
class SlackEndpoint:
    """Where the Web API is and how requests from Slack are verified (None: not verified here)."""

    token: str
    base_url: str
    signing_secret: str | None


def real_endpoint(settings: Settings, mode: SlackMode) -> SlackEndpoint:
    assert settings.slack_bot_token is not None  # settings.slack_mode checked the credentials
    secret = None
    if mode == "http":
        assert settings.slack_signing_secret is not None
        secret = settings.slack_signing_secret.get_secret_value()
    return SlackEndpoint(settings.slack_bot_token.get_secret_value(), settings.slack_base_url, secret)


@dataclass
class SlackOut:
    client: AsyncWebClient
    sender: SlackSender


def build_slack_out(
    store: LogStore,
    index: IndexPort,
    alarm: Alarm,
    endpoint: SlackEndpoint,
    mode: SlackMode,
    *,
    slack: SlackConfig,
    alerts_channel: str | None,
    pace_slots: PaceSlots | None,
    fence: LeaseFence | None,
    http: aiohttp.ClientSession,
) -> SlackOut:
    """``alerts_channel``: ``DECKLOG_ALERTS_CHANNEL`` (else ``[slack] alerts_channel``, else the sandbox's);
    ``pace_slots``: with replicas, the per-channel pace shared through the database; ``fence``: the dispatcher's
    cursor leases, checked right before each post."""
    client = build_web_client(endpoint.token, endpoint.base_url, session=http)
    channel = alerts_channel or slack.alerts_channel or (SANDBOX_ALERTS_CHANNEL if mode == "sandbox" else None)
    sender = SlackSender(
        client,
        store,
        index,
        alerts_channel=channel,
        pacer=channel_pacer(pace_slots, slack.pace_per_channel_s),
        channel_prefix=slack.dedicated_channel_prefix,
        alarm=alarm,
        header_interval=slack.header_update_interval_s,
        fence=fence,
    )
    return SlackOut(client, sender)


@dataclass
class SlackIn:
    hooks: SlackPorts
    deps: SlackDeps
    bolt: AsyncApp
    inbox: Inbox
    intake: SlackIntake
    counters: dict[str, int]
    provides: Provides = field(default_factory=Provides)


def build_slack_in(
    service: ScopeService,
    store: LogStore,
    index: IndexPort,
    inbox: Inbox,
    out: SlackOut,
    hooks: SlackPorts,
    endpoint: SlackEndpoint,
    mode: SlackMode,
) -> SlackIn:
    """``inbox``: opened by the root (the durable store of every request before its ack)."""
    counters: dict[str, int] = {}
    runner = CommandRunner(service, store, index, hooks)
    deps = SlackDeps(service, store, index, hooks, runner, counters, client=out.client)
    # Bolt only routes requests the intake stored and acknowledged (it verified them): no verification here.
    bolt = build_slack_app(client=out.client, signing_secret=None, deps=deps)
    intake = SlackIntake(
        inbox=inbox,
        bolt=bolt,
        deps=deps,
        signing_secret=None if mode == "socket" else endpoint.signing_secret,
        response_hosts=response_url_hosts(endpoint.base_url),
    )

    async def prune_inbox() -> None:
        pruned = await inbox.prune()
        if pruned:
            log.info("inbox: forgot %d requests done more than a day ago", pruned)

    provides = Provides(
        routes=[Route("POST", EVENTS_ROUTE, events_handler(intake, socket_mode=mode == "socket"))],
        jobs=[Job("inbox-prune", INBOX_PRUNE_S, prune_inbox)],
        tasks=[prune_inbox],
    )
    return SlackIn(hooks, deps, bolt, inbox, intake, counters, provides)


def response_url_hosts(base_url: str) -> tuple[str, ...]:
    """Where a ``response_url`` may point: Slack's ``hooks.slack.com``, and the Web API's own host (a fake in the
    sandbox and in tests)."""
    api = urlsplit(base_url)
    return ("https://hooks.slack.com", f"{api.scheme}://{api.netloc}".lower())


def channel_pacer(slots: PaceSlots | None, interval: float) -> ChannelPacer:
    """Per-channel pacing: across every replica on a shared database (``slots``), else in this process."""
    return ChannelPacer(interval) if slots is None else SharedChannelPacer(slots, interval)
