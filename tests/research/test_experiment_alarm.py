"""The experiment's ``Alarm`` on the run's virtual clock: nothing fires until the driver fires it at its due time."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from decklog.core.alarm import Job
from decklog.core.clock import ManualClock
from research.experiment.alarm import VirtualAlarm


def test_a_job_fires_only_once_the_clock_reached_its_due_time_and_only_when_fired() -> None:
    async def go() -> list[str]:
        clock = ManualClock()
        alarm = VirtualAlarm(clock)
        fired: list[str] = []

        async def job() -> None:
            fired.append("a")

        alarm.set("a", 13.0, job)
        assert alarm.pending("a") and alarm.next_due() == clock.now() + timedelta(seconds=13)
        assert not await alarm.fire_due() and fired == []
        clock.advance(seconds=12.9)
        assert not await alarm.fire_due()
        clock.advance(seconds=0.1)
        await asyncio.sleep(0)
        assert fired == []  # reaching the time is not firing: the driver fires
        assert await alarm.fire_due()
        assert not alarm.pending("a") and alarm.next_due() is None
        return fired

    assert asyncio.run(go()) == ["a"]


def test_set_replaces_cancel_removes_and_ties_fire_in_key_order() -> None:
    async def go() -> list[str]:
        clock = ManualClock()
        alarm = VirtualAlarm(clock)
        fired: list[str] = []

        def job(name: str) -> Job:
            async def run() -> None:
                fired.append(name)

            return run

        alarm.set("b", 5.0, job("b"))
        alarm.set("a", 5.0, job("a"))  # armed later, same due time: still first (key order)
        alarm.set("c", 1.0, job("c-old"))
        alarm.set("c", 5.0, job("c"))  # replaces the earlier one
        alarm.set("d", 0.0, job("d"))
        alarm.cancel("d")
        alarm.set("e", -3.0, job("e"))  # a past due time is now
        clock.advance(seconds=5)
        while await alarm.fire_due():
            pass
        return fired

    assert asyncio.run(go()) == ["e", "a", "b", "c"]
