"""The baseline for bench/slack_ack.py: a bare Bolt app on aiohttp that verifies signatures and only acks.

python bench/_bare_bolt.py API_URL SIGNING_SECRET BOT_TOKEN   (prints its URL, serves until killed)
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient


async def main(api_url: str, secret: str, token: str) -> None:
    bolt = AsyncApp(client=AsyncWebClient(token=token, base_url=api_url), signing_secret=secret)

    @bolt.command("/incident")
    async def on_command(ack: Any) -> None:
        await ack()

    @bolt.event("message")
    async def on_message() -> None:
        return None

    async def events(request: web.Request) -> web.StreamResponse:
        return await to_aiohttp_response(await bolt.async_dispatch(await to_bolt_request(request)))

    app = web.Application()
    app.router.add_post("/slack/events", events)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"bare bolt on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
