"""Owners of alarm keys (the turn scheduler, the due turns) forget the keys of alarms that fired, so a server that
sees thousands of incidents does not keep a key per incident for ever; pending ones are still cancelled at stop."""

from __future__ import annotations

from decklog.core.agents.scheduler import TurnScheduler
from decklog.core.alarm import KEYS_KEPT, AsyncioAlarm
from tests.conftest import eventually


async def _noop() -> None:
    return None


async def test_fired_keys_are_forgotten_and_pending_ones_kept() -> None:
    alarm = AsyncioAlarm()
    owner = TurnScheduler.__new__(TurnScheduler)  # only its alarm bookkeeping is exercised here
    owner.alarm, owner._keys = alarm, set()
    for k in range(KEYS_KEPT):
        owner._set(f"fired:{k}", 0.0, _noop)
    await eventually(lambda: not any(alarm.pending(f"fired:{k}") for k in range(KEYS_KEPT)), what="all fired")
    owner._set("later", 60.0, _noop)
    assert owner._keys == {"later"}
    await alarm.shutdown()
