"""The APScheduler-backed alarm runs lambdas that return coroutines (a classic way to lose a job silently)."""

from __future__ import annotations

import asyncio

from bot.scheduler import SchedulerAlarm
from tests.conftest import eventually


async def test_alarm_awaits_a_lambda_job_and_replaces_by_key() -> None:
    alarm = SchedulerAlarm()
    alarm.start()
    ran: list[str] = []

    async def job(name: str) -> None:
        ran.append(name)

    try:
        alarm.set("k", 0.2, lambda: job("first"))
        alarm.set("k", 0.01, lambda: job("second"))  # replaces the first
        await eventually(lambda: ran == ["second"])
        assert not alarm.pending("k")
        alarm.set("boom", 0.0, lambda: asyncio.sleep(0, result=1 / 0))  # an error is logged, not raised
        alarm.every("tick", 0.01, lambda: job("tick"))
        await eventually(lambda: ran.count("tick") >= 2)
    finally:
        await alarm.shutdown()
