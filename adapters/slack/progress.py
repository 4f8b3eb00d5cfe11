""":fire: while an agent works (``TurnProgress``): on the incident header during a scheduled turn longer than a
second, on the question's message during an ask.

The reaction is the one Slack effect allowed outside the outbox (DESIGN §5), so it is made crash-proof by a
durable note: before adding :fire: the note ``on`` is stored in the scope's memos (topic ``progress``); the
reaction is removed when the turn ends (the header) or when the Slack sender delivers the answer or the failed ask
turn (``on_delivered``, a sender updater), and at boot (``recover``) for every note a dead process left ``on``.
Removing twice is harmless (Slack's ``no_reaction`` is ignored, and a note already ``off`` skips the call).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack import render
from decklog.adapters.slack.ids import WORKING_REACTION
from decklog.core.entries import AgentTurn, Answer, Entry, Question
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore

log = logging.getLogger(__name__)

TOPIC = "progress"
SLACK_TOPIC = "slack"
HEADER = "header"


class SlackProgress:
    def __init__(self, *, client: AsyncWebClient, store: LogStore, echo_timeout: float = 15.0) -> None:
        self.client = client
        self.store = store
        self.echo_timeout = echo_timeout

    # -- TurnProgress ----------------------------------------------------------------------------------------

    async def working(self, scope: str, *, question_seq: int = 0) -> str:
        if question_seq:
            key = f"ask:{question_seq}"
            channel, ts = await self._question_message(scope, question_seq)
        else:
            key = HEADER
            memo = await self.store.memo_get(scope, SLACK_TOPIC, "header") or {}
            channel, ts = str(memo.get("channel", "")), str(memo.get("ts", ""))
        if not channel or not ts:
            return ""
        await self.store.memo_put(scope, TOPIC, key, {"on": True, "channel": channel, "ts": ts, "at": time.time()})
        await self._react(True, channel, ts)
        return ts if question_seq else ""

    async def done(self, scope: str) -> None:
        await self._off(scope, HEADER)

    async def recover(self, scope: str) -> None:
        for key, note in (await self.store.memo_all(scope, TOPIC)).items():
            if note.get("on"):
                await self._off(scope, key)

    # -- the Slack sender's updater: the answer (or the failed ask) is in the thread -------------------------

    async def on_delivered(self, scope: str, entry: Entry, state: ScopeState) -> list[tuple[int, render.Outgoing]]:
        p = entry.payload
        if isinstance(p, Answer) or (isinstance(p, AgentTurn) and p.trigger == "ask"):
            for seq in entry.refs:
                await self._off(scope, f"ask:{seq}")
        return []

    # -- internals -------------------------------------------------------------------------------------------

    async def _off(self, scope: str, key: str) -> None:
        note = await self.store.memo_get(scope, TOPIC, key)
        if not note or not note.get("on"):
            return
        await self._react(False, str(note.get("channel", "")), str(note.get("ts", "")))
        await self.store.memo_put(scope, TOPIC, key, {**note, "on": False})

    async def _question_message(self, scope: str, seq: int) -> tuple[str, str]:
        """The message carrying question #seq: its own, or the echo the Slack sender posts (waited for)."""
        found = await self.store.read_seqs(scope, [seq])
        if not found or not isinstance(found[0].payload, Question):
            return "", ""
        q = found[0].payload
        if q.message_ts:
            return q.channel, q.message_ts
        if not found[0].refs:
            return "", ""
        echo = found[0].refs[0]
        deadline = time.monotonic() + self.echo_timeout
        while time.monotonic() < deadline:
            memo = await self.store.memo_get(scope, SLACK_TOPIC, f"post:{echo}")
            if memo and memo.get("ts"):
                return str(memo.get("channel", "")), str(memo["ts"])
            await asyncio.sleep(0.05)
        log.warning("ask on %s: the echo #%d was not posted to Slack within %.0fs", scope, echo, self.echo_timeout)
        return "", ""

    async def _react(self, add: bool, channel: str, ts: str) -> None:
        """:fire: on (``add``) or off; Slack saying no (already there, gone) is logged, not raised."""
        if not channel or not ts:
            return
        call: Any = self.client.reactions_add if add else self.client.reactions_remove
        try:
            await call(channel=channel, timestamp=ts, name=WORKING_REACTION)
        except SlackApiError as exc:
            log.info(
                ":%s: %s on %s/%s: %s",
                WORKING_REACTION,
                "add" if add else "remove",
                channel,
                ts,
                exc.response.get("error"),
            )
