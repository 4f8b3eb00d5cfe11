"""The ``rules`` arm, scheduled by decklog's own ``TurnScheduler`` (core/agents/scheduler.py) on the run's clock.

As in the product: every entry a receiver, a person or a turn commits reaches the dispatcher's ``agents`` outbox
topic, whose ``AgentsSender`` (core/agents/agents_sender.py) hands it to the scheduler; the scheduler arms the
scope's turn at its due time from the log (first turn ``first_delay`` after the declaration, trailing ``debounce``,
capped by ``max_wait``: the product's settings) on a ``VirtualAlarm`` (research/experiment/alarm.py). The turn it runs
is the current agent's ``ScheduledTurns.run_turn`` (research/experiment/turns.py): the product turn, under its
per-scope lock and compare-and-set, then the experiment's hands; a reasoner's ``wake_after`` is the scheduler's
forced wake-up turn.

The driver only moves time: it fires the alarms whose due time the clock has reached, one at a time, each followed
by the quiet point (no turn task, no outbox drain running), and jumps the clock to the next alarm's due time (or
the world's, or the next timeline input) when nothing is due now. A kill, or a new population, is a process that
dies: the driver stops its scheduler at once and boots a new one over the replacement's runtime (after the lease,
when the dead one held a claim: the boot is a due time like the alarms', and the inputs of the meantime arrive on
time and wait in the log), which re-arms every pending turn from the log (``TurnScheduler.arm_pending``, the
product's boot).

Two wall-clock coalescing waits of the sender are off (``interval`` 0, ``linger`` 0), as Slack's pacing is: they
only batch deliveries in real time; the due times come from the entries' own times either way.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from decklog.core.agents.agents_sender import AgentsSender
from decklog.core.agents.scheduler import TurnScheduler
from research.experiment.alarm import VirtualAlarm

if TYPE_CHECKING:
    from research.experiment.run import Run

#: Alarms fired per run at most (a guard: a run settles long before).
MAX_FIRINGS = 400


class RulesDispatch:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.alarm = VirtualAlarm(run.clock)
        self.scheduler: TurnScheduler | None = None
        self.agent = ""  # whose process the scheduler runs
        self.boot_at: datetime | None = None  # when the dead process's replacement starts
        self.fired = 0

    async def boot(self) -> None:
        """A process starts (the first one, a replacement, a new population): the previous one's scheduler stops
        (its pending alarms with it), a new one runs the current agent's runtime and re-arms from the log."""
        run = self.run
        assert run.dispatcher is not None
        if self.scheduler is not None:
            await self.scheduler.stop()
        first_delay, debounce, max_wait = run.delays
        self.scheduler = TurnScheduler(
            run.agents.runtime(),
            self.alarm,
            first_delay=first_delay,
            debounce=debounce,
            max_wait=max_wait,
            clock=run.clock,
        )
        sender = AgentsSender(self.scheduler, interval=0.0)
        sender.linger = 0.0
        run.dispatcher.register(sender)  # replaces the dead process's sender (same topic)
        self.agent = run.agent
        self.boot_at = None
        await self.scheduler.arm_pending()

    async def die(self, after: float) -> None:
        """The process died: its scheduler stops now (its pending alarms with it; what is recorded meanwhile waits in
        the log), and its replacement boots ``after`` seconds later, on the virtual clock."""
        if self.scheduler is not None:
            await self.scheduler.stop()
        self.boot_at = self.run.clock.now() + timedelta(seconds=after)

    def boot_due(self) -> bool:
        """A replacement is due now: the dead process's, or a new population's (``run.agent`` changed)."""
        if self.boot_at is not None:
            return self.boot_at <= self.run.clock.now()
        return self.agent != self.run.agent

    async def quiet(self) -> None:
        """Until no turn task and no outbox drain is running (drains only arm alarms; only ``fire`` starts turns)."""
        assert self.scheduler is not None and self.run.dispatcher is not None
        await self.scheduler.idle()
        await self.run.dispatcher.idle()

    def next_due(self) -> datetime | None:
        """The next alarm's due time, or the replacement's boot."""
        alarm = self.alarm.next_due() if self.fired < MAX_FIRINGS else None
        due = [t for t in (alarm, self.boot_at) if t is not None]
        return min(due) if due else None

    async def fire(self) -> bool:
        """Fire one alarm due by now (the scheduler spawns its turn), then wait for the quiet point."""
        if self.fired >= MAX_FIRINGS or not await self.alarm.fire_due():
            return False
        self.fired += 1
        await self.quiet()
        return True

    async def stop(self) -> None:
        if self.scheduler is not None:
            await self.scheduler.stop()
