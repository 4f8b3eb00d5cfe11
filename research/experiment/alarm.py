"""The ``Alarm`` port (core/alarm.py) on a run's virtual clock: a job fires only when the driver fires it.

``set`` arms a job at ``now + delay`` on the run's ``ManualClock``; nothing happens until the driver calls
``fire_due`` once the clock has reached the job's due time (the driver jumps the clock to ``next_due`` when nothing
else is due). There is no wall-clock wait anywhere. Jobs due at the same instant fire in key order, so the order
never depends on which of two concurrent deliveries armed first (core/replay.py's ``VirtualAlarm`` orders them by
arming, which is fine for one scope).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from decklog.core.alarm import Job
from decklog.core.clock import ManualClock


class VirtualAlarm:
    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._jobs: dict[str, tuple[datetime, Job]] = {}

    def set(self, key: str, delay: float, job: Job) -> None:
        self._jobs[key] = (self.clock.now() + timedelta(seconds=max(0.0, delay)), job)

    def cancel(self, key: str) -> None:
        self._jobs.pop(key, None)

    def pending(self, key: str) -> bool:
        return key in self._jobs

    def next_due(self) -> datetime | None:
        return min((at for at, _job in self._jobs.values()), default=None)

    async def fire_due(self) -> bool:
        """Fire the earliest job due by now (ties in key order); False when none is due."""
        now = self.clock.now()
        due = sorted((at, key) for key, (at, _job) in self._jobs.items() if at <= now)
        if not due:
            return False
        _at, job = self._jobs.pop(due[0][1])
        await job()
        return True
