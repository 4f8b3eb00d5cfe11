"""The Slack part, in two halves the root builds apart (the features sit between them):

- ``build_slack_out``: the Web API client and the Slack outbox sender (posts, header updates, uploads). Agents and
  actions need both (progress reactions, message updaters).
- ``build_slack_in``: what Slack sends us: the listeners' ports, Bolt, the durable inbox and the intake that
  stores a request before its ack, and the ``/slack/events`` route. It needs the ports (ask, decide, export,
  compensate) that the features built.

``start_socket_mode`` connects Socket Mode once the server listens (the intake acks each envelope after storing it).

``/slack/events`` takes what Slack sends and no more, before anything else is done with a request: a body encoded
(``Content-Encoding``: Slack never compresses) is refused with 415, a body over ``SLACK_MAX_BODY`` with 413, and
one that has not arrived ``SLACK_BODY_TIMEOUT_S`` after its head with 408 (Slack gives up after 3 s). The intake
then checks the signature on the raw bytes before it parses them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.app import build_slack_app, build_web_client
from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.intake import Rejected, SlackIntake
from decklog.adapters.slack.pacing import ChannelPacer, SharedChannelPacer
from decklog.adapters.slack.ports import SlackPorts
from decklog.adapters.slack.runner import CommandRunner
from decklog.adapters.slack.sender import SlackSender
from decklog.bot.parts import Job, Provides, Route, Stopper
from decklog.bot.runtime import Runtime
from decklog.bot.settings import Settings, SlackMode
from decklog.core.store.ports import Inbox

log = logging.getLogger("decklog")

SANDBOX_ALERTS_CHANNEL = "C0ALERTS"
INBOX_PRUNE_S = 3600.0
#: The largest body ``/slack/events`` reads. Slack's biggest requests (a 40,000-character message edited, with its
#: previous version, or a modal submission) are a few hundred KB.
SLACK_MAX_BODY = 1024 * 1024
SLACK_BODY_TIMEOUT_S = 10.0
READ_CHUNK = 64 * 1024


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


def build_slack_out(rt: Runtime, endpoint: SlackEndpoint, mode: SlackMode, *, http: aiohttp.ClientSession) -> SlackOut:
    client = build_web_client(endpoint.token, endpoint.base_url, session=http)
    alerts_channel = (
        rt.settings.alerts_channel
        or rt.config.slack.alerts_channel
        or (SANDBOX_ALERTS_CHANNEL if mode == "sandbox" else None)
    )
    sender = SlackSender(
        client,
        rt.store,
        rt.index,
        alerts_channel=alerts_channel,
        pacer=channel_pacer(rt, rt.config.slack.pace_per_channel_s),
        channel_prefix=rt.config.slack.dedicated_channel_prefix,
        alarm=rt.alarm,
        header_interval=rt.config.slack.header_update_interval_s,
        fence=rt.dispatcher,
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


async def build_slack_in(
    rt: Runtime, out: SlackOut, hooks: SlackPorts, endpoint: SlackEndpoint, mode: SlackMode
) -> SlackIn:
    counters: dict[str, int] = {}
    runner = CommandRunner(rt.service, rt.store, rt.index, hooks)
    deps = SlackDeps(rt.service, rt.store, rt.index, hooks, runner, counters, client=out.client)
    # Bolt only routes requests the intake stored and acknowledged (it verified them): no verification here.
    bolt = build_slack_app(client=out.client, signing_secret=None, deps=deps)
    inbox = await rt.storage.inbox()
    intake = SlackIntake(
        inbox=inbox,
        bolt=bolt,
        deps=deps,
        signing_secret=None if mode == "socket" else endpoint.signing_secret,
        response_hosts=response_url_hosts(endpoint.base_url),
    )

    async def slack_events(request: web.Request) -> web.StreamResponse:
        if mode == "socket":
            return web.json_response(
                {"error": "this server talks to Slack over Socket Mode; /slack/events is off"}, status=404
            )
        try:
            raw = await read_slack_body(request)
        except Rejected as refused:
            response = web.json_response({"error": refused.reason}, status=refused.status)
            response.force_close()  # the rest of that body is not read, nor the connection kept
            return response
        answer = await intake.http(raw, request.headers)
        if isinstance(answer.body, dict):
            return web.json_response(answer.body, status=answer.status)
        return web.Response(status=answer.status, text=answer.body)

    async def prune_inbox() -> None:
        pruned = await inbox.prune()
        if pruned:
            log.info("inbox: forgot %d requests done more than a day ago", pruned)

    provides = Provides(
        routes=[Route("POST", "/slack/events", slack_events)],
        jobs=[Job("inbox-prune", INBOX_PRUNE_S, prune_inbox)],
        tasks=[prune_inbox],
    )
    return SlackIn(hooks, deps, bolt, inbox, intake, counters, provides)


async def read_slack_body(request: web.Request, *, limit: int | None = None, timeout: float | None = None) -> bytes:
    """The raw body of a request to ``/slack/events``, or ``Rejected`` (415, 413, 408) before reading more of it
    (``limit``: ``SLACK_MAX_BODY``, ``timeout``: ``SLACK_BODY_TIMEOUT_S`` unless given)."""
    limit = SLACK_MAX_BODY if limit is None else limit
    timeout = SLACK_BODY_TIMEOUT_S if timeout is None else timeout
    encodings = [e.strip().lower() for h in request.headers.getall("Content-Encoding", []) for e in h.split(",")]
    encoded = [e for e in encodings if e and e != "identity"]
    if encoded:
        raise Rejected(415, f"Content-Encoding {encoded[0]} is not accepted here: Slack sends its requests unencoded")
    too_big = f"the body is larger than {limit} bytes, more than Slack sends"
    if request.content_length is not None and request.content_length > limit:
        raise Rejected(413, too_big)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.content.iter_chunked(READ_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise Rejected(413, too_big)
                chunks.append(chunk)
    except TimeoutError:
        raise Rejected(408, f"the body did not arrive within {timeout:.0f} s") from None
    return b"".join(chunks)


def response_url_hosts(base_url: str) -> tuple[str, ...]:
    """Where a ``response_url`` may point: Slack's ``hooks.slack.com``, and the Web API's own host (a fake in the
    sandbox and in tests)."""
    api = urlsplit(base_url)
    return ("https://hooks.slack.com", f"{api.scheme}://{api.netloc}".lower())


async def start_socket_mode(slack: SlackIn, settings: Settings, base_url: str) -> Stopper:
    """Connect Socket Mode; returns what disconnects it."""
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

    assert settings.slack_app_token is not None
    handler = AsyncSocketModeHandler(
        slack.bolt, app_token=settings.slack_app_token.get_secret_value(), web_client=AsyncWebClient(base_url=base_url)
    )
    # Bolt's own listener would dispatch before acking; the intake stores the envelope, then acks it.
    handler.client.socket_mode_request_listeners[:] = [slack.intake.socket_listener()]
    await handler.connect_async()  # type: ignore[no-untyped-call]
    close: Stopper = handler.close_async
    return close


def channel_pacer(rt: Runtime, interval: float) -> ChannelPacer:
    """Per-channel pacing: across every replica on a shared database, else in this process."""
    slots = rt.storage.pace_slots()
    return ChannelPacer(interval) if slots is None else SharedChannelPacer(slots, interval)
