"""When turns run: debounced per scope, armed by the ``agents`` outbox sender, re-armed from the log at boot.

- The first turn of an incident runs ``first_delay`` after its declaration (the incident settles first); later
  turns run ``debounce`` after the last entry that warrants one. Each warranting entry re-arms the same timer
  (key ``agents:turn:<scope>``), so a burst coalesces into one turn.
- The timer only *spawns* the turn and returns (an APScheduler job that is still running when its next run falls
  due would be dropped); turns of one scope serialise on the runtime's per-scope lock, and each turn covers
  whatever is new when it starts.
- A reasoner may ask for another look later (``wake_after``: a verification grace period, an idle nudge); that
  is a separate timer (``agents:wake:<scope>``) and a forced turn.
- Timers live in memory. At boot every open incident whose log has warranting entries after ``last_turn_seq``
  gets a turn armed (and, for reasoners that use timers, a wake), so pending turns survive a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from core.agents.runtime import WARRANT_KINDS, TurnRuntime
from core.agents.triggers import warranting
from core.alarm import Alarm
from core.clock import Clock, SystemClock, parse_iso
from core.entries import Entry
from core.errors import NotFound
from core.state import ScopeState

log = logging.getLogger(__name__)

TOPIC = "agents"


class TurnScheduler:
    def __init__(
        self,
        runtime: TurnRuntime,
        alarm: Alarm,
        *,
        first_delay: float = 60.0,
        debounce: float = 13.0,
        clock: Clock | None = None,
    ) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self.alarm = alarm
        self.first_delay = first_delay
        self.debounce = debounce
        self.clock: Clock = clock or SystemClock()
        self.armed = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._keys: set[str] = set()
        self._stopped = False
        runtime.on_wake = self.wake

    # -- arming ----------------------------------------------------------------------------------------------

    def delay_for(self, state: ScopeState) -> float:
        """``first_delay`` after the declaration until the first turn, then ``debounce``."""
        if state.last_turn_seq == 0 and state.created_at:
            due = (parse_iso(state.created_at) - self.clock.now()).total_seconds() + self.first_delay
            if due > 0:
                return due
        return self.debounce

    def arm(self, scope: str, delay: float, trigger: str = "debounce") -> None:
        if self._stopped:
            return
        self.armed += 1

        async def job() -> None:
            self._spawn(self.runtime.run_turn(scope, trigger=trigger))

        self._set(f"agents:turn:{scope}", delay, job)

    def wake(self, scope: str, delay: float) -> None:
        if self._stopped:
            return

        async def job() -> None:
            self._spawn(self.runtime.run_turn(scope, trigger="wake", force=True))

        self._set(f"agents:wake:{scope}", max(delay, 0.0), job)

    def _set(self, key: str, delay: float, job: Callable[[], Awaitable[None]]) -> None:
        self._keys.add(key)
        self.alarm.set(key, delay, job)

    async def on_entries(self, scope: str, entries: Sequence[Entry]) -> None:
        """Arm a debounced turn when any of ``entries`` warrants one."""
        if not scope.startswith("incident/") or not warranting(entries):
            return
        try:
            state = await self.store.get_state(scope)
        except NotFound:
            return
        if not state.is_open:
            return
        trigger = "first" if state.last_turn_seq == 0 else "debounce"
        self.arm(scope, self.delay_for(state), trigger)

    async def arm_pending(self) -> int:
        """At boot: arm a turn for every open incident with warranting entries after its last turn."""
        armed = 0
        for sid in await self.store.scope_ids():
            if sid.kind != "incident":
                continue
            scope = str(sid)
            try:
                state = await self.store.get_state(scope)
            except NotFound:
                continue
            if not state.is_open:
                continue
            if state.version > state.last_turn_seq:
                after = await self.store.read(scope, after=state.last_turn_seq, limit=500, kinds=WARRANT_KINDS)
                if warranting(after):
                    self.arm(scope, self.delay_for(state), "boot")
                    armed += 1
                    continue
            if self.runtime.reasoner.wants_wakes:
                self.wake(scope, self.debounce)
        log.info("agents: %d pending turn(s) re-armed from the log", armed)
        return armed

    # -- lifecycle -------------------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        if self._stopped:
            coro.close()
            return
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("agent turn failed", exc_info=t.exception())

        task.add_done_callback(done)

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until no turn task is running (tests and benchmarks)."""
        async with asyncio.timeout(timeout):
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self) -> None:
        """Cancel running turns (an unrecorded turn simply runs again after a restart)."""
        self._stopped = True
        for key in self._keys:
            self.alarm.cancel(key)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class AgentsSender:
    """The outbox sender of topic ``agents``: it only arms timers, so it is fast and idempotent."""

    name = TOPIC
    batch_size = 200

    def __init__(self, scheduler: TurnScheduler) -> None:
        self.scheduler = scheduler

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        await self.scheduler.on_entries(scope, entries)
