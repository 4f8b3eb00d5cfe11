"""The Slack sender's small parts: per-channel pacing, counters, and how Slack's answers map to the outbox's."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import render
from core.entries import Entry, Message, Observation
from core.outbox.sender import PermanentFailure, RetryAfter
from core.store.ports import LogStore, PaceSlots

log = logging.getLogger(__name__)

PERMANENT_ERRORS = {
    "channel_not_found",
    "is_archived",
    "invalid_blocks",
    "msg_too_long",
    "no_text",
    "invalid_metadata_format",
    "invalid_metadata_schema",
    "restricted_action",
    "not_authed",
    "invalid_auth",
    "account_inactive",
    "token_revoked",
    "missing_scope",
}


class ChannelPacer:
    """At most one post per ``interval`` seconds per channel; a 429 pushes the channel's next slot back."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._next: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def wait(self, channel: str) -> None:
        lock = self._locks.setdefault(channel, asyncio.Lock())
        async with lock:
            await self._wait_locked(channel)

    async def _wait_locked(self, channel: str) -> None:
        now = time.monotonic()
        slot = self._next.get(channel, 0.0)
        if slot > now:
            await asyncio.sleep(slot - now)
        self._next[channel] = max(time.monotonic(), slot) + self.interval

    def penalize(self, channel: str, seconds: float) -> None:
        self._next[channel] = max(self._next.get(channel, 0.0), time.monotonic() + seconds)


class SharedChannelPacer(ChannelPacer):
    """``ChannelPacer`` across replicas: each post reserves its channel's next slot in the shared database, so
    posts to one channel are spaced by ``interval`` whichever replica sends them. A 429 seen here pushes the slot
    back for every replica. If the database cannot be reached, this replica paces alone (and says so once)."""

    def __init__(self, slots: PaceSlots, interval: float = 1.0) -> None:
        super().__init__(interval)
        self.slots = slots
        self._warned = False

    async def wait(self, channel: str) -> None:
        lock = self._locks.setdefault(channel, asyncio.Lock())
        async with lock:
            floor = max(0.0, self._next.get(channel, 0.0) - time.monotonic())  # a penalty still running here
            try:
                delay = await self.slots.reserve(channel, self.interval, floor)
            except Exception:
                if not self._warned:
                    log.warning("shared Slack pacing is unavailable; pacing %s in this process only", channel)
                    self._warned = True
                await super()._wait_locked(channel)
                return
            if delay > 0:
                await asyncio.sleep(delay)


@dataclass
class SlackStats:
    posts: int = 0
    updates: int = 0
    reconciled: int = 0
    skipped_duplicates: int = 0
    rate_limited: int = 0
    archived: int = 0  # channels archived (conversations.archive, issue 18)


def from_slack(entry: Entry) -> bool:
    """A message that came from Slack: it is already in the thread, the fold leaves the state (hence the header)
    as it was, and no updater acts on a message. The sender skips it without reading anything."""
    return isinstance(entry.payload, Message) and bool(entry.payload.ts)


RECORD_KINDS = frozenset({"goal", "constraint", "decision"})


class HeaderRecords:
    """The typed record the header shows (issue 15): the last goal, the last constraints, the last decision.

    Read from the log once per scope and kept until the sender delivers an entry of one of those kinds (the sender
    sees every entry of a scope, in order): a storm's header refreshes do not read the log three times each."""

    def __init__(self, store: LogStore, *, keep: int = 512) -> None:
        self.store = store
        self.keep = keep
        self._known: dict[str, list[Entry]] = {}

    def saw(self, scope: str, entries: Sequence[Entry]) -> None:
        if any(e.kind in RECORD_KINDS for e in entries):
            self.forget(scope)

    def forget(self, scope: str) -> None:
        """Read it again next time (another replica delivered some of the scope: it may have seen a decision)."""
        self._known.pop(scope, None)

    async def get(self, scope: str) -> list[Entry]:
        known = self._known.get(scope)
        if known is not None:
            return known
        out: list[Entry] = []
        for kind, limit in (("goal", 1), ("constraint", render.CONSTRAINTS_SHOWN), ("decision", 1)):
            out += await self.store.read_last(scope, limit=limit, kinds=[kind])
        self._known[scope] = out
        while len(self._known) > self.keep:
            self._known.pop(next(iter(self._known)))
        return out


def alert_observation(entry: Entry) -> bool:
    """An alert's observation (it has a fingerprint): no reply of its own (``render.entry_reply`` gives none), no
    updater acts on it; the header's counters and the per-minute summary show it."""
    return isinstance(entry.payload, Observation) and bool(entry.payload.fingerprint)


def retry_after(exc: SlackApiError) -> float | None:
    if exc.response is not None and exc.response.status_code == 429:
        raw = exc.response.headers.get("Retry-After") or exc.response.headers.get("retry-after") or "1"
        try:
            return max(0.5, float(raw))
        except ValueError:
            return 1.0
    return None


def raise_for(exc: SlackApiError, channel: str, pacer: ChannelPacer, stats: SlackStats) -> None:
    """A 429 → ``RetryAfter`` (the channel's pacing pushed back); a permanent error → ``PermanentFailure``; else
    return (the caller re-raises: retried with backoff)."""
    wait = retry_after(exc)
    if wait is not None:
        stats.rate_limited += 1
        pacer.penalize(channel, wait)
        raise RetryAfter(wait, f"Slack rate limit on {channel}") from exc
    error = str(exc.response.get("error", "")) if exc.response is not None else ""
    if error in PERMANENT_ERRORS:
        raise PermanentFailure(f"Slack says {error}") from exc


def digest(out: render.Outgoing) -> str:
    return hashlib.sha256(json.dumps([out.text, out.blocks], sort_keys=True).encode()).hexdigest()[:16]


#: Pages of 200 messages ``find_posted`` reads at most before it gives up looking (and the entry is posted).
FIND_PAGES = 25


async def find_posted(
    client: AsyncWebClient,
    channel: str,
    thread_ts: str | None,
    entry_id: str,
    key: str,
    since: float,
    *,
    fail: Callable[[SlackApiError], None],
) -> str | None:
    """The ts of a message an earlier attempt (this process before a restart, or a replica that died) posted for
    ``entry_id``/``key``, looked up by its metadata on every page from two minutes before ``since``: a busy alerts
    channel has more than one page of headers within minutes. ``fail`` turns a Slack error into the sender's."""
    oldest, cursor = f"{max(0.0, since - 120):.6f}", None
    for _page in range(FIND_PAGES):
        try:
            if thread_ts:
                resp = await client.conversations_replies(
                    channel=channel, ts=thread_ts, oldest=oldest, include_all_metadata=True, limit=200, cursor=cursor
                )
            else:
                resp = await client.conversations_history(
                    channel=channel, oldest=oldest, include_all_metadata=True, limit=200, cursor=cursor
                )
        except SlackApiError as exc:
            fail(exc)
            raise
        messages: list[dict[str, Any]] = resp.get("messages", [])
        for msg in messages:
            payload = (msg.get("metadata") or {}).get("event_payload") or {}
            if payload.get("entry_id") == entry_id and payload.get("key", key) == key:
                return str(msg["ts"])
        cursor = (resp.get("response_metadata") or {}).get("next_cursor")
        if not resp.get("has_more") or not cursor:
            return None
    log.warning("looking for %s in %s: more than %d pages since %s; posting it", entry_id, channel, FIND_PAGES, oldest)
    return None
