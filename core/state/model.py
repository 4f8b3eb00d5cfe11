"""The shapes of a scope's derived state (``ScopeState`` and its parts); the fold that builds them is
core/state/folding.py."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

#: ``ScopeState`` fields added after logs existed: absent from the stored JSON while empty (old logs verify).
OMITTED_WHEN_EMPTY = (
    "source_severity_changes",
    "alert_keys",
    "alert_groups",
    "alerts_left_out",
    "alert_notes",
    "forked_from",
    "forked_at",
    "paged_at",
    "page_acknowledged_at",
    "page_acknowledged_by",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RoleHolder(_Frozen):
    user_id: str
    user_name: str = ""


class ThreadRef(_Frozen):
    channel: str
    ts: str = ""
    permalink: str = ""
    dedicated_channel: bool = False


class ObligationState(_Frozen):
    id: str
    text: str
    purpose: str = "task"
    status: str = "open"  # open | claimed
    holder: str = ""
    fence: int = 0
    lease_until: str = ""
    action: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    conditions: tuple[str, ...] = ()
    expected_outcome: str = ""
    run_id: str = ""
    due_at: str = ""
    opened_seq: int = 0


class ProposalState(_Frozen):
    id: str
    action: str
    params: dict[str, Any] = Field(default_factory=dict)
    preview: str = ""
    args_hash: str = ""
    risk: str = "R2"
    proposer: str = ""
    proposed_seq: int = 0
    status: str = "waiting_for_approval"  # waiting_for_approval | approved | running
    approvals: tuple[str, ...] = ()
    approvals_required: int = 1
    expires_at: str = ""
    inputs_digest: str = ""
    obligation_id: str = ""
    safety_conditions: tuple[str, ...] = ()
    run_id: str = ""
    compensates_run: str = ""


class AlertState(_Frozen):
    fingerprint: str
    status: str
    service: str = ""
    title: str = ""
    source: str = ""
    count: int = 1
    first_seq: int = 0
    last_seq: int = 0


class RunState(_Frozen):
    run_id: str
    action: str
    fence: int = 0
    proposal_id: str = ""
    obligation_id: str = ""
    started_seq: int = 0
    outcome: str = "running"  # running | uncertain


class ScopeState(_Frozen):
    """Everything a reader needs without replaying the log. ``version`` is the seq of the last entry."""

    scope: str
    kind: str = "incident"
    title: str = ""
    status: str = "investigating"
    severity: int | None = None
    services: tuple[str, ...] = ()
    version: int = 0
    created_at: str = ""
    updated_at: str = ""
    acknowledged_at: str = ""
    mitigated_at: str = ""
    resolved_at: str = ""
    roles: dict[str, RoleHolder] = Field(default_factory=dict)
    thread: ThreadRef | None = None
    linked: tuple[str, ...] = ()
    obligations: dict[str, ObligationState] = Field(default_factory=dict)
    max_fence: int = 0
    proposals: dict[str, ProposalState] = Field(default_factory=dict)
    runs: dict[str, RunState] = Field(default_factory=dict)
    alerts: dict[str, AlertState] = Field(default_factory=dict)
    alert_repeats: int = 0
    suggestions: dict[str, str] = Field(default_factory=dict)
    suggestion_actions: dict[str, str] = Field(default_factory=dict)
    hypotheses: int = 0
    evidence: int = 0
    last_human_seq: int = 0
    last_turn_seq: int = 0  # the last seq a (non-ask) agent turn covered; see core/agents/runtime.py
    kind_counts: dict[str, int] = Field(default_factory=dict)  # entries per kind: views summarise what they omit
    # -- alert bookkeeping (core/alerts); left out of the stored JSON while empty, so logs written before these
    # fields existed fold to exactly the state they stored (``decklog verify``) --
    source_severity_changes: int = 0  # severity_changed entries by the system (alert sources); fewer than all = a
    # person (or an agent) has set the severity
    alert_keys: dict[str, str] = Field(default_factory=dict)  # fingerprint → its last notification's identity
    alert_groups: tuple[str, ...] = ()  # the sources' groups (``AlertSignal.group``) this incident holds
    alerts_left_out: dict[str, int] = Field(default_factory=dict)  # source → alerts its last notification left out
    alert_notes: tuple[str, ...] = ()  # one-time thread notes already given (``Observation.data["note"]``)
    # -- a fork (core/fork.py): the source scope and seq its ``forked`` entry names; the outbox then delivers the
    # scope to the index only (core/outbox/ FORK_TOPICS) --
    forked_from: str = ""
    forked_at: int = 0
    # -- on-call (core/oncall/): the first page, and the first acknowledgement after it — MTTA of a paged incident
    # is the time between them (decision 159) --
    paged_at: str = ""
    page_acknowledged_at: str = ""
    page_acknowledged_by: str = ""  # the Slack user id of that acknowledgement

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in OMITTED_WHEN_EMPTY:
            if name in data and not data[name]:
                del data[name]
        return data

    @property
    def severity_set_by_person(self) -> bool:
        """A severity_changed entry not made by the system exists (alert sources then no longer lower it)."""
        return self.kind_counts.get("severity_changed", 0) > self.source_severity_changes

    @property
    def is_open(self) -> bool:
        return self.status != "resolved"

    @property
    def firing_alerts(self) -> list[AlertState]:
        return [a for a in self.alerts.values() if a.status != "resolved"]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def empty_state(scope: str) -> ScopeState:
    kind = scope.split("/", 1)[0]
    return ScopeState(scope=scope, kind=kind)
