"""Trigger ids: what a click, a slash command or a submission hands the app so that it may open a modal.

As on Slack a trigger id is good for one ``views.open`` / ``views.push`` within 3 seconds: later it is
``expired_trigger_id``, a second use is ``exchanged_trigger_id``, a made-up one ``invalid_trigger_id``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import SlackError

__all__ = ["TriggerBook"]


@dataclass
class _Trigger:
    user: str
    issued_at: float
    used: bool = False


class TriggerBook:
    def __init__(self, *, ttl: float = 3.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._monotonic = monotonic
        self._triggers: dict[str, _Trigger] = {}
        self._count = 0

    def issue(self, user: str) -> str:
        self._count += 1
        trigger_id = f"{1000000000 + self._count}.{secrets.randbelow(10**9)}.{secrets.token_hex(16)}"
        self._triggers[trigger_id] = _Trigger(user=user, issued_at=self._monotonic())
        return trigger_id

    def consume(self, trigger_id: str) -> str:
        """The user the trigger belongs to; raises Slack's error when it cannot be used (now or again)."""
        trigger = self._triggers.get(trigger_id)
        if trigger is None:
            raise SlackError("invalid_trigger_id")
        if trigger.used:
            raise SlackError("exchanged_trigger_id")
        if self._monotonic() - trigger.issued_at > self.ttl:
            raise SlackError("expired_trigger_id")
        trigger.used = True
        return trigger.user
