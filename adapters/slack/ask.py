"""The ask hook: ``/incident ask <question>`` and ``@decklog ask <question>`` store the question; the log answers.

The hook only records, in one transaction, a ``question`` entry (idempotency key ``ask:<request key>:q``) and —
in the channel case (a slash command, the scope picker, a mention outside the incident's thread) — a ``message``
entry by the asker that echoes the question into the incident's thread (the Slack sender posts it). Then it
answers the person ("looking into it").

Everything after that is derived from the log, so a crash at any moment neither loses the question nor answers
it twice: the ``agents`` outbox sender (or, for a question still unanswered, the boot re-arm) runs the prompt
turn (``TurnRuntime.answer``), which appends the ``answer`` under the request key, once. :fire: on the message
carrying the question is shown by ``SlackProgress`` while the turn works and removed when the Slack sender
delivers the answer (or the failed turn), and at boot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from decklog.adapters.slack.ports import Where
from decklog.core.agents.runtime import TurnRuntime
from decklog.core.entries import Actor, Message, NewEntry, Question
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore

log = logging.getLogger(__name__)


def question_key(key: str) -> str:
    return f"ask:{key}:q"[:480]


class SlackAsk:
    """The ``ask`` port (``adapters.slack.ports.Ask``): ``await ask(scope=…, question=…, actor=…, where=…, key=…)``
    returns the ephemeral reply."""

    def __init__(self, *, runtime: TurnRuntime, store: LogStore) -> None:
        self.runtime = runtime
        self.store = store

    async def __call__(self, *, scope: str, question: str, actor: Actor, where: Where, key: str) -> str:
        if await self.runtime.answered(scope, key):
            return "That question was already answered in the incident's thread."
        entries: list[NewEntry] = []
        if where.message_ts and await self._in_thread(scope, where):
            payload = Question(text=question, key=key, channel=where.channel, message_ts=where.message_ts)
            entries.append(NewEntry.make("question", actor, payload))
        else:
            echo = NewEntry.make("message", actor, Message(text=question))
            entries.append(echo)
            entries.append(NewEntry.make("question", actor, Question(text=question, key=key)))
        result = await self.store.append(scope, self._refer(entries), idempotency_key=question_key(key))
        if result.duplicate:
            return ":fire: Already on it — the answer will appear in the incident's thread."
        return ":fire: Looking into it — the answer will appear in the incident's thread."

    @staticmethod
    def _refer(entries: list[NewEntry]) -> list[NewEntry] | Callable[[ScopeState], list[NewEntry]]:
        """A decide callable: the question refers to its echo (the seq the echo gets in this append)."""
        if len(entries) == 1:
            return entries

        def decide(state: ScopeState) -> list[NewEntry]:
            echo, q = entries
            return [echo, q.model_copy(update={"refs": (state.version + 1,)})]

        return decide

    async def _in_thread(self, scope: str, where: Where) -> bool:
        """Is the message that carries the question in the incident's own thread (or dedicated channel)?"""
        thread = (await self.store.get_state(scope)).thread
        if thread is None or where.channel != thread.channel:
            return False
        return thread.dedicated_channel or where.thread_ts == thread.ts
