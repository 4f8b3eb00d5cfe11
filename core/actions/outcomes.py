"""What the action desk answers: typed outcomes, not texts. Whoever shows them to a person renders them (the Slack
adapter: ``adapters/slack/outcomes.py``); core says what happened, never how it looks."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from decklog.core.actions.runner import RunReport


@dataclass(frozen=True)
class ActionInfo:
    """What the catalog offers, as agents and people see it (the shape of ``core.agents.ports.ActionInfo`` plus
    availability)."""

    name: str
    description: str
    risk: str
    params_schema: dict[str, Any]
    safety_conditions: tuple[str, ...]
    available: bool = True
    unavailable_reason: str = ""
    compensable: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "risk": self.risk,
            "params": self.params_schema,
            "safety_conditions": list(self.safety_conditions),
            "available": self.available,
            "unavailable_reason": self.unavailable_reason,
            "compensable": self.compensable,
        }


@dataclass(frozen=True)
class Proposed:
    """What ``make_proposal`` did. ``text`` is the one-line outcome ``propose`` returns (an agent's tool result)."""

    proposal_id: str
    status: str  # waiting_for_approval | approved | denied
    existing: bool = False
    text: str = ""


class DecisionKind(Enum):
    """What became of an approve / deny."""

    APPROVED = "approved"  # the last approval needed: the action runs now
    APPROVED_WAITING = "approved_waiting"  # counted; more approvers are needed
    DENIED = "denied"
    REFUSED = "refused"  # this person may not decide it (the attempt is recorded)
    EXPIRED = "expired"  # closed: not approved in time
    VOIDED = "voided"  # the scope changed since the proposal: re-evaluated as a new one
    NOT_WAITING = "not_waiting"  # decided meanwhile (``status`` says how)
    CLOSED = "closed"  # no longer open: closed earlier (``outcome``, ``reason``)
    ALREADY_DENIED = "already_denied"  # denied earlier by ``by``
    DENIED_BY_POLICY = "denied_by_policy"  # R4: never runs (``reason``)
    DECIDED = "decided"  # not open any more: it ran or was decided


@dataclass(frozen=True)
class DecisionOutcome:
    """The answer to ``ActionDesk.decide``, for the person who asked."""

    kind: DecisionKind
    proposal_id: str
    approve: bool = True
    action: str = ""
    status: str = ""  # NOT_WAITING: the proposal's status now
    outcome: str = ""  # CLOSED: how it was closed
    reason: str = ""  # REFUSED / EXPIRED / VOIDED / CLOSED / DENIED_BY_POLICY: why
    by: str = ""  # ALREADY_DENIED: who denied it
    approvals: int = 0  # APPROVED_WAITING: approvals so far, of ``approvals_required``
    approvals_required: int = 0
    new_proposal_id: str = ""  # VOIDED: the re-evaluated proposal


class CompensationKind(Enum):
    """What became of a request to compensate a run."""

    PROPOSED = "proposed"
    ALREADY_PROPOSED = "already_proposed"
    ALREADY_COMPENSATED = "already_compensated"
    NOTHING_APPLIED = "nothing_applied"  # the run changed nothing, or its outcome is unknown
    NOT_CONFIGURED = "not_configured"  # the action has no compensation in decklog.toml


@dataclass(frozen=True)
class CompensationOutcome:
    """The answer to ``ActionDesk.compensate``."""

    kind: CompensationKind
    run_id: str
    proposal_id: str = ""  # PROPOSED / ALREADY_PROPOSED: the compensating proposal; ALREADY_COMPENSATED: ""
    action: str = ""  # PROPOSED: the compensating action; NOT_CONFIGURED: the run's action
    status: str = ""  # PROPOSED / ALREADY_PROPOSED: the proposal's status ("waiting for approval", …)
    compensating_run: str = ""  # ALREADY_COMPENSATED: the run that undid it


@dataclass(frozen=True)
class Verified:
    """A verification the rules decided and recorded: ``str()`` is ``"ob-1a2b3c: verified"``."""

    obligation_id: str
    outcome: str

    def __str__(self) -> str:
        return f"{self.obligation_id}: {self.outcome}"


@dataclass
class SweepReport:
    scopes: int = 0
    leases_expired: int = 0
    proposals_expired: int = 0
    runs: list[RunReport] = field(default_factory=list)
    verifications: list[Verified] = field(default_factory=list)
