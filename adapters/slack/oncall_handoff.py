"""On-call handoffs in Slack: "<@U> is now on call for `primary` (until …)" in the alerts channel, once per handoff.

The handoff's key travels in the message ``metadata`` (event type ``decklog_handoff``) and is looked for in the
channel's recent history first, so a redelivery after a crash posts nothing twice; a 429 raises ``RetryAfter``."""

from __future__ import annotations

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.render.blocks import context, section
from decklog.adapters.slack.sender import PERMANENT_ERRORS, retry_after
from decklog.core.entries.oncall import OncallHandoff
from decklog.core.outbox.sender import PermanentFailure, RetryAfter

EVENT_TYPE = "decklog_handoff"


def handoff_text(h: OncallHandoff) -> str:
    who = f"<@{h.user}>" if h.user else "nobody"
    until = f" until {h.until[:16].replace('T', ' ')} UTC" if h.until else ""
    before = f" (after <@{h.previous}>)" if h.previous else ""
    return f":pager: {who} is now on call for `{h.schedule}`{until}{before}."


class SlackHandoffPoster:
    """``HandoffPoster`` posting to one channel (the alerts channel); no channel: nothing is posted."""

    def __init__(self, client: AsyncWebClient, channel: str) -> None:
        self.client = client
        self.channel = channel

    async def post_handoff(self, handoff: OncallHandoff, key: str) -> None:
        if not self.channel:
            return
        try:
            history = await self.client.conversations_history(channel=self.channel, limit=50, include_all_metadata=True)
            for message in history.get("messages") or []:
                if ((message.get("metadata") or {}).get("event_payload") or {}).get("key") == key:
                    return  # posted before a crash: not again
            text = handoff_text(handoff)
            await self.client.chat_postMessage(
                channel=self.channel,
                text=text,
                blocks=[section(text), context("`/incident oncall` shows every schedule")],
                metadata={"event_type": EVENT_TYPE, "event_payload": {"key": key}},
            )
        except SlackApiError as exc:
            wait = retry_after(exc)
            if wait is not None:
                raise RetryAfter(wait, "Slack rate limit on a handoff post") from exc
            error = str(exc.response.get("error", "")) if exc.response is not None else ""
            if error in PERMANENT_ERRORS:
                raise PermanentFailure(f"Slack says {error}") from exc
            raise
