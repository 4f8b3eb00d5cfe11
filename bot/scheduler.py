"""The in-memory APScheduler behind decklog's alarms: retries, debounced agent turns, periodic sweeps.

Jobs live in memory only (a persistent job store would skip jobs that fell due while the process was down and add
a second SQLite writer); everything durable is in the log and is re-armed from it at start-up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from decklog.core.alarm import Job

log = logging.getLogger(__name__)


class SchedulerAlarm:
    """``core.alarm.Alarm`` on APScheduler 3: one ``date`` job per key, ``replace_existing=True``."""

    def __init__(self) -> None:
        self.scheduler = AsyncIOScheduler(timezone=UTC, job_defaults={"misfire_grace_time": None, "coalesce": True})

    def start(self) -> None:
        self.scheduler.start()

    def set(self, key: str, delay: float, job: Job) -> None:
        run_date = datetime.now(UTC) + timedelta(seconds=max(0.0, delay))
        self.scheduler.add_job(
            _awaiting(job), "date", run_date=run_date, id=key, replace_existing=True, max_instances=1
        )

    def cancel(self, key: str) -> None:
        if self.scheduler.get_job(key) is not None:
            self.scheduler.remove_job(key)

    def pending(self, key: str) -> bool:
        return self.scheduler.get_job(key) is not None

    def every(self, key: str, seconds: float, job: Job) -> None:
        self.scheduler.add_job(
            _awaiting(job), "interval", seconds=seconds, id=key, replace_existing=True, max_instances=1
        )

    async def shutdown(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)


def _awaiting(job: Job) -> Callable[[], Coroutine[Any, Any, None]]:
    """APScheduler awaits only coroutine *functions*; a lambda returning a coroutine would run in a thread pool
    and its coroutine would never be awaited. Every job is wrapped in a coroutine function, and its errors are
    logged with the job's name instead of vanishing."""

    async def run() -> None:
        try:
            await job()
        except asyncio.CancelledError:  # the process is stopping: not an error worth a traceback
            log.debug("scheduled job %r cancelled", getattr(job, "__qualname__", job))
        except Exception:
            log.exception("scheduled job %r failed", getattr(job, "__qualname__", job))

    return run
