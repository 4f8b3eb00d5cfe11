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

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import render, sender_support
from adapters.slack.lifecycle import LIFECYCLE_PAYLOADS, deliver_lifecycle
from adapters.slack.sender_support import ChannelPacer, SlackStats, digest, from_slack, raise_for
from adapters.slack.uploads import REPORT_STASH, upload_report
from core.alarm import Alarm
from core.entries import Actor, Entry, NewEntry, ReportExported, ThreadLinked
from core.index.keys import route_key
from core.outbox.sender import LeaseFence, LeaseLost, PermanentFailure, RetryAfter
from core.state import ScopeState
from core.store.ports import IndexPort, LogStore

log = logging.getLogger(__name__)

TOPIC = "slack"
EntryUpdater = Callable[[str, Entry, ScopeState], Awaitable[list[tuple[int, render.Outgoing]]]]
__all__ = ["REPORT_STASH", "TOPIC", "ChannelPacer", "EntryUpdater", "SlackSender", "SlackStats"]


class SlackSender:
    name = TOPIC
    batch_size = 25

    def __init__(
        self,
        client: AsyncWebClient,
        store: LogStore,
        index: IndexPort,
        *,
        alerts_channel: str | None,
        pacer: ChannelPacer,
        channel_prefix: str = "inc-",
        alarm: Alarm | None = None,
        header_interval: float = 2.0,
        fence: LeaseFence | None = None,
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
        self.fence = fence  # the dispatcher's cursor leases (several replicas): checked right before a post
        # Entries committed before this process started may have been posted by a previous one that died before
        # it could say so; those, and posts whose answer was lost in this process, are looked up before posting.
        self.started_at = time.time()
        self._uncertain: set[tuple[str, str]] = set()
        self._suspect: dict[str, float] = {}  # scope → when a dead replica's cursor was taken over (core/outbox/)
        self._memos: dict[str, dict[str, dict[str, Any]]] = {}
        self._last_header: dict[str, float] = {}
        self.records = sender_support.HeaderRecords(store)
        # Features may ask for earlier messages to be updated in place after an entry is delivered (e.g. a
        # proposal's message once it is decided): each returns [(seq of the earlier entry, its new rendering)].
        # Updaters never see messages that came from Slack (``from_slack``), nor alert observations (the header
        # and the summaries show those).
        self.updaters: list[EntryUpdater] = []

    # -- the sender protocol ----------------------------------------------------------------------------------

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        if scope.startswith("change/"):
            return  # change scopes show up as evidence in the incidents they are linked to
        entries = [e for e in entries if not from_slack(e)]
        self.records.saw(scope, entries)
        if not entries:
            return  # nothing to post, nothing the header shows (see ``from_slack``), no updater acts on them
        if all(sender_support.alert_observation(e) for e in entries):  # a storm's batch: one coalesced refresh
            await self.refresh_header(scope)
            return
        state: ScopeState | None = None  # read once per batch (it holds all of it), again after what appends
        for entry in entries:
            if state is None:
                state = await self.store.get_state(scope)
            if entry.kind == "declared":
                await self._open_thread(scope, entry, state)
                state = None
                continue
            thread = state.thread
            if thread is None or await self._archived(scope):
                continue  # no Slack home (no channel configured, or it was archived): the log still has everything
            if isinstance(entry.payload, LIFECYCLE_PAYLOADS):  # issue 18: archive notices, archives, reminders
                await deliver_lifecycle(self, scope, entry, state)
                state = None
                continue
            if isinstance(entry.payload, ReportExported):
                if entry.payload.destination == "slack" and not entry.payload.file_id:
                    await upload_report(self, scope, entry, entry.payload, state)
                    state = None
                continue
            out = render.entry_reply(entry, state)
            if out is not None:
                thread_ts = None if thread.dedicated_channel else thread.ts
                await self.post_once(scope, f"post:{entry.seq}", entry, thread.channel, thread_ts, out)
            for updater in self.updaters:
                for seq, updated in await updater(scope, entry, state):
                    await self.update_entry_message(scope, seq, updated)
        await self.refresh_header(scope)

    async def update_entry_message(self, scope: str, seq: int, out: render.Outgoing) -> bool:
        """chat.update the message an earlier entry was posted as (memo ``post:<seq>``), when its rendering changed.

        False when that entry was never posted (nothing to update). Idempotent: the memo keeps the digest.
        """
        key = f"post:{seq}"
        memo = await self.memo_get(scope, key)
        if not memo or not memo.get("ts"):
            return False
        shown = digest(out)
        if memo.get("digest") == shown:
            return True
        try:
            await self.client.chat_update(
                channel=memo["channel"], ts=memo["ts"], text=out.text[:3000], blocks=out.blocks
            )
        except SlackApiError as exc:
            self.raise_for(exc, memo["channel"])
            raise
        self.stats.updates += 1
        await self.memo_put(scope, key, {**memo, "digest": shown})
        return True

    async def refresh_header(self, scope: str) -> None:
        """chat.update the header when its rendering changed since the last update (idempotent).

        At most one update per ``header_interval`` per scope: during an alert storm the header shows the repeat
        counter moving without an update per alert; a deferred refresh (an alarm) renders the final state.
        """
        if self.alarm is not None:
            wait = self._last_header.get(scope, 0.0) + self.header_interval - time.monotonic()
            if wait > 0:
                key = f"header:{scope}"
                if not self.alarm.pending(key):  # one deferred refresh renders whatever is stored when it runs
                    self.alarm.set(key, wait, lambda: self._deferred_refresh(scope))
                return
        state = await self.store.get_state(scope)
        memo = await self.memo_get(scope, "header")
        if not memo or not memo.get("ts") or memo.get("archived"):
            return
        out = render.header(state, await self.records.get(scope))
        shown = digest(out)
        if memo.get("digest") == shown:
            return
        try:
            await self.client.chat_update(channel=memo["channel"], ts=memo["ts"], text=out.text, blocks=out.blocks)
        except SlackApiError as exc:
            self.raise_for(exc, memo["channel"])
        self.stats.updates += 1
        self._last_header[scope] = time.monotonic()
        await self.memo_put(scope, "header", {**memo, "digest": shown})

    async def _deferred_refresh(self, scope: str) -> None:
        try:
            await self.refresh_header(scope)
        except RetryAfter as exc:
            if self.alarm is not None:
                self.alarm.set(f"header:{scope}", exc.seconds, lambda: self._deferred_refresh(scope))

    # -- the header and its thread ----------------------------------------------------------------------------

    async def _open_thread(self, scope: str, entry: Entry, state: ScopeState) -> None:
        memo = await self.memo_get(scope, "header")
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
            await self.memo_put(scope, "header", {"state": "no_channel"})
            return
        out = render.header(state, await self.records.get(scope))
        posted = await self.post_once(scope, "header", entry, channel, None, out, event_type="decklog_header")
        permalink = ""
        try:
            link = await self.client.chat_getPermalink(channel=channel, message_ts=posted["ts"])
            permalink = str(link.get("permalink") or "")
        except SlackApiError:
            pass
        header_memo = {**posted, "permalink": permalink, "dedicated": dedicated, "digest": digest(out)}
        await self.memo_put(scope, "header", header_memo)
        await self._link_thread(scope, header_memo)
        if dedicated and origin[:1] in ("C", "G") and origin != channel:
            pointer = render.Outgoing(
                f"{render.esc(state.title)}: <#{channel}>",
                [render._section(f":rotating_light: *{render.esc(state.title)}* is being handled in <#{channel}>")],
            )
            await self.post_once(scope, "pointer", entry, origin, None, pointer)

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
        known = await self.memo_get(scope, "channel")
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
            await self.memo_put(scope, "channel", {"id": channel_id, "name": name})
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

    # -- posting exactly once ---------------------------------------------------------------------------------

    async def post_once(
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
        memo = await self.memo_get(scope, key)
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
                await self.memo_put(scope, key, done)
                self._uncertain.discard((scope, key))
                return done
        await self.paced(scope, channel)
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
            self.raise_for(exc, channel)  # Slack answered: nothing was posted
            raise
        except (TimeoutError, aiohttp.ClientError) as exc:
            # The post may or may not have happened: remember to look before trying again.
            self._uncertain.add((scope, key))
            await self.memo_put(scope, key, {"state": "posting", "channel": channel, "at": attempted_at})
            raise ConnectionError(
                f"posting #{entry.seq} to {channel}: outcome unknown ({exc.__class__.__name__})"
            ) from exc
        self.stats.posts += 1
        done = {"state": "posted", "channel": channel, "ts": str(resp["ts"])}
        await self.memo_put(scope, key, done)
        await self.index.add_route(route_key(channel, done["ts"]), scope)
        return done

    async def paced(self, scope: str, channel: str) -> None:
        """Wait for the channel's next post slot (shared by every replica, so possibly many seconds away), then
        check that this replica still holds the scope's cursor: a post started after another replica took it over
        would not be found by that replica's look-before-posting, and Slack would show it twice (decision 121)."""
        await self.pacer.wait(channel)
        if self.fence is not None and not self.fence.holds(scope, TOPIC):
            raise LeaseLost(f"{scope}: the delivery cursor's lease ran out while waiting to post to {channel}")

    async def memo_get(self, scope: str, key: str) -> dict[str, Any] | None:
        """The sender's memos of a scope, loaded once and kept (write-through): this process is their only writer."""
        memos = self._memos.get(scope)
        if memos is None:
            memos = await self.store.memo_all(scope, TOPIC)
            self._memos[scope] = memos
            while len(self._memos) > 512:
                self._memos.pop(next(iter(self._memos)))
        value = memos.get(key)
        return dict(value) if value is not None else None

    async def memo_put(self, scope: str, key: str, value: dict[str, Any]) -> None:
        await self.store.memo_put(scope, TOPIC, key, value)
        memos = self._memos.get(scope)
        if memos is not None:
            memos[key] = dict(value)

    async def _archived(self, scope: str) -> bool:
        """The incident's dedicated channel was archived (adapters/slack/lifecycle.py): Slack refuses posts there."""
        return bool((await self.memo_get(scope, "header") or {}).get("archived"))

    def handed_over(self, scope: str, *, died: bool) -> None:
        """Another replica drained ``scope`` last: its memos are reloaded; if it died holding the cursor, what was
        committed before now may have been posted by it and is looked up first (as after a restart)."""
        self._memos.pop(scope, None)
        self.records.forget(scope)  # the header's goal/constraint/decision record may have changed there
        if died:
            self._suspect[scope] = time.time()

    def _maybe_posted(self, scope: str, key: str, entry: Entry) -> bool:
        since = max(self.started_at, self._suspect.get(scope, 0.0))
        return (scope, key) in self._uncertain or entry.at.timestamp() < since

    async def _find_posted(
        self, channel: str, thread_ts: str | None, entry_id: str, key: str, since: float
    ) -> str | None:
        """Did an earlier attempt post this entry? (sender_support.find_posted: every page since then)"""
        return await sender_support.find_posted(
            self.client, channel, thread_ts, entry_id, key, since, fail=lambda exc: self.raise_for(exc, channel)
        )

    def raise_for(self, exc: SlackApiError, channel: str) -> None:
        raise_for(exc, channel, self.pacer, self.stats)
