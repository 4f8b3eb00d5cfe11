"""The Slack sender: the only code that posts to Slack on behalf of the log (an outbox sender, topic ``slack``).

- ``declared`` → the header message (in a dedicated channel, the invoking channel or the alerts channel), then a
  ``thread_linked`` entry that routes the thread to the scope.
- entries people should see → thread replies carrying the entry id in message ``metadata``.
- every delivery → the header updated in place (``chat.update``) when its rendering changed.

Idempotent across restarts: after posting it records the ``ts`` in the scope's sender memo, and a redelivered
entry with a ``ts`` is skipped. An entry whose post may have happened without its ``ts`` being recorded — the
answer was lost, or the entry was committed before this process started (a previous process may have posted it
and died) — is first looked up by its metadata (``conversations.replies`` / ``history`` with
``include_all_metadata``) and posted only if absent. Nothing is written before a post, so the header of a new
incident costs no extra fsync. Posts are paced per channel; a 429 raises ``RetryAfter`` (no failure budget spent).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import render
from core.alarm import Alarm
from core.entries import Actor, Entry, Message, NewEntry, ReportExported, ThreadLinked
from core.index import Index, route_key
from core.outbox import PermanentFailure, RetryAfter
from core.state import ScopeState
from core.store import LogStore

log = logging.getLogger(__name__)

TOPIC = "slack"
EntryUpdater = Callable[[str, Entry, ScopeState], Awaitable[list[tuple[int, render.Outgoing]]]]
# Memo topic where an export stashes a report's bytes, keyed by their sha256, before it appends the
# ``report_exported`` entry (destination "slack") that asks this sender to upload them:
# {"filename", "title", "comment", "content"}.
REPORT_STASH = "report"
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
            now = time.monotonic()
            slot = self._next.get(channel, 0.0)
            if slot > now:
                await asyncio.sleep(slot - now)
            self._next[channel] = max(time.monotonic(), slot) + self.interval

    def penalize(self, channel: str, seconds: float) -> None:
        self._next[channel] = max(self._next.get(channel, 0.0), time.monotonic() + seconds)


@dataclass
class SlackStats:
    posts: int = 0
    updates: int = 0
    reconciled: int = 0
    skipped_duplicates: int = 0
    rate_limited: int = 0


def _from_slack(entry: Entry) -> bool:
    """A message that came from Slack: it is already in the thread, the fold leaves the state (hence the header)
    as it was, and no updater acts on a message. The sender skips it without reading anything."""
    return isinstance(entry.payload, Message) and bool(entry.payload.ts)


def _retry_after(exc: SlackApiError) -> float | None:
    if exc.response is not None and exc.response.status_code == 429:
        raw = exc.response.headers.get("Retry-After") or exc.response.headers.get("retry-after") or "1"
        try:
            return max(0.5, float(raw))
        except ValueError:
            return 1.0
    return None


class SlackSender:
    name = TOPIC
    batch_size = 25

    def __init__(
        self,
        client: AsyncWebClient,
        store: LogStore,
        index: Index,
        *,
        alerts_channel: str | None,
        pacer: ChannelPacer,
        channel_prefix: str = "inc-",
        alarm: Alarm | None = None,
        header_interval: float = 2.0,
    ) -> None:
        self.client = client
        self.store = store
        self.index = index
        self.alerts_channel = alerts_channel
        self.pacer = pacer
        self.channel_prefix = channel_prefix
        self.stats = SlackStats()
        self._channel_ids: dict[str, str] = {}
        self.alarm = alarm
        self.header_interval = header_interval
        # Entries committed before this process started may have been posted by a previous one that died before
        # it could say so; those, and posts whose answer was lost in this process, are looked up before posting.
        self.started_at = time.time()
        self._uncertain: set[tuple[str, str]] = set()
        self._suspect: dict[str, float] = {}  # scope → when a dead replica's cursor was taken over (core/outbox.py)
        self._memos: dict[str, dict[str, dict[str, Any]]] = {}
        self._last_header: dict[str, float] = {}
        # Features may ask for earlier messages to be updated in place after an entry is delivered (e.g. a
        # proposal's message once it is decided): each returns [(seq of the earlier entry, its new rendering)].
        # Updaters never see messages that came from Slack (``_from_slack``).
        self.updaters: list[EntryUpdater] = []

    # -- the sender protocol ----------------------------------------------------------------------------------

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        if scope.startswith("change/"):
            return  # change scopes show up as evidence in the incidents they are linked to
        entries = [e for e in entries if not _from_slack(e)]
        if not entries:
            return  # nothing to post, nothing the header shows (see ``_from_slack``), no updater acts on them
        for entry in entries:
            state = await self.store.get_state(scope)
            if entry.kind == "declared":
                await self._open_thread(scope, entry, state)
                continue
            if state.thread is None:
                continue  # no Slack home (no channel configured): the log still has everything
            if isinstance(entry.payload, ReportExported):
                if entry.payload.destination == "slack" and not entry.payload.file_id:
                    await self._upload_report(scope, entry, entry.payload, state)
                continue
            out = render.entry_reply(entry, state)
            if out is not None:
                thread_ts = None if state.thread.dedicated_channel else state.thread.ts
                await self._post_once(scope, f"post:{entry.seq}", entry, state.thread.channel, thread_ts, out)
            for updater in self.updaters:
                for seq, updated in await updater(scope, entry, state):
                    await self.update_entry_message(scope, seq, updated)
        await self.refresh_header(scope)

    async def update_entry_message(self, scope: str, seq: int, out: render.Outgoing) -> bool:
        """chat.update the message an earlier entry was posted as (memo ``post:<seq>``), when its rendering changed.

        False when that entry was never posted (nothing to update). Idempotent: the memo keeps the digest.
        """
        key = f"post:{seq}"
        memo = await self._memo_get(scope, key)
        if not memo or not memo.get("ts"):
            return False
        digest = _digest(out)
        if memo.get("digest") == digest:
            return True
        try:
            await self.client.chat_update(
                channel=memo["channel"], ts=memo["ts"], text=out.text[:3000], blocks=out.blocks
            )
        except SlackApiError as exc:
            self._raise_for(exc, memo["channel"])
            raise
        self.stats.updates += 1
        await self._memo_put(scope, key, {**memo, "digest": digest})
        return True

    async def refresh_header(self, scope: str) -> None:
        """chat.update the header when its rendering changed since the last update (idempotent).

        At most one update per ``header_interval`` per scope: during an alert storm the header shows the repeat
        counter moving without an update per alert; a deferred refresh (an alarm) renders the final state.
        """
        if self.alarm is not None:
            wait = self._last_header.get(scope, 0.0) + self.header_interval - time.monotonic()
            if wait > 0:
                self.alarm.set(f"header:{scope}", wait, lambda: self._deferred_refresh(scope))
                return
        state = await self.store.get_state(scope)
        memo = await self._memo_get(scope, "header")
        if not memo or not memo.get("ts"):
            return
        out = render.header(state, await self._header_record(scope))
        digest = _digest(out)
        if memo.get("digest") == digest:
            return
        try:
            await self.client.chat_update(channel=memo["channel"], ts=memo["ts"], text=out.text, blocks=out.blocks)
        except SlackApiError as exc:
            self._raise_for(exc, memo["channel"])
        self.stats.updates += 1
        self._last_header[scope] = time.monotonic()
        await self._memo_put(scope, "header", {**memo, "digest": digest})

    async def _header_record(self, scope: str) -> list[Entry]:
        """The typed record the header shows (issue 15): the last goal, the last constraints, the last decision."""
        out: list[Entry] = []
        for kind, limit in (("goal", 1), ("constraint", render.CONSTRAINTS_SHOWN), ("decision", 1)):
            out += await self.store.read_last(scope, limit=limit, kinds=[kind])
        return out

    async def _deferred_refresh(self, scope: str) -> None:
        try:
            await self.refresh_header(scope)
        except RetryAfter as exc:
            if self.alarm is not None:
                self.alarm.set(f"header:{scope}", exc.seconds, lambda: self._deferred_refresh(scope))

    # -- the header and its thread ----------------------------------------------------------------------------

    async def _open_thread(self, scope: str, entry: Entry, state: ScopeState) -> None:
        memo = await self._memo_get(scope, "header")
        if memo and memo.get("ts"):
            await self._link_thread(scope, memo)
            return
        declared = entry.payload
        dedicated = bool(getattr(declared, "dedicated_channel", False))
        origin = getattr(declared, "channel", "") or ""
        channel = None
        if dedicated:
            channel = await self._dedicated_channel(scope, state, entry.actor)
        if channel is None:
            channel = origin if origin[:1] in ("C", "G") else await self._alerts_channel_id()
        if channel is None:
            log.warning("slack: %s has no channel (set DECKLOG_ALERTS_CHANNEL); it stays in the log only", scope)
            await self._memo_put(scope, "header", {"state": "no_channel"})
            return
        out = render.header(state, await self._header_record(scope))
        posted = await self._post_once(scope, "header", entry, channel, None, out, event_type="decklog_header")
        permalink = ""
        try:
            link = await self.client.chat_getPermalink(channel=channel, message_ts=posted["ts"])
            permalink = str(link.get("permalink") or "")
        except SlackApiError:
            pass
        header_memo = {**posted, "permalink": permalink, "dedicated": dedicated, "digest": _digest(out)}
        await self._memo_put(scope, "header", header_memo)
        await self._link_thread(scope, header_memo)
        if dedicated and origin[:1] in ("C", "G") and origin != channel:
            pointer = render.Outgoing(
                f"{state.title}: <#{channel}>",
                [render._section(f":rotating_light: *{render.esc(state.title)}* is being handled in <#{channel}>")],
            )
            await self._post_once(scope, "pointer", entry, origin, None, pointer)

    async def _link_thread(self, scope: str, memo: dict[str, Any]) -> None:
        dedicated = bool(memo.get("dedicated"))
        await self.index.add_route(route_key(memo["channel"], memo["ts"]), scope)
        if dedicated:
            await self.index.add_route(route_key(memo["channel"]), scope)
        link = NewEntry.make(
            "thread_linked",
            Actor.system("slack"),
            ThreadLinked(
                channel=memo["channel"],
                ts=memo["ts"],
                permalink=memo.get("permalink", ""),
                dedicated_channel=dedicated,
            ),
        )
        await self.store.append(scope, [link], idempotency_key=f"slack:thread:{scope}")

    async def _dedicated_channel(self, scope: str, state: ScopeState, declarer: Actor) -> str | None:
        known = await self._memo_get(scope, "channel")
        if known and known.get("id"):
            return str(known["id"])
        base = (self.channel_prefix + scope.split("/", 1)[1]).lower()[:70]
        for n in range(1, 20):
            name = base if n == 1 else f"{base[:66]}-{n}"
            try:
                resp = await self.client.conversations_create(name=name)
            except SlackApiError as exc:
                if exc.response.get("error") == "name_taken":
                    continue
                log.warning("slack: could not create a channel for %s: %s", scope, exc.response.get("error"))
                return None
            channel_id = str(resp["channel"]["id"])
            await self._memo_put(scope, "channel", {"id": channel_id, "name": name})
            if declarer.type == "human" and declarer.id[:1] in ("U", "W"):
                try:
                    await self.client.conversations_invite(channel=channel_id, users=declarer.id)
                except SlackApiError as exc:
                    log.info("slack: inviting %s to %s: %s", declarer.id, channel_id, exc.response.get("error"))
            return channel_id
        return None

    async def _alerts_channel_id(self) -> str | None:
        ref = (self.alerts_channel or "").strip()
        if not ref:
            return None
        if ref[:1] in ("C", "G") and ref.upper() == ref and not ref.startswith("#"):
            return ref
        name = ref.lstrip("#")
        if name in self._channel_ids:
            return self._channel_ids[name]
        cursor = None
        while True:
            resp = await self.client.conversations_list(limit=200, cursor=cursor, exclude_archived=True)
            channels: list[dict[str, Any]] = resp.get("channels", [])
            for ch in channels:
                if ch.get("name") == name:
                    self._channel_ids[name] = str(ch["id"])
                    return self._channel_ids[name]
            cursor = (resp.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                raise PermanentFailure(f"DECKLOG_ALERTS_CHANNEL: no channel named #{name} visible to the bot")

    # -- report uploads, once per (thread, bytes) -------------------------------------------------------------

    async def _upload_report(self, scope: str, entry: Entry, p: ReportExported, state: ScopeState) -> None:
        """Upload a stashed report into the thread (files upload v2) unless these bytes are already there.

        Keyed by the report's sha256: a redelivery after an upload whose outcome is unknown first looks for the
        file in the thread (the upload's comment carries the digest). The file id is recorded in a second
        ``report_exported`` entry (system actor, ``file_id`` set) that refers to the request.
        """
        assert state.thread is not None
        key = f"upload:{p.sha256}"
        channel = state.thread.channel
        thread_ts = None if state.thread.dedicated_channel else state.thread.ts
        memo = await self._memo_get(scope, key)
        if memo and memo.get("file_id"):
            self.stats.skipped_duplicates += 1
            return
        if memo and memo.get("state") == "uploading":
            found = await self._find_upload(channel, thread_ts, p.sha256, float(memo.get("at", 0)))
            if found:
                self.stats.reconciled += 1
                await self._uploaded(scope, entry, p, found)
                return
        stash = await self.store.memo_get(scope, REPORT_STASH, p.sha256) or {}
        content = stash.get("content")
        if not isinstance(content, str) or hashlib.sha256(content.encode("utf-8")).hexdigest() != p.sha256:
            raise PermanentFailure(f"the bytes of report sha256 {p.sha256[:12]}… are not available to upload")
        await self.pacer.wait(channel)
        await self._memo_put(scope, key, {"state": "uploading", "at": time.time()})
        try:
            resp = await self.client.files_upload_v2(
                channel=channel,
                thread_ts=thread_ts,
                content=content,
                filename=str(stash.get("filename") or f"report.{p.format}"),
                title=str(stash.get("title") or "Post-incident report"),
                initial_comment=str(stash.get("comment") or f"Post-incident report — sha256 {p.sha256}"),
            )
        except SlackApiError as exc:
            await self._memo_put(scope, key, {"state": "not_uploaded"})
            self._raise_for(exc, channel)
            raise
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ConnectionError(f"uploading report {p.sha256[:12]}…: outcome unknown") from exc
        self.stats.posts += 1
        file = resp.get("file") or (resp.get("files") or [{}])[0]
        await self._uploaded(scope, entry, p, str(file.get("id", "")))

    async def _uploaded(self, scope: str, entry: Entry, p: ReportExported, file_id: str) -> None:
        await self._memo_put(scope, f"upload:{p.sha256}", {"state": "uploaded", "file_id": file_id})
        receipt = NewEntry.make(
            "report_exported",
            Actor.system("slack"),
            ReportExported(format=p.format, sha256=p.sha256, bytes=p.bytes, destination="slack", file_id=file_id),
            refs=(entry.seq,),
            idempotency_key=f"slack:upload:{p.sha256}",
        )
        await self.store.append(scope, [receipt])
        await self.store.memo_put(scope, REPORT_STASH, p.sha256, {"uploaded": file_id})  # drop the bytes

    async def _find_upload(self, channel: str, thread_ts: str | None, sha256: str, since: float) -> str | None:
        """The id of a file an earlier attempt shared: a message with files whose text carries the digest."""
        oldest = f"{max(0.0, since - 120):.6f}"
        try:
            if thread_ts:
                resp = await self.client.conversations_replies(channel=channel, ts=thread_ts, oldest=oldest, limit=200)
            else:
                resp = await self.client.conversations_history(channel=channel, oldest=oldest, limit=200)
        except SlackApiError as exc:
            self._raise_for(exc, channel)
            raise
        messages: list[dict[str, Any]] = resp.get("messages", [])
        for msg in messages:
            files = msg.get("files") or []
            if files and sha256 in (msg.get("text") or ""):
                return str(files[0].get("id", "")) or None
        return None

    # -- posting exactly once ---------------------------------------------------------------------------------

    async def _post_once(
        self,
        scope: str,
        key: str,
        entry: Entry,
        channel: str,
        thread_ts: str | None,
        out: render.Outgoing,
        *,
        event_type: str = "decklog_entry",
    ) -> dict[str, Any]:
        memo = await self._memo_get(scope, key)
        if memo and memo.get("ts"):
            self.stats.skipped_duplicates += 1
            return memo
        if self._maybe_posted(scope, key, entry) or (memo or {}).get("state") == "posting":  # (another replica's)
            where = (memo or {}).get("channel", channel)
            since = float((memo or {}).get("at") or entry.at.timestamp())
            found = await self._find_posted(where, thread_ts, entry.id, key, since)
            if found:
                self.stats.reconciled += 1
                done = {"state": "posted", "channel": where, "ts": found}
                await self._memo_put(scope, key, done)
                self._uncertain.discard((scope, key))
                return done
        await self.pacer.wait(channel)
        metadata = {
            "event_type": event_type,
            "event_payload": {"scope": scope, "seq": entry.seq, "entry_id": entry.id, "key": key},
        }
        attempted_at = time.time()
        try:
            resp = await self.client.chat_postMessage(
                channel=channel,
                thread_ts=thread_ts,
                text=out.text[:3000],
                blocks=out.blocks,
                metadata=metadata,
                unfurl_links=False,
                unfurl_media=False,
            )
        except SlackApiError as exc:
            self._raise_for(exc, channel)  # Slack answered: nothing was posted
            raise
        except (TimeoutError, aiohttp.ClientError) as exc:
            # The post may or may not have happened: remember to look before trying again.
            self._uncertain.add((scope, key))
            await self._memo_put(scope, key, {"state": "posting", "channel": channel, "at": attempted_at})
            raise ConnectionError(
                f"posting #{entry.seq} to {channel}: outcome unknown ({exc.__class__.__name__})"
            ) from exc
        self.stats.posts += 1
        done = {"state": "posted", "channel": channel, "ts": str(resp["ts"])}
        await self._memo_put(scope, key, done)
        await self.index.add_route(route_key(channel, done["ts"]), scope)
        return done

    async def _memo_get(self, scope: str, key: str) -> dict[str, Any] | None:
        """The sender's memos of a scope, loaded once and kept (write-through): this process is their only writer."""
        memos = self._memos.get(scope)
        if memos is None:
            memos = await self.store.memo_all(scope, TOPIC)
            self._memos[scope] = memos
            while len(self._memos) > 512:
                self._memos.pop(next(iter(self._memos)))
        value = memos.get(key)
        return dict(value) if value is not None else None

    async def _memo_put(self, scope: str, key: str, value: dict[str, Any]) -> None:
        await self.store.memo_put(scope, TOPIC, key, value)
        memos = self._memos.get(scope)
        if memos is not None:
            memos[key] = dict(value)

    def handed_over(self, scope: str, *, died: bool) -> None:
        """Another replica drained ``scope`` last: its memos are reloaded; if it died holding the cursor, what was
        committed before now may have been posted by it and is looked up first (as after a restart)."""
        self._memos.pop(scope, None)
        if died:
            self._suspect[scope] = time.time()

    def _maybe_posted(self, scope: str, key: str, entry: Entry) -> bool:
        since = max(self.started_at, self._suspect.get(scope, 0.0))
        return (scope, key) in self._uncertain or entry.at.timestamp() < since

    async def _find_posted(
        self, channel: str, thread_ts: str | None, entry_id: str, key: str, since: float
    ) -> str | None:
        """Did an earlier attempt post this entry? Look for our metadata near the time it was tried."""
        oldest = f"{max(0.0, since - 120):.6f}"
        try:
            if thread_ts:
                resp = await self.client.conversations_replies(
                    channel=channel, ts=thread_ts, oldest=oldest, include_all_metadata=True, limit=200
                )
            else:
                resp = await self.client.conversations_history(
                    channel=channel, oldest=oldest, include_all_metadata=True, limit=200
                )
        except SlackApiError as exc:
            self._raise_for(exc, channel)
            raise
        messages: list[dict[str, Any]] = resp.get("messages", [])
        for msg in messages:
            payload = (msg.get("metadata") or {}).get("event_payload") or {}
            if payload.get("entry_id") == entry_id and payload.get("key", key) == key:
                return str(msg["ts"])
        return None

    def _raise_for(self, exc: SlackApiError, channel: str) -> None:
        wait = _retry_after(exc)
        if wait is not None:
            self.stats.rate_limited += 1
            self.pacer.penalize(channel, wait)
            raise RetryAfter(wait, f"Slack rate limit on {channel}") from exc
        error = str(exc.response.get("error", "")) if exc.response is not None else ""
        if error in PERMANENT_ERRORS:
            raise PermanentFailure(f"Slack says {error}") from exc


def _digest(out: render.Outgoing) -> str:
    return hashlib.sha256(json.dumps([out.text, out.blocks], sort_keys=True).encode()).hexdigest()[:16]
