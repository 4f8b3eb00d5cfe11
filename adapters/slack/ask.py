"""The ask hook: ``/incident ask <question>`` and ``@decklog ask <question>`` run a prompt turn.

The hook answers the person at once ("looking into it") and works in the background:

1. In the channel case (a slash command, the scope picker, a mention outside the incident's thread) it first
   echoes the question into the incident's thread — a ``message`` entry by the asker, which the Slack sender
   posts — and waits for its ``ts``.
2. It adds :fire: to the message that carries the question while the turn works.
3. It runs the prompt turn (``TurnRuntime.ask``); the ``answer`` entry reaches the thread through the Slack
   sender like every other entry. A failed turn is recorded as a failed ``agent_turn`` (shown briefly).
4. It removes :fire:.

Idempotent by the request key: a Slack retry while the turn runs, or after it was answered, runs no second turn.
The reaction is progress, not record: it is the one thing here that talks to Slack directly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.hooks import Where
from adapters.slack.ids import WORKING_REACTION
from core.agents.runtime import TurnRuntime
from core.entries import Actor, Message, NewEntry
from core.store import LogStore

log = logging.getLogger(__name__)

SLACK_TOPIC = "slack"


class SlackAsk:
    """``server.hooks.ask``: ``await ask(scope, question, actor, where, key) -> str`` (the ephemeral reply)."""

    def __init__(
        self,
        *,
        runtime: TurnRuntime,
        store: LogStore,
        client: AsyncWebClient,
        spawn: Callable[[Awaitable[Any]], Any],
        echo_timeout: float = 15.0,
    ) -> None:
        self.runtime = runtime
        self.store = store
        self.client = client
        self.spawn = spawn
        self.echo_timeout = echo_timeout
        self._inflight: set[str] = set()

    async def __call__(self, scope: str, question: str, actor: Actor, where: Where, key: str) -> str:
        if key in self._inflight:
            return ":fire: Already on it — the answer will appear in the incident's thread."
        if await self.runtime.answered(scope, key):
            return "That question was already answered in the incident's thread."
        self._inflight.add(key)
        self.spawn(self._work(scope, question, actor, where, key))
        return ":fire: Looking into it — the answer will appear in the incident's thread."

    async def _work(self, scope: str, question: str, actor: Actor, where: Where, key: str) -> None:
        try:
            channel, ts = where.channel, where.message_ts
            if not ts or not await self._in_thread(scope, where):
                channel, ts = await self._echo(scope, question, actor, key)
            await self._react(True, channel, ts)
            try:
                result = await self.runtime.ask(scope, question, actor, key=key, question_ts=ts)
                log.info("ask on %s: %s %s", scope, result.status, result.reason)
                shown = result.appended[-1] if result.appended else result.turn_seq  # the answer, or the failure
                if shown and ts:
                    await self._posted(scope, shown)  # done = the answer is in the thread
            finally:
                await self._react(False, channel, ts)
        except Exception:
            log.exception("ask on %s failed", scope)
        finally:
            self._inflight.discard(key)

    async def _in_thread(self, scope: str, where: Where) -> bool:
        """Is the message that carries the question in the incident's own thread (or dedicated channel)?"""
        thread = (await self.store.get_state(scope)).thread
        if thread is None or where.channel != thread.channel:
            return False
        return thread.dedicated_channel or where.thread_ts == thread.ts

    async def _echo(self, scope: str, question: str, actor: Actor, key: str) -> tuple[str, str]:
        """Post the question into the thread (through the log and the Slack sender); the posted message's ts."""
        echo = NewEntry.make("message", actor, Message(text=question))
        result = await self.store.append(scope, [echo], idempotency_key=f"ask:{key}:echo"[:480])
        memo = await self._posted(scope, result.entries[0].seq)
        return (str(memo.get("channel", "")), str(memo["ts"])) if memo else ("", "")

    async def _posted(self, scope: str, seq: int) -> dict[str, Any] | None:
        """The Slack sender's memo of entry ``seq`` once it is posted (None if it is not within the timeout)."""
        deadline = time.monotonic() + self.echo_timeout
        while time.monotonic() < deadline:
            memo = await self.store.memo_get(scope, SLACK_TOPIC, f"post:{seq}")
            if memo and memo.get("ts"):
                return memo
            await asyncio.sleep(0.05)
        log.warning("ask on %s: entry #%d was not posted to Slack within %.0fs", scope, seq, self.echo_timeout)
        return None

    async def _react(self, add: bool, channel: str, ts: str) -> None:
        """:fire: on (``add``) or off the message; Slack saying no (already there, gone) is logged, not raised."""
        if not channel or not ts:
            return
        try:
            if add:
                await self.client.reactions_add(channel=channel, timestamp=ts, name=WORKING_REACTION)
            else:
                await self.client.reactions_remove(channel=channel, timestamp=ts, name=WORKING_REACTION)
        except SlackApiError as exc:
            log.info(
                "ask: :%s: %s on %s/%s: %s",
                WORKING_REACTION,
                "add" if add else "remove",
                channel,
                ts,
                exc.response.get("error"),
            )
