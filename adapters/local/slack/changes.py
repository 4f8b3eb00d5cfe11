"""Live change feed of the fake workspace, for a web page (the local sandbox) or a test that watches.

Every mutation of the workspace emits one :class:`Change`. Consumers either register a synchronous callback
(``add_listener``) or take an ``asyncio.Queue`` (``subscribe``) that receives every later change; the feed
also keeps the full ``history``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Change", "ChangeFeed"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    """``kind`` is one of: ``message_posted``, ``message_changed``, ``message_replied`` (a parent's reply
    count changed), ``message_deleted``, ``reaction_added``, ``reaction_removed``, ``ephemeral_posted``,
    ``ephemeral_replaced``, ``ephemeral_deleted``, ``view_published``, ``view_opened``, ``view_updated``,
    ``view_pushed``, ``view_closed``, ``channel_created``, ``channel_archived``, ``member_joined``, ``file_uploaded``,
    ``workspace_loaded`` (the whole state was replaced: ``FakeSlackWorkspace.load_dict``).

    ``data`` is the object's wire shape after the change (a message as ``conversations.history`` shows it, a
    view as ``views.*`` returns it, ...).
    """

    kind: str
    channel: str | None = None
    ts: str | None = None
    user: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


class ChangeFeed:
    def __init__(self) -> None:
        self.history: list[Change] = []
        self._listeners: list[Callable[[Change], None]] = []
        self._queues: list[asyncio.Queue[Change]] = []

    def add_listener(self, callback: Callable[[Change], None]) -> None:
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[Change], None]) -> None:
        self._listeners.remove(callback)

    def subscribe(self) -> asyncio.Queue[Change]:
        """A queue that receives every change from now on; pass it to :meth:`unsubscribe` when done."""
        queue: asyncio.Queue[Change] = asyncio.Queue()
        self._queues.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Change]) -> None:
        if queue in self._queues:
            self._queues.remove(queue)

    def emit(self, change: Change) -> None:
        self.history.append(change)
        for queue in list(self._queues):
            queue.put_nowait(change)
        for callback in list(self._listeners):
            try:
                callback(change)
            except Exception:  # a broken watcher must not break the workspace
                _log.exception("fake slack change listener failed on %s", change.kind)
