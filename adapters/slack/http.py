"""``POST /slack/events`` over HTTP: what Slack sends, read with Slack's limits, then handed to the intake.

The route takes what Slack sends and no more, before anything else is done with a request: a body encoded
(``Content-Encoding``: Slack never compresses) is refused with 415, a body over ``SLACK_MAX_BODY`` with 413, and
one that has not arrived ``SLACK_BODY_TIMEOUT_S`` after its head with 408 (Slack gives up after 3 s). The intake
then checks the signature on the raw bytes before it parses them, stores the request, and only then answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from decklog.adapters.slack.intake import Rejected, SlackIntake

#: The largest body ``/slack/events`` reads. Slack's biggest requests (a 40,000-character message edited, with its
#: previous version, or a modal submission) are a few hundred KB.
SLACK_MAX_BODY = 1024 * 1024
SLACK_BODY_TIMEOUT_S = 10.0
READ_CHUNK = 64 * 1024
EVENTS_ROUTE = "/slack/events"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def events_handler(intake: SlackIntake, *, socket_mode: bool) -> Handler:
    """The handler of ``POST /slack/events``; with Socket Mode, a 404 saying the route is off."""

    async def slack_events(request: web.Request) -> web.StreamResponse:
        if socket_mode:
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

    return slack_events


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
