"""The Slack contact method of on-call pages: a DM (``conversations.open`` + ``chat.postMessage``) with the incident,
a link to its thread, and Acknowledge / Escalate buttons — or Approve / Deny for a proposal parked too long.

The page's idempotency key travels in the message ``metadata`` (event type ``decklog_page``), and before posting
the notifier looks for it in the DM's recent history (``conversations.history`` with ``include_all_metadata``): a
process killed between the post and the outbox's mark leaves the row pending, and its redelivery finds the DM
instead of sending it twice. A 429 raises ``RetryAfter``: the page waits for Slack and is sent once; a permanent
Slack error parks the row.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.render.blocks import button, context, esc, section
from decklog.adapters.slack.sender import PERMANENT_ERRORS, retry_after
from decklog.core.oncall.sender import Notice
from decklog.core.outbox.sender import PermanentFailure, RetryAfter

EVENT_TYPE = "decklog_page"


def page_blocks(notice: Notice) -> list[dict[str, Any]]:
    value = f"{notice.scope}|{notice.escalation}"
    sev = f"SEV{notice.severity} " if notice.severity else ""
    link = f" — <{notice.permalink}|open the thread>" if notice.permalink else ""
    if notice.proposal:
        head = f":rotating_light: *Approval needed* in {sev}*{esc(notice.title)}*: {esc(notice.proposal_preview)}{link}"
        pvalue = f"{notice.scope}|{notice.proposal}"
        buttons = [
            button("Approve", Action.PROPOSAL_APPROVE, pvalue, style="primary"),
            button("Deny", Action.PROPOSAL_DENY, pvalue, style="danger"),
        ]
    else:
        head = f":rotating_light: You are paged for {sev}*{esc(notice.title)}*{link}"
        buttons = [
            button("Acknowledge", Action.ONCALL_ACK, value, style="primary"),
            button("Escalate", Action.ONCALL_ESCALATE, value),
        ]
    level = f"level {notice.level + 1}" + (f", repetition {notice.repetition + 1}" if notice.repetition else "")
    return [
        section(head),
        {"type": "actions", "block_id": f"page:{notice.seq}", "elements": buttons},
        context(f"{esc(notice.scope)} · {level}"),
    ]


class SlackDmNotifier:
    """``Notifier`` for method ``slack``."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self.rate_limited = 0

    async def notify(self, notice: Notice) -> None:
        try:
            opened = await self.client.conversations_open(users=notice.target)
            channel = str((opened.get("channel") or {}).get("id", ""))
            if await self.posted(channel, notice.key):
                return  # a process died after posting it and before its outbox row was marked: not again
            await self.client.chat_postMessage(
                channel=channel,
                text=notice.text[:3000],
                blocks=page_blocks(notice),
                metadata={"event_type": EVENT_TYPE, "event_payload": {"key": notice.key, "scope": notice.scope}},
            )
        except SlackApiError as exc:
            self._raise_for(exc)
            raise

    async def posted(self, channel: str, key: str) -> bool:
        """Whether a DM carrying page ``key`` is among the channel's last messages."""
        history = await self.client.conversations_history(channel=channel, limit=50, include_all_metadata=True)
        for message in history.get("messages") or []:
            payload = (message.get("metadata") or {}).get("event_payload") or {}
            if payload.get("key") == key:
                return True
        return False

    def _raise_for(self, exc: SlackApiError) -> None:
        """A 429 → ``RetryAfter``; a permanent error → ``PermanentFailure``; else return (the caller re-raises)."""
        wait = retry_after(exc)
        if wait is not None:
            self.rate_limited += 1
            raise RetryAfter(wait, "Slack rate limit on a page DM") from exc
        error = str(exc.response.get("error", "")) if exc.response is not None else ""
        if error in PERMANENT_ERRORS or error in ("user_not_found", "cannot_dm_bot"):
            raise PermanentFailure(f"Slack says {error}") from exc
