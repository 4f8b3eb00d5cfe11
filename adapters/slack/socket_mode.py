"""Socket Mode: connect once the server listens; the intake stores each envelope, then acks it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.intake import SlackIntake


async def start_socket_mode(
    bolt: AsyncApp, intake: SlackIntake, *, app_token: str, base_url: str
) -> Callable[[], Awaitable[None]]:
    """Connect Socket Mode; returns what disconnects it."""
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

    handler = AsyncSocketModeHandler(bolt, app_token=app_token, web_client=AsyncWebClient(base_url=base_url))
    # Bolt's own listener would dispatch before acking; the intake stores the envelope, then acks it.
    handler.client.socket_mode_request_listeners[:] = [intake.socket_listener()]
    await handler.connect_async()  # type: ignore[no-untyped-call]
    close: Callable[[], Awaitable[None]] = handler.close_async
    return close
