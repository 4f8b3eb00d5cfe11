"""The Slack sender: the only code that posts to Slack on behalf of the log (an outbox sender, topic ``slack``).

- ``declared`` → the header message (in a dedicated channel, the invoking channel or the alerts channel), then a
  ``thread_linked`` entry that routes the thread to the scope.
- entries people should see → thread replies carrying the entry id in message ``metadata``.
- every delivery → the header updated in place (``chat.update``) when its rendering changed.
- ``archive_notice`` and ``reminder`` → a post like any other (the due times: core/lifecycle.py). A reminder
  mentions the people it names; the one a resolve leaves when obligations are still open lists them with Done /
  Follow-up buttons (adapters/slack/render/lifecycle.py).
- ``channel_archive`` → ``conversations.archive``, unless the incident was reopened or a person wrote something
  after the notice (then nothing: the next quiet period starts a new notice). ``already_archived`` counts as
  done, so a redelivery after a crash between the call and its memo archives nothing twice. The header memo is
  marked archived: nothing is posted or updated in the channel afterwards (Slack would refuse: ``is_archived``).
- ``report_exported`` (destination ``slack``) → the stashed report uploaded into the thread, once per
  (thread, bytes).

Idempotent across restarts: after posting it records the ``ts`` in the scope's sender memo, and a redelivered
entry with a ``ts`` is skipped. An entry whose post may have happened without its ``ts`` being recorded — the
answer was lost, or the entry was committed before this process started (a previous process may have posted it
and died) — is first looked up by its metadata (``conversations.replies`` / ``history`` with
``include_all_metadata``) and posted only if absent. Nothing is written before a post, so the header of a new
incident costs no extra fsync. Posts are paced per channel (adapters/slack/pacing.py); a 429 raises
``RetryAfter`` (no failure budget spent).

What waits for a channel's next post slot goes in order of what matters (``post_priority``, from the entry and the
incident's stored state, so a restart or another replica orders the same way): a new incident's header by
severity, then posts in the threads of open SEV1/2 incidents, then the rest, then low-value posts. While the
channel is in a burst, low-value posts (alert summaries, link notices, alert notes: ``low_value``) are not posted in
their threads but gathered in the channel's storm digest, one message updated in place (adapters/slack/digest.py).
"""

from __future__ import annotations

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

from decklog.adapters.slack import render
from decklog.adapters.slack.digest import StormDigest
from decklog.adapters.slack.pacing import DEFAULT, HEADER, LOW, NORMAL, URGENT, ChannelPacer, Priority
from decklog.adapters.slack.render.header import pointer
from decklog.adapters.slack.render.lifecycle import lifecycle_reply
from decklog.core.alarm import Alarm
from decklog.core.alerts.rules import SUMMARY_SOURCE
from decklog.core.entries import (
    Actor,
    Entry,
    Message,
    NewEntry,
    Observation,
    ReportExported,
    ScopeLinked,
    ThreadLinked,
)
from decklog.core.entries.lifecycle import ArchiveNotice, ChannelArchive, Reminder
from decklog.core.index.keys import route_key
from decklog.core.outbox.sender import LeaseFence, LeaseLost, PermanentFailure, RetryAfter
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore
from decklog.core.views import CONTEXT_SOURCE

log = logging.getLogger(__name__)

TOPIC = "slack"
EntryUpdater = Callable[[str, Entry, ScopeState], Awaitable[list[tuple[int, render.Outgoing]]]]

# Memo topic where an export stashes a report's bytes, keyed by their sha256, before it appends the
# ``report_exported`` entry (destination "slack") that asks the sender to upload them:
# {"filename", "title", "comment", "content"}.
REPORT_STASH = "report"

LIFECYCLE_PAYLOADS = (ArchiveNotice, ChannelArchive, Reminder)

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
#: conversations.archive errors retrying cannot fix (docs.slack.dev/reference/methods/conversations.archive).
ARCHIVE_PERMANENT = frozenset(
    {
        "cant_archive_general",
        "cant_archive_required",
        "channel_not_found",
        "method_not_supported_for_channel_type",
        "not_in_channel",
        "restricted_action",
        "access_denied",
    }
)
#: Pages of 200 messages ``find_posted`` reads at most before it gives up looking (and the entry is posted).
FIND_PAGES = 25


@dataclass
class SlackStats:
    posts: int = 0
    updates: int = 0
    reconciled: int = 0
    skipped_duplicates: int = 0
    rate_limited: int = 0
    archived: int = 0  # channels archived (conversations.archive)
    coalesced: int = 0  # low-value posts gathered in a storm digest instead of their threads


RECORD_KINDS = frozenset({"goal", "constraint", "decision"})


class HeaderRecords:
    """The typed record the header shows: the last goal, the last constraints, the last decision.

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
        self.records = HeaderRecords(store)
        self.digest = StormDigest(
            client, pacer, paced=lambda channel: self.pacer.wait(channel, Priority(LOW)), fail=self.raise_for
        )
        # Features may ask for earlier messages to be updated in place after an entry is delivered (e.g. a
        # proposal's message once it is decided): each returns [(seq of the earlier entry, its new rendering)].
        # Updaters never see messages that came from Slack (``from_slack``), nor alert observations (the header
        # and the summaries show those).
        self.updaters: list[EntryUpdater] = []

    # -- the sender protocol ----------------------------------------------------------------------------------

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        if scope.startswith(("change/", "oncall/")):
            # change scopes show up as evidence in the incidents they are linked to; an on-call schedule's scope
            # (overrides, handoffs) has no thread: the oncall sender says its handoffs
            return
        entries = [e for e in entries if not from_slack(e)]
        self.records.saw(scope, entries)
        if not entries:
            return  # nothing to post, nothing the header shows (see ``from_slack``), no updater acts on them
        if all(alert_observation(e) for e in entries):  # a storm's batch: one coalesced refresh
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
            if isinstance(entry.payload, LIFECYCLE_PAYLOADS):  # archive notices, archives, reminders
                await self._deliver_lifecycle(scope, entry, state)
                state = None
                continue
            if isinstance(entry.payload, ReportExported):
                if entry.payload.destination == "slack" and not entry.payload.file_id:
                    await self._upload_report(scope, entry, entry.payload, state)
                    state = None
                continue
            out = render.entry_reply(entry, state)
            if out is not None:
                thread_ts = None if thread.dedicated_channel else thread.ts
                key = f"post:{entry.seq}"
                if not (low_value(entry) and await self._coalesced(scope, key, state, out)):
                    priority = post_priority(entry, state)
                    await self.post_once(scope, key, entry, thread.channel, thread_ts, out, priority=priority)
            for updater in self.updaters:
                for seq, updated in await updater(scope, entry, state):
                    await self.update_entry_message(scope, seq, updated)
        await self.refresh_header(scope)

    async def _coalesced(self, scope: str, key: str, state: ScopeState, out: render.Outgoing) -> bool:
        """A low-value post while its channel is in a burst: its line goes into the channel's storm digest instead
        of the thread (True). Once there, a redelivery does nothing (the memo says so)."""
        assert state.thread is not None
        memo = await self.memo_get(scope, key)
        if memo and (memo.get("ts") or memo.get("state") == "coalesced"):
            self.stats.skipped_duplicates += 1
            return True
        channel = state.thread.channel
        if memo or not self.digest.wants(channel):  # a post already under way (``posting``) is looked up, not moved
            return False
        if self.fence is not None and not self.fence.holds(scope, TOPIC):
            raise LeaseLost(f"{scope}: the delivery cursor's lease ran out before its digest line")
        title = state.title or scope
        digest_ts = await self.digest.add(channel, scope, out.text, title=title, link=state.thread.permalink)
        self.stats.coalesced += 1
        await self.memo_put(scope, key, {"state": "coalesced", "channel": channel, "digest": digest_ts})
        return True

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
        first = Priority(HEADER, state.severity or 5, entry.at.timestamp())
        posted = await self.post_once(
            scope, "header", entry, channel, None, out, event_type="decklog_header", priority=first
        )
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
            await self.post_once(scope, "pointer", entry, origin, None, pointer(state, channel), priority=first)

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

    # -- the channel lifecycle and the reminders --------------------------------------------------------------

    async def _deliver_lifecycle(self, scope: str, entry: Entry, state: ScopeState) -> None:
        assert state.thread is not None
        header = await self.memo_get(scope, "header") or {}
        if header.get("archived"):
            log.info("slack: %s #%d not posted: the incident's channel is archived", scope, entry.seq)
            return
        if isinstance(entry.payload, ChannelArchive):
            await self._archive_channel(scope, entry, entry.payload, state)
            return
        out = lifecycle_reply(entry, state)
        if out is not None:
            thread_ts = None if state.thread.dedicated_channel else state.thread.ts
            priority = post_priority(entry, state)
            await self.post_once(
                scope, f"post:{entry.seq}", entry, state.thread.channel, thread_ts, out, priority=priority
            )

    async def _archive_channel(self, scope: str, entry: Entry, p: ChannelArchive, state: ScopeState) -> None:
        key = f"archive:{entry.seq}"
        memo = await self.memo_get(scope, key)
        if memo and memo.get("state") in ("archived", "cancelled"):
            self.stats.skipped_duplicates += 1
            return
        if state.status != "resolved" or state.last_human_seq > p.notice or not _from_the_job(entry, p, state):
            log.info("slack: archive of %s cancelled: activity or a reopen since notice #%d", p.channel, p.notice)
            await self.memo_put(scope, key, {"state": "cancelled"})
            return
        try:
            await self.client.conversations_archive(channel=p.channel)
        except SlackApiError as exc:
            error = str(exc.response.get("error", "")) if exc.response is not None else ""
            if error != "already_archived":
                self.raise_for(exc, p.channel)
                if error in ARCHIVE_PERMANENT:
                    raise PermanentFailure(f"Slack says {error}") from exc
                raise
        self.stats.archived += 1
        await self.memo_put(scope, key, {"state": "archived", "channel": p.channel})
        header = await self.memo_get(scope, "header") or {}
        await self.memo_put(scope, "header", {**header, "archived": True})

    # -- report uploads ---------------------------------------------------------------------------------------

    async def _upload_report(self, scope: str, entry: Entry, p: ReportExported, state: ScopeState) -> None:
        """Upload a stashed report into the thread (files upload v2) unless these bytes are already there.

        Keyed by the report's sha256: a redelivery after an upload whose outcome is unknown first looks for the
        file in the thread (the upload's comment carries the digest). The file id is kept in the sender's memo,
        like the ts of every message it posts: the request's ``report_exported`` entry is the export's one line in
        the timeline (decision 142), and an upload that keeps failing shows as ``delivery_failed``.
        """
        assert state.thread is not None
        key = f"upload:{p.sha256}"
        channel = state.thread.channel
        thread_ts = None if state.thread.dedicated_channel else state.thread.ts
        memo = await self.memo_get(scope, key)
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
        await self.paced(scope, channel, post_priority(entry, state))
        await self.memo_put(scope, key, {"state": "uploading", "at": time.time()})
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
            await self.memo_put(scope, key, {"state": "not_uploaded"})
            self.raise_for(exc, channel)
            raise
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ConnectionError(f"uploading report {p.sha256[:12]}…: outcome unknown") from exc
        self.stats.posts += 1
        file = resp.get("file") or (resp.get("files") or [{}])[0]
        await self._uploaded(scope, entry, p, str(file.get("id", "")))

    async def _uploaded(self, scope: str, entry: Entry, p: ReportExported, file_id: str) -> None:
        await self.memo_put(scope, f"upload:{p.sha256}", {"state": "uploaded", "file_id": file_id, "seq": entry.seq})
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
            self.raise_for(exc, channel)
            raise
        messages: list[dict[str, Any]] = resp.get("messages", [])
        for msg in messages:
            files = msg.get("files") or []
            if files and sha256 in (msg.get("text") or ""):
                return str(files[0].get("id", "")) or None
        return None

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
        priority: Priority = DEFAULT,
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
        await self.paced(scope, channel, priority)
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

    async def paced(self, scope: str, channel: str, priority: Priority = DEFAULT) -> None:
        """Wait for the channel's next post slot (shared by every replica, so possibly many seconds away) in
        ``priority``'s turn, then check that this replica still holds the scope's cursor: a post started after
        another replica took it over would not be found by that replica's look-before-posting, and Slack would show
        it twice (decision 121)."""
        await self.pacer.wait(channel, priority)
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
        """The incident's dedicated channel was archived (``_archive_channel``): Slack refuses posts there."""
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
        """Did an earlier attempt post this entry? (``find_posted``: every page since then)"""
        return await find_posted(
            self.client, channel, thread_ts, entry_id, key, since, fail=lambda exc: self.raise_for(exc, channel)
        )

    def raise_for(self, exc: SlackApiError, channel: str) -> None:
        """A 429 → ``RetryAfter`` (the channel's pacing pushed back); a permanent error → ``PermanentFailure``; else
        return (the caller re-raises: retried with backoff)."""
        wait = retry_after(exc)
        if wait is not None:
            self.stats.rate_limited += 1
            self.pacer.penalize(channel, wait)
            raise RetryAfter(wait, f"Slack rate limit on {channel}") from exc
        error = str(exc.response.get("error", "")) if exc.response is not None else ""
        if error in PERMANENT_ERRORS:
            raise PermanentFailure(f"Slack says {error}") from exc


def from_slack(entry: Entry) -> bool:
    """A message that came from Slack: it is already in the thread, the fold leaves the state (hence the header)
    as it was, and no updater acts on a message. The sender skips it without reading anything."""
    return isinstance(entry.payload, Message) and bool(entry.payload.ts)


#: Observation sources whose posts can wait in a burst: the alerts' own notes (per-minute summaries, one-time notes,
#: refusals) and the context agent's (similar past incidents, recent changes on the services).
LOW_VALUE_SOURCES = frozenset({SUMMARY_SOURCE, CONTEXT_SOURCE})


def low_value(entry: Entry) -> bool:
    """A post that can wait and be gathered with others in a burst: link notices and the notes of
    ``LOW_VALUE_SOURCES``."""
    p = entry.payload
    return isinstance(p, ScopeLinked) or (isinstance(p, Observation) and p.source in LOW_VALUE_SOURCES)


def post_priority(entry: Entry, state: ScopeState) -> Priority:
    """Where a post of ``entry`` goes among those waiting for its channel's slot (adapters/slack/pacing.py),
    from what is stored: a new incident's header first by severity, then what happens in open SEV1/2 incidents,
    then the rest, and low-value posts last; the oldest first within each."""
    severity = state.severity or 5
    at = entry.at.timestamp()
    if entry.kind == "declared":
        return Priority(HEADER, severity, at)
    if low_value(entry):
        return Priority(LOW, severity, at)
    if severity <= 2 and state.status != "resolved":
        return Priority(URGENT, severity, at)
    return Priority(NORMAL, severity, at)


def alert_observation(entry: Entry) -> bool:
    """An alert's observation (it has a fingerprint): no reply of its own (``render.entry_reply`` gives none), no
    updater acts on it; the header's counters and the per-minute summary show it."""
    return isinstance(entry.payload, Observation) and bool(entry.payload.fingerprint)


def _from_the_job(entry: Entry, p: ChannelArchive, state: ScopeState) -> bool:
    """Only the lifecycle job's archive of this incident's own dedicated channel, after its notice, is acted on."""
    thread = state.thread
    own = thread is not None and thread.dedicated_channel and thread.channel == p.channel
    return entry.actor.type == "system" and own and p.notice < entry.seq


def retry_after(exc: SlackApiError) -> float | None:
    if exc.response is not None and exc.response.status_code == 429:
        raw = exc.response.headers.get("Retry-After") or exc.response.headers.get("retry-after") or "1"
        try:
            return max(0.5, float(raw))
        except ValueError:
            return 1.0
    return None


def digest(out: render.Outgoing) -> str:
    return hashlib.sha256(json.dumps([out.text, out.blocks], sort_keys=True).encode()).hexdigest()[:16]


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
