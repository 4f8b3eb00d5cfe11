"""The storm digest: while a channel's posts queue up, low-value posts coalesce into one message per channel.

Slack takes about one post a second per channel. In an alert storm the alerts channel gets a header per new
incident and, in the incidents' threads, their alert summaries, link notices and alert notes: each a post that
takes a slot a new incident's header may be waiting for. So while a channel is in a burst — a post asked for now
would wait ``BURST_S`` or more behind the posts already queued (``ChannelPacer.backlog``), or the channel's digest took
a line within ``OPEN_S`` — such a post is not made in its thread. Its line goes into the channel's digest instead:
one top-level message listing each incident's latest such line, posted once (the least urgent post of the channel)
and then edited with ``chat.update`` (Slack's Tier 3, not the channel's post pacing), at most once per
``UPDATE_EVERY_S``. The lines that arrive while an update is being made go together in the next one, and a delivery
returns only once its line is on Slack: the outbox marks the entry done after that.

The digest's message lives in this process: after a restart, the next burst starts a new one (the log keeps every
entry; a redelivered entry that was already coalesced is skipped by the sender's memo). Each replica keeps its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.pacing import ChannelPacer
from decklog.adapters.slack.render.blocks import context, esc, section

#: A channel is in a burst when a post asked for now would wait this long (seconds) behind the queued ones.
BURST_S = 3.0
#: ... and stays in it while its digest took a line this recently (a storm's later summaries join the same digest).
OPEN_S = 120.0
#: At most one ``chat.update`` of a channel's digest per this many seconds (the lines in between go together).
UPDATE_EVERY_S = 2.0
#: Incidents listed in the message (the most recently updated first); the rest are counted.
LINES_SHOWN = 30
TEXT_MAX = 2900  # a section's text is limited to 3,000 characters


@dataclass
class _Line:
    title: str
    link: str
    text: str
    count: int = 0
    at: float = 0.0


@dataclass
class _Digest:
    ts: str | None = None
    lines: dict[str, _Line] = field(default_factory=dict)  # scope → its latest line
    version: int = 0  # lines added
    shown: int = 0  # the version Slack shows
    opened: float = 0.0  # wall time of the first line
    last_line: float = 0.0  # monotonic
    last_update: float = 0.0  # monotonic
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class StormDigest:
    """``paced(channel)`` waits for the channel's least urgent post slot (and checks the delivery's lease);
    ``fail(exc, channel)`` turns a Slack error into the sender's (a 429 → ``RetryAfter``)."""

    def __init__(
        self,
        client: AsyncWebClient,
        pacer: ChannelPacer,
        *,
        paced: Callable[[str], Awaitable[None]],
        fail: Callable[[SlackApiError, str], None],
    ) -> None:
        self.client = client
        self.pacer = pacer
        self.paced = paced
        self.fail = fail
        self._digests: dict[str, _Digest] = {}
        self.posts = 0
        self.updates = 0
        self.lines = 0

    def wants(self, channel: str) -> bool:
        """Whether a low-value post to ``channel`` goes into its digest now (the channel is in a burst)."""
        digest = self._digests.get(channel)
        if digest is not None and time.monotonic() - digest.last_line < OPEN_S:
            return True
        return self.pacer.backlog(channel) >= BURST_S

    async def add(self, channel: str, scope: str, text: str, *, title: str, link: str) -> str:
        """Put ``scope``'s line into ``channel``'s digest and return once Slack shows it; the digest's ts."""
        digest = self._digests.get(channel)
        if digest is None or time.monotonic() - digest.last_line >= OPEN_S:
            digest = self._digests[channel] = _Digest(opened=time.time())
        previous = digest.lines.pop(scope, None)
        count = (previous.count if previous else 0) + 1
        digest.lines[scope] = _Line(title, link, text, count, time.time())  # last in the dict: shown first
        digest.version += 1
        digest.last_line = time.monotonic()
        self.lines += 1
        mine = digest.version
        async with digest.lock:
            if digest.shown < mine:
                await self._show(channel, digest)
        assert digest.ts is not None
        return digest.ts

    async def _show(self, channel: str, digest: _Digest) -> None:
        if digest.ts is None:
            await self.paced(channel)
        else:
            wait = digest.last_update + UPDATE_EVERY_S - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # the lines added meanwhile go in this update too
        version = digest.version
        text, blocks = render(digest)
        try:
            if digest.ts is None:
                resp = await self.client.chat_postMessage(
                    channel=channel, text=text, blocks=blocks, unfurl_links=False, unfurl_media=False
                )
                digest.ts = str(resp["ts"])
                self.posts += 1
            else:
                await self.client.chat_update(channel=channel, ts=digest.ts, text=text, blocks=blocks)
                self.updates += 1
        except SlackApiError as exc:
            self.fail(exc, channel)
            raise
        digest.shown = version
        digest.last_update = time.monotonic()


def render(digest: _Digest) -> tuple[str, list[dict[str, Any]]]:
    """The digest's text and blocks: one line per incident, the most recently updated first."""
    lines = list(reversed(digest.lines.values()))
    shown, body = 0, []
    size = 0
    for line in lines[:LINES_SHOWN]:
        name = f"<{line.link}|{esc(line.title)}>" if line.link else f"*{esc(line.title)}*"
        repeat = f" _(×{line.count})_" if line.count > 1 else ""
        row = f"• {name}: {line.text}{repeat}"  # the reply as rendered (escaped)
        if size + len(row) + 1 > TEXT_MAX:
            break
        body.append(row)
        size += len(row) + 1
        shown += 1
    since = time.strftime("%H:%M UTC", time.gmtime(digest.opened))
    head = f"Busy channel: updates of {len(lines)} incidents since {since}, gathered here instead of in their threads"
    blocks: list[dict[str, Any]] = [
        context(f":hourglass_flowing_sand: {head} (this message is updated)"),
        section("\n".join(body) or "–"),
    ]
    if len(lines) > shown:
        blocks.append(context(f"… and {len(lines) - shown} more incidents"))
    return head, blocks
