"""The agents of a run: decklog's ``TurnRuntime`` (core/agents/runtime.py), one per agent or worker, with the
scripted policy as its reasoner, the run's action desk as its ``Proposer`` and catalog, and the run's view budget.

A new agent (a replacement after a kill, a worker that joins, a new population) is a new runtime: a fresh process
with an empty view cache. ``kill_after_append`` dies between the turn's append and the hand-off of its proposals
to the desk (the runtime's step after the record, "before the outbox").

The ``rules`` arm's runtimes are ``ScheduledTurns``: decklog's ``TurnScheduler`` (research/experiment/scheduled.py)
calls their ``run_turn`` with its own trigger and ``force``; each is the product turn followed by the hands, as
``Run.step`` does for the other arms (the way bot/agents.py's ``TimedTurns`` wraps the same call for a histogram).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from decklog.core.agents.ports import ActionCatalogView
from decklog.core.agents.runtime import TurnRuntime
from decklog.core.agents.turn_parts import TurnResult
from decklog.core.entries import Actor
from decklog.core.store.ports import IndexPort
from research.experiment.hands import LEASE
from research.experiment.reasoner import ScriptedReasoner
from research.experiment.run import Killed

if TYPE_CHECKING:
    from research.experiment.run import Run


class ScheduledTurns(TurnRuntime):
    """A ``rules`` agent's process, as the scheduler runs it: ``TurnRuntime.run_turn``, then ``Run.after`` (the
    ``kill_after_append`` point and the hands). A turn that covered nothing (``skipped``, ``raced``) is no step. A
    kill (``Killed``, raised inside the turn or its hands) ends the process: the scheduler gets a ``skipped``
    result, ``run.died`` names the point, and the driver boots a replacement, which re-arms from the log."""

    def __init__(self, run: Run, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run = run

    async def run_turn(self, scope: str, *, trigger: str = "debounce", force: bool = False) -> TurnResult:
        run = self.run
        if run.died:
            return TurnResult(scope, "skipped", f"the process died at {run.died}")
        run.steps += 1
        try:
            result = await super().run_turn(scope, trigger=trigger, force=force)
            if result.status in ("skipped", "raced"):
                run.steps -= 1
                return result
            await run.after(scope, result)
        except Killed as k:
            run.died = str(k)
            return TurnResult(scope, "skipped", f"the process died at {k}")
        return result


class _DyingProposer:
    """The desk's ``propose``, behind the ``kill_after_append`` point."""

    def __init__(self, run: Run) -> None:
        self.run = run

    async def propose(
        self, scope: str, *, action: str, params: dict[str, Any], rationale: str, obligation_id: str, actor: Actor
    ) -> str:
        await self.run.maybe("kill_after_append", scope)
        assert self.run.desk is not None
        return await self.run.desk.propose(
            scope, action=action, params=params, rationale=rationale, obligation_id=obligation_id, actor=actor
        )


class Agents:
    def __init__(self, run: Run, index: IndexPort, catalog: ActionCatalogView) -> None:
        self.run = run
        self.index = index
        self.catalog = catalog  # the desk's actions as the agents see them (bot/actions.py ``AgentCatalog``)
        self._runtimes: dict[str, TurnRuntime] = {}

    def runtime(self) -> TurnRuntime:
        """The current agent's runtime (``run.agent``)."""
        name = self.run.agent
        if name not in self._runtimes:
            run = self.run
            kw: dict[str, Any] = {
                "reasoner": ScriptedReasoner(run, name),
                "clock": run.clock,
                "index": self.index,
                "budget": run.spec.budget,
                "proposer": _DyingProposer(run),
                "catalog": self.catalog,
                "lease_seconds": LEASE,
                "instance": name,
            }
            scheduled = run.spec.arm == "rules"
            self._runtimes[name] = ScheduledTurns(run, run.store, **kw) if scheduled else TurnRuntime(run.store, **kw)
        return self._runtimes[name]
