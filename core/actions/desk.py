"""The action desk: the one door to actions — propose, decide (approve / deny), execute, compensate, verify, sweep.

Agents reach it through their ``Proposer`` port (``propose``); Slack through ``decide`` and ``compensate`` (the
``SlackPorts``, which render the typed outcomes: ``adapters/slack/outcomes.py``); the ``actions`` outbox sender
and the periodic sweep through ``execute`` / ``verify`` / ``sweep``. Every decision is one transaction on the
scope's log, decided from the state inside it. This façade only delegates, room by room: ``proposals``,
``approvals``, ``compensation``, ``verifier``, ``sweep`` (their shared collaborators: ``context.DeskContext``).

>>> desk = ActionDesk(store, index, catalog, executors, policy, clock=clock, lease_seconds=120)  # doctest: +SKIP
>>> await desk.propose("incident/payments-5xx", action="rollback_deploy", params={"service": "payments"},
...                    rationale="r41 raised 5xx", obligation_id="ob-1a2b3c", actor=Actor.agent("triage"))  # doctest: +SKIP
'parked p-1a2b3c for approval (R2): rollback_deploy(service="payments")'
>>> await desk.decide(None, "p-1a2b3c", True, Actor.human("U0ALICE"), "", "slack:act:1")  # doctest: +SKIP
DecisionOutcome(kind=<DecisionKind.APPROVED: 'approved'>, proposal_id='p-1a2b3c', action='rollback_deploy', ...)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from decklog.core.actions.approvals import Approvals, withdraw
from decklog.core.actions.catalog import Catalog
from decklog.core.actions.compensation import Compensations
from decklog.core.actions.conditions import Evidence
from decklog.core.actions.context import DeskContext, GroupResolver
from decklog.core.actions.executor import Executor
from decklog.core.actions.outcomes import (
    ActionInfo,
    CompensationOutcome,
    DecisionOutcome,
    SweepReport,
    Verified,
)
from decklog.core.actions.policy import ApproverPolicy
from decklog.core.actions.proposals import Proposals
from decklog.core.actions.runner import Checkpoint, EvidenceSource, Runner, RunReport
from decklog.core.actions.sweep import Sweeper
from decklog.core.actions.verifier import Verifier
from decklog.core.clock import Clock
from decklog.core.entries import Actor
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, Leases, LogStore


class RunnerFactory(Protocol):
    """How the desk builds its runner (``Runner`` itself, or a partial of it with other timings)."""

    def __call__(
        self,
        store: LogStore,
        catalog: Catalog,
        executors: Mapping[str, Executor],
        *,
        clock: Clock,
        lease_seconds: float,
        evidence: EvidenceSource,
        checkpoint: Checkpoint | None = ...,
        leases: Leases | None = ...,
    ) -> Runner: ...


class ActionDesk:
    def __init__(
        self,
        store: LogStore,
        index: IndexPort | None,
        catalog: Catalog,
        executors: Mapping[str, Executor],
        policy: ApproverPolicy,
        *,
        clock: Clock,
        lease_seconds: float = 120.0,
        groups: GroupResolver | None = None,
        checkpoint: Checkpoint | None = None,
        runner: RunnerFactory = Runner,
        leases: Leases | None = None,
    ) -> None:
        """``runner`` builds the desk's ``Runner`` from the desk's pieces (default: ``Runner`` itself; a caller
        that tunes it passes e.g. ``functools.partial(Runner, reconcile_backoff=0.05)``); ``leases``: the
        backend's shared leases when replicas share its database (one run per action target across them)."""
        self.ctx = DeskContext(store, index, catalog, policy, clock, groups)
        self.store, self.index, self.catalog, self.policy, self.clock = store, index, catalog, policy, clock
        self.proposals = Proposals(self.ctx)
        self.make_proposal = self.proposals.make  # ``propose`` with the details: the proposal id and its status
        self.approvals = Approvals(self.ctx, self.proposals)
        self.compensations = Compensations(self.ctx, self.proposals)
        self.verifier = Verifier(self.ctx)
        self.sweeper = Sweeper(self.ctx, self.execute, self.verify)
        self.runner = runner(
            store,
            catalog,
            executors,
            clock=clock,
            lease_seconds=lease_seconds,
            evidence=self.evidence,
            checkpoint=checkpoint,
            leases=leases,
        )

    @property
    def groups(self) -> GroupResolver | None:
        """Slack user group id → its members (None: user groups cannot be resolved here)."""
        return self.ctx.groups

    @groups.setter
    def groups(self, groups: GroupResolver | None) -> None:
        self.ctx.groups = groups

    # -- the catalog ------------------------------------------------------------------------------------------

    def listing(self) -> list[ActionInfo]:
        """Every configured action, available or not (with the reason)."""
        return [
            ActionInfo(
                name=a.name,
                description=a.description,
                risk=a.risk,
                params_schema={k: v.model_dump(exclude_defaults=True) | {"type": v.type} for k, v in a.params.items()},
                safety_conditions=a.safety_conditions,
                available=a.available,
                unavailable_reason=a.unavailable_reason,
                compensable=a.compensation is not None,
            )
            for a in self.catalog
        ]

    def available(self) -> list[ActionInfo]:
        """The actions that may be proposed here (their executor is configured)."""
        return [a for a in self.listing() if a.available]

    async def evidence(self, scope: str, state: ScopeState, params: Mapping[str, Any], *, action: str = "") -> Evidence:
        """Facts from outside the scope's own state (``DeskContext.evidence``)."""
        return await self.ctx.evidence(scope, state, params, action=action)

    # -- proposing --------------------------------------------------------------------------------------------

    async def propose(
        self,
        scope: str,
        *,
        action: str,
        params: dict[str, Any],
        rationale: str,
        obligation_id: str | None,
        actor: Actor,
    ) -> str:
        """Propose an action (the agents' ``Proposer`` port); returns a one-line outcome naming the proposal id:
        ``parked p-1a2b3c for approval (R2): rollback_deploy(service="payments")``.

        R1 is approved at once (the ``actions`` sender runs it), R2/R3 park for approval, R4 is recorded as
        denied with the reason. An equal open proposal is not repeated (its id is returned). Raises ``NotFound``
        (unknown action or obligation), ``Forbidden`` (unavailable action), ``InvalidInput`` (bad parameters,
        naming the parameter), ``Conflict`` (the obligation already has an approved proposal).
        """
        made = await self.proposals.make(
            scope, action=action, params=params, rationale=rationale, obligation_id=obligation_id or "", actor=actor
        )
        return made.text

    # -- deciding, compensating -------------------------------------------------------------------------------

    async def find(self, proposal_id: str) -> str:
        """The open scope where ``proposal_id`` is parked (for ``/incident approve <id>`` outside a thread)."""
        return await self.approvals.find(proposal_id)

    async def decide(
        self, scope: str | None, proposal_id: str, approve: bool, actor: Actor, reason: str = "", key: str = ""
    ) -> DecisionOutcome:
        """Approve or deny a parked proposal; returns what happened, for the person who asked.

        Refusals (not an approver, self-approval of R3, …) are recorded as ``approval_refused``. An expired
        proposal is closed. An approval whose safety-condition inputs drifted since the proposal is void: the
        proposal is closed as ``voided`` and re-evaluated as a new proposal, and the outcome says what changed.
        """
        return await self.approvals.decide(scope, proposal_id, approve, actor, reason, key)

    async def compensate(self, scope: str, run_id: str, actor: Actor, key: str = "") -> CompensationOutcome:
        """Propose the compensation of an applied run: a new proposal, approval and run of its own."""
        return await self.compensations.compensate(scope, run_id, actor, key)

    # -- running, verifying, sweeping -------------------------------------------------------------------------

    async def execute(self, scope: str, proposal_id: str, *, receipt: str) -> RunReport:
        """Run an approved proposal — after checking that its approvals satisfy the policy as configured now.

        Approvals normally come through ``decide``; this also stops one appended to the log some other way (a
        hand-written ``decklog append``, a forged risk level): such a proposal is closed as withdrawn, unrun.
        """
        state = await self.store.get_state(scope)
        prop = state.proposals.get(proposal_id)
        if prop is not None and prop.status == "approved":
            problem = await self.approvals.policy_problem(prop)
            if problem:
                await self.store.append(scope, functools.partial(withdraw, pid=proposal_id, reason=problem))
                return RunReport("withdrawn", detail=problem)
        return await self.runner.execute(scope, proposal_id, receipt=receipt)

    async def verify(self, scope: str, *, due_only: bool = False) -> list[Verified]:
        """Judge the scope's open "verification needed" obligations by the rules; record the decidable ones
        (with ``due_only``, only those whose due time has passed: the sweep's backstop)."""
        return await self.verifier.verify(scope, due_only=due_only)

    async def sweep(self, scopes: Sequence[str] | None = None) -> SweepReport:
        """Periodic upkeep: expire leases and approvals, run approved proposals nobody is running (and settle
        runs whose holder vanished), decide verifications that fell due (new evidence triggers the others)."""
        return await self.sweeper.sweep(scopes)
