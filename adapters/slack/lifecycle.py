"""The Slack side of the channel lifecycle and the reminders (issue 18; the due times: core/lifecycle.py).

Delivered by the Slack sender, through the outbox, exactly once:

- ``archive_notice`` and ``reminder`` → a post (in the dedicated channel, or the incident's thread), the way every
  entry is posted: once, looked up by its metadata when a previous attempt's outcome is unknown. A reminder
  mentions the people it names (the commander, the follow-ups' owners); the one a resolve leaves when obligations
  are still open lists them with Done / Follow-up buttons (adapters/slack/render/obligations.py).
- ``channel_archive`` → ``conversations.archive``, unless the incident was reopened or a person wrote something
  after the notice (then nothing: the next quiet period starts a new notice). ``already_archived`` counts as
  done, so a redelivery after a crash between the call and its memo archives nothing twice. The header memo is
  marked archived: nothing is posted or updated in the channel afterwards (Slack would refuse: ``is_archived``).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from slack_sdk.errors import SlackApiError

from adapters.slack import render
from adapters.slack.render.obligations import left_open_notice
from core.entries import Entry
from core.entries.lifecycle import ArchiveNotice, ChannelArchive, Reminder
from core.outbox.sender import PermanentFailure
from core.state import ScopeState

if TYPE_CHECKING:
    from adapters.slack.sender import SlackSender

log = logging.getLogger(__name__)

LIFECYCLE_PAYLOADS = (ArchiveNotice, ChannelArchive, Reminder)
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
_USER_ID = re.compile(r"^[UW][A-Z0-9]+$")


def mention(user: str) -> str:
    return f"<@{user}>" if _USER_ID.match(user) else f"@{render.esc(user)}"


def lifecycle_reply(entry: Entry, state: ScopeState | None = None) -> render.Outgoing | None:
    p = entry.payload
    if isinstance(p, ArchiveNotice):
        return render.Outgoing(render.esc(p.text), [render.section(f":file_cabinet: {render.esc(p.text)}")])
    if isinstance(p, Reminder) and p.purpose == "obligations" and state is not None:  # what a resolve left open
        return left_open_notice(p, state)
    if isinstance(p, Reminder):
        who = " ".join(mention(u) for u in p.users)
        icon = ":alarm_clock:" if p.purpose == "status_update" else ":memo:"
        line = f"{icon} {who + ' ' if who else ''}{render.esc(p.text)}"
        return render.Outgoing(f"{who + ' ' if who else ''}{render.esc(p.text)}", [render.section(line)])
    return None


async def deliver_lifecycle(sender: SlackSender, scope: str, entry: Entry, state: ScopeState) -> None:
    assert state.thread is not None
    header = await sender.memo_get(scope, "header") or {}
    if header.get("archived"):
        log.info("slack: %s #%d not posted: the incident's channel is archived", scope, entry.seq)
        return
    if isinstance(entry.payload, ChannelArchive):
        await archive_channel(sender, scope, entry, entry.payload, state)
        return
    out = lifecycle_reply(entry, state)
    if out is not None:
        thread_ts = None if state.thread.dedicated_channel else state.thread.ts
        await sender.post_once(scope, f"post:{entry.seq}", entry, state.thread.channel, thread_ts, out)


def _from_the_job(entry: Entry, p: ChannelArchive, state: ScopeState) -> bool:
    """Only the lifecycle job's archive of this incident's own dedicated channel, after its notice, is acted on."""
    thread = state.thread
    own = thread is not None and thread.dedicated_channel and thread.channel == p.channel
    return entry.actor.type == "system" and own and p.notice < entry.seq


async def archive_channel(sender: SlackSender, scope: str, entry: Entry, p: ChannelArchive, state: ScopeState) -> None:
    key = f"archive:{entry.seq}"
    memo = await sender.memo_get(scope, key)
    if memo and memo.get("state") in ("archived", "cancelled"):
        sender.stats.skipped_duplicates += 1
        return
    if state.status != "resolved" or state.last_human_seq > p.notice or not _from_the_job(entry, p, state):
        log.info("slack: archive of %s cancelled: activity or a reopen since notice #%d", p.channel, p.notice)
        await sender.memo_put(scope, key, {"state": "cancelled"})
        return
    try:
        await sender.client.conversations_archive(channel=p.channel)
    except SlackApiError as exc:
        error = str(exc.response.get("error", "")) if exc.response is not None else ""
        if error != "already_archived":
            sender.raise_for(exc, p.channel)
            if error in ARCHIVE_PERMANENT:
                raise PermanentFailure(f"Slack says {error}") from exc
            raise
    sender.stats.archived += 1
    await sender.memo_put(scope, key, {"state": "archived", "channel": p.channel})
    header = await sender.memo_get(scope, "header") or {}
    await sender.memo_put(scope, "header", {**header, "archived": True})
