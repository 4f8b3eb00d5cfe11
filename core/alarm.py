"""Timers as a port: "call this at that time, replacing any earlier timer with the same key".

The dispatcher's retries and the agents' debounce use it. ``AsyncioAlarm`` is the in-process implementation
(tests, CLI); the server plugs in an APScheduler-backed one (bot/scheduler.py). Durable state never lives here:
everything an alarm would do is re-armed from the log at start-up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]
#: How many alarm keys an owner remembers (to cancel them at stop) before it forgets those that already fired.
KEYS_KEPT = 1024


class Alarm(Protocol):
    def set(self, key: str, delay: float, job: Job) -> None:
        """Run ``job`` after ``delay`` seconds; an existing alarm with the same key is replaced."""

    def cancel(self, key: str) -> None: ...

    def pending(self, key: str) -> bool: ...


class AsyncioAlarm:
    """``loop.call_later`` with keys; jobs run as tasks and their errors are logged, never swallowed silently."""

    def __init__(self) -> None:
        self._handles: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def set(self, key: str, delay: float, job: Job) -> None:
        self.cancel(key)
        loop = asyncio.get_running_loop()
        self._handles[key] = loop.call_later(max(0.0, delay), self._fire, key, job)

    def _fire(self, key: str, job: Job) -> None:
        self._handles.pop(key, None)
        task = asyncio.get_running_loop().create_task(self._run(key, job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _run(key: str, job: Job) -> None:
        try:
            await job()
        except Exception:
            log.exception("alarm %s failed", key)

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def pending(self, key: str) -> bool:
        return key in self._handles

    async def shutdown(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
