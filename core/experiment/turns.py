"""The agents of a run: decklog's ``TurnRuntime`` (core/agents/runtime.py), one per agent or worker, with the
scripted policy as its reasoner, the run's action desk as its ``Proposer`` and catalog, and the run's view budget.

A new agent (a replacement after a kill, a worker that joins, a new population) is a new runtime: a fresh process
with an empty view cache. ``kill_after_append`` dies between the turn's append and the hand-off of its proposals
to the desk (the runtime's step after the record, "before the outbox").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.agents.ports import ActionCatalogView
from core.agents.runtime import TurnRuntime
from core.entries import Actor
from core.experiment.hands import LEASE
from core.experiment.reasoner import ScriptedReasoner
from core.index import Index

if TYPE_CHECKING:
    from core.experiment.run import Run


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
    def __init__(self, run: Run, index: Index, catalog: ActionCatalogView) -> None:
        self.run = run
        self.index = index
        self.catalog = catalog  # the desk's actions as the agents see them (bot/actions.py ``AgentCatalog``)
        self._runtimes: dict[str, TurnRuntime] = {}

    def runtime(self) -> TurnRuntime:
        """The current agent's runtime (``run.agent``)."""
        name = self.run.agent
        if name not in self._runtimes:
            self._runtimes[name] = TurnRuntime(
                self.run.store,
                reasoner=ScriptedReasoner(self.run, name),
                clock=self.run.clock,
                index=self.index,
                budget=self.run.spec.budget,
                proposer=_DyingProposer(self.run),
                catalog=self.catalog,
                lease_seconds=LEASE,
                instance=name,
            )
        return self._runtimes[name]
