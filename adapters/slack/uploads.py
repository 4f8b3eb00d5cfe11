"""Report uploads into the thread, once per (thread, bytes): the Slack sender's ``report_exported`` deliveries."""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

import aiohttp
from slack_sdk.errors import SlackApiError

from core.entries import Entry, ReportExported
from core.outbox.sender import PermanentFailure
from core.state import ScopeState

if TYPE_CHECKING:
    from adapters.slack.sender import SlackSender

# Memo topic where an export stashes a report's bytes, keyed by their sha256, before it appends the
# ``report_exported`` entry (destination "slack") that asks the sender to upload them:
# {"filename", "title", "comment", "content"}.
REPORT_STASH = "report"


async def upload_report(sender: SlackSender, scope: str, entry: Entry, p: ReportExported, state: ScopeState) -> None:
    """Upload a stashed report into the thread (files upload v2) unless these bytes are already there.

    Keyed by the report's sha256: a redelivery after an upload whose outcome is unknown first looks for the
    file in the thread (the upload's comment carries the digest). The file id is kept in the sender's memo, like
    the ts of every message it posts: the request's ``report_exported`` entry is the export's one line in the
    timeline (decision 142), and an upload that keeps failing shows as ``delivery_failed``.
    """
    assert state.thread is not None
    key = f"upload:{p.sha256}"
    channel = state.thread.channel
    thread_ts = None if state.thread.dedicated_channel else state.thread.ts
    memo = await sender.memo_get(scope, key)
    if memo and memo.get("file_id"):
        sender.stats.skipped_duplicates += 1
        return
    if memo and memo.get("state") == "uploading":
        found = await _find_upload(sender, channel, thread_ts, p.sha256, float(memo.get("at", 0)))
        if found:
            sender.stats.reconciled += 1
            await _uploaded(sender, scope, entry, p, found)
            return
    stash = await sender.store.memo_get(scope, REPORT_STASH, p.sha256) or {}
    content = stash.get("content")
    if not isinstance(content, str) or hashlib.sha256(content.encode("utf-8")).hexdigest() != p.sha256:
        raise PermanentFailure(f"the bytes of report sha256 {p.sha256[:12]}… are not available to upload")
    await sender.paced(scope, channel)
    await sender.memo_put(scope, key, {"state": "uploading", "at": time.time()})
    try:
        resp = await sender.client.files_upload_v2(
            channel=channel,
            thread_ts=thread_ts,
            content=content,
            filename=str(stash.get("filename") or f"report.{p.format}"),
            title=str(stash.get("title") or "Post-incident report"),
            initial_comment=str(stash.get("comment") or f"Post-incident report — sha256 {p.sha256}"),
        )
    except SlackApiError as exc:
        await sender.memo_put(scope, key, {"state": "not_uploaded"})
        sender.raise_for(exc, channel)
        raise
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise ConnectionError(f"uploading report {p.sha256[:12]}…: outcome unknown") from exc
    sender.stats.posts += 1
    file = resp.get("file") or (resp.get("files") or [{}])[0]
    await _uploaded(sender, scope, entry, p, str(file.get("id", "")))


async def _uploaded(sender: SlackSender, scope: str, entry: Entry, p: ReportExported, file_id: str) -> None:
    await sender.memo_put(scope, f"upload:{p.sha256}", {"state": "uploaded", "file_id": file_id, "seq": entry.seq})
    await sender.store.memo_put(scope, REPORT_STASH, p.sha256, {"uploaded": file_id})  # drop the bytes


async def _find_upload(
    sender: SlackSender, channel: str, thread_ts: str | None, sha256: str, since: float
) -> str | None:
    """The id of a file an earlier attempt shared: a message with files whose text carries the digest."""
    oldest = f"{max(0.0, since - 120):.6f}"
    try:
        if thread_ts:
            resp = await sender.client.conversations_replies(channel=channel, ts=thread_ts, oldest=oldest, limit=200)
        else:
            resp = await sender.client.conversations_history(channel=channel, oldest=oldest, limit=200)
    except SlackApiError as exc:
        sender.raise_for(exc, channel)
        raise
    messages: list[dict[str, Any]] = resp.get("messages", [])
    for msg in messages:
        files = msg.get("files") or []
        if files and sha256 in (msg.get("text") or ""):
            return str(files[0].get("id", "")) or None
    return None
