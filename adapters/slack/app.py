"""Builds the Bolt app and the Web API client decklog uses (no module-level app: the composition root calls these)."""

from __future__ import annotations

import logging
import os

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.listeners import register_all


def build_web_client(
    token: str, base_url: str, *, timeout: int = 15, session: aiohttp.ClientSession | None = None
) -> AsyncWebClient:
    """The real client, pointed at ``base_url``. No automatic retries: the default connection-error retry would
    re-send a ``chat.postMessage`` whose response was lost (a duplicate post); the sender reconciles instead,
    and handles 429 itself. With ``session`` (see ``build_http_session``) calls reuse keep-alive connections;
    without one, slack_sdk opens a session — and a TCP connection — per call."""
    return AsyncWebClient(token=token, base_url=base_url, timeout=timeout, retry_handlers=[], session=session)


def build_http_session() -> aiohttp.ClientSession:
    """The Web API client's connection pool. Idle connections are dropped after 15 s on our side, well before
    a server would close them, so a call never lands on a connection the server already hung up."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32, keepalive_timeout=15))


def build_slack_app(*, client: AsyncWebClient, signing_secret: str | None, deps: SlackDeps) -> AsyncApp:
    logger = logging.getLogger("decklog.slack.bolt")
    quiet = _EnvironmentTokenNotice(client.token)
    logger.addFilter(quiet)
    try:
        app = AsyncApp(
            client=client,
            signing_secret=signing_secret or "",
            request_verification_enabled=signing_secret is not None,
            process_before_response=True,  # the intake acked already; the listener runs on, then dispatch returns
            ignoring_self_events_enabled=True,
            raise_error_for_unhandled_request=False,
            logger=logger,
        )
    finally:
        logger.removeFilter(quiet)
    register_all(app, deps)
    return app


class _EnvironmentTokenNotice(logging.Filter):
    """Drops Bolt's "As you gave `client` as well, `token` will be unused." while the app is built.

    ``AsyncApp`` falls back to ``SLACK_BOT_TOKEN`` from the environment when given no ``token`` — even when given
    a ``client`` — and then warns that this token is unused. In HTTP and Socket Mode that variable is set and is
    the very token the client carries, so the warning only ever reports our own configuration back to us. Passing
    ``token=None`` cannot prevent the fallback; only this exact message, and only when the environment's token is
    the client's, is dropped."""

    def __init__(self, client_token: str | None) -> None:
        super().__init__()
        self.client_token = client_token

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != warning_client_prioritized_and_token_skipped():
            return True
        return os.environ.get("SLACK_BOT_TOKEN") != self.client_token
