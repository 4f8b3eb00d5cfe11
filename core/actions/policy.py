"""Approval policy: what a risk level means, and who may approve or deny a parked proposal. Pure functions.

- R1 runs when proposed (no approval); R2 parks for any configured approver; R3 parks and needs
  ``r3_approvals`` distinct approvers, none of them the proposer; R4 is denied when proposed, never offered.
- Approvers are Slack user ids, names of ``[approvals.user_groups]`` groups, or Slack user group ids (``S…``,
  whose members the caller resolves). An action's ``approver_group`` narrows approval to that group.
- Only humans decide. Denying is open to approvers and to the proposer (withdrawing their own proposal).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Literal

from decklog.core.state import ProposalState

ProposalStatus = Literal["waiting_for_approval", "approved", "denied"]
R4_REASON = "R4 actions are never run by decklog and are not offered for approval"


@dataclass(frozen=True)
class ApproverPolicy:
    approvers: tuple[str, ...] = ()
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    r3_approvals: int = 1
    expiry_minutes: float = 30.0

    def slack_groups(self, action_group: str = "") -> list[str]:
        """Slack user group ids (``S…``) whose membership the caller must resolve for this action."""
        refs = [action_group] if action_group else list(self.approvers)
        out: list[str] = []
        for ref in refs:
            members = self.groups.get(ref, (ref,))
            out.extend(m for m in members if is_slack_group(m))
        return out


def is_slack_group(ref: str) -> bool:
    return ref[:1] == "S" and ref.isalnum() and ref.upper() == ref


def initial_status(risk: str) -> ProposalStatus:
    if risk == "R1":
        return "approved"
    if risk == "R4":
        return "denied"
    return "waiting_for_approval"


def approvals_required(risk: str, policy: ApproverPolicy) -> int:
    return {"R1": 0, "R2": 1, "R3": policy.r3_approvals}.get(risk, 0)


def _expand(refs: tuple[str, ...] | list[str], policy: ApproverPolicy) -> tuple[set[str], set[str]]:
    """(user ids, Slack group ids) named by approver references (local group names are expanded)."""
    users: set[str] = set()
    slack: set[str] = set()
    for ref in refs:
        for member in policy.groups.get(ref, (ref,)):
            (slack if is_slack_group(member) else users).add(member)
    return users, slack


def _not_an_approver(
    policy: ApproverPolicy, proposal: ProposalState, user_id: str, action_group: str, member_of: Set[str]
) -> str | None:
    if action_group:
        if action_group not in policy.groups and not is_slack_group(action_group):
            return f"{proposal.action} needs an approver from the group {action_group!r}, which is not configured"
        users, slack = _expand([action_group], policy)
        who = f"the {action_group} group"
    else:
        users, slack = _expand(list(policy.approvers), policy)
        who = "the configured approvers"
    if not users and not slack:
        return "no approvers are configured (set [approvals] approvers in decklog.toml or DECKLOG_APPROVERS)"
    if user_id not in users and not (slack & set(member_of)):
        return f"you are not one of {who} for {proposal.action}"
    return None


def may_approve(
    policy: ApproverPolicy,
    proposal: ProposalState,
    *,
    user_id: str,
    actor_type: str,
    action_group: str = "",
    member_of: Set[str] = frozenset(),
) -> str | None:
    """None if ``user_id`` may approve ``proposal``; otherwise the reason, in words for that person."""
    if actor_type != "human":
        return "only a person can approve"
    refusal = _not_an_approver(policy, proposal, user_id, action_group, member_of)
    if refusal:
        return refusal
    if proposal.risk == "R3" and user_id == proposal.proposer:
        return "R3 actions need an approver other than the proposer"
    if user_id in proposal.approvals:
        need = proposal.approvals_required - len(proposal.approvals)
        return f"you already approved it; it needs {need} more distinct approver(s)"
    return None


def may_deny(
    policy: ApproverPolicy,
    proposal: ProposalState,
    *,
    user_id: str,
    actor_type: str,
    action_group: str = "",
    member_of: Set[str] = frozenset(),
) -> str | None:
    """Approvers may deny; so may the proposer (withdrawing their own proposal). Only people decide."""
    if actor_type != "human":
        return "only a person can deny"
    if user_id == proposal.proposer:
        return None
    return _not_an_approver(policy, proposal, user_id, action_group, member_of)
