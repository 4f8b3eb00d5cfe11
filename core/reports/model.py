"""The post-incident report as data: what ``build_report`` derives from a log and every format renders.

The JSON format is this model dumped with sorted keys, so the field names here are part of the external contract.
Nothing here holds wall-clock time or entry ids: the same log always gives the same model.
"""

from __future__ import annotations

from typing import Literal

from decklog.core.entries import Actor
from decklog.core.reports.model_actions import (
    ActionLine,
    CompensationLine,
    FenceRejection,
    VerificationLine,
)
from decklog.core.reports.model_base import Model as _Model
from decklog.core.reports.model_base import Origin

__all__ = [
    "FORMAT_VERSION",
    "AlertLine",
    "DecisionLine",
    "FindingCount",
    "FollowUpLine",
    "Impact",
    "InferenceLine",
    "Integrity",
    "LinkedScope",
    "Milestone",
    "MilestoneName",
    "ObligationLine",
    "OpenQuestion",
    "Participant",
    "Report",
    "SeverityStep",
    "Summary",
    "TimelineLine",
    "TurnLine",
    "TurnTotals",
]

MilestoneName = Literal["declared", "first_human_response", "mitigated", "resolved"]
FORMAT_VERSION = 1


class Summary(_Model):
    scope: str
    kind: str
    title: str
    status: str
    severity: int | None = None
    worst_severity: int | None = None
    services: tuple[str, ...] = ()
    declared_at: str | None = None
    declared_by: Actor | None = None
    declared_via: str = ""
    resolved_at: str | None = None
    duration_s: float | None = None  # declared → resolved; None while open
    # MTTA by the rule insights reads (core/state/mtta.py): from the first page when decklog paged, else from the
    # declaration; None until acknowledged
    mtta_from: Literal["page", "declaration"] = "declaration"
    mtta_s: float | None = None
    description: str = ""  # what the declaration said
    resolution: str = ""  # what the last resolution said
    goals: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    thread_permalink: str = ""


class SeverityStep(_Model):
    seq: int
    at: str
    severity: int
    by: Actor
    reason: str = ""


class AlertLine(_Model):
    fingerprint: str
    title: str
    service: str = ""
    source: str = ""
    status: str = ""
    first_at: str
    last_at: str
    resolved_at: str | None = None
    notifications: int = 1


class Impact(_Model):
    services: tuple[str, ...] = ()
    worst_severity: int | None = None
    severity_history: tuple[SeverityStep, ...] = ()
    alerts: tuple[AlertLine, ...] = ()
    started_at: str | None = None  # the first firing alert, or the declaration if earlier
    mitigated_at: str | None = None
    duration_s: float | None = None  # started → mitigated


class Milestone(_Model):
    name: MilestoneName
    label: str
    reached: bool
    seq: int | None = None
    at: str | None = None
    by: Actor | None = None
    since_declared_s: float | None = None
    since_previous_s: float | None = None
    link: str = ""


class TimelineLine(_Model):
    scope: str  # the report's scope, or a linked scope whose entries are merged in
    seq: int
    at: str
    offset_s: float | None  # since the declaration
    origin: Origin  # human-recorded, agent-inferred or system
    actor: Actor
    kind: str
    text: str
    link: str = ""
    refs: tuple[int, ...] = ()


class DecisionLine(_Model):
    seq: int
    at: str
    by: Actor
    origin: Origin
    text: str
    rationale: str = ""
    expected_outcome: str = ""
    link: str = ""


class FindingCount(_Model):
    """One reasoner's findings of one kind, by what people answered (core/reports/sections/findings.py)."""

    reasoner: str
    kind: str
    total: int
    confirmed: int = 0
    ruled_out: int = 0
    accepted: int = 0
    dismissed: int = 0
    unanswered: int = 0


class InferenceLine(_Model):
    """A hypothesis, suggestion or answer — what someone (usually an agent) inferred, and its verdict."""

    seq: int
    at: str
    by: Actor
    origin: Origin
    kind: Literal["hypothesis", "suggestion", "answer"]
    text: str
    confidence: float | None = None
    suspect_scope: str = ""
    verdict: str = ""  # suggestions: accepted | dismissed | open
    verdict_by: str = ""


class OpenQuestion(_Model):
    kind: Literal["uncertain_effect", "abandoned_uncertain", "no_result", "verification_inconclusive"]
    seq: int
    at: str
    text: str
    run_id: str = ""
    action: str = ""
    fence: int = 0
    idempotency_key: str = ""
    note: str = ""


class ObligationLine(_Model):
    obligation_id: str
    text: str
    purpose: str
    status: Literal["open", "claimed", "fulfilled", "cancelled"]
    seq: int
    at: str
    by: Actor
    conditions: tuple[str, ...] = ()
    action: str = ""
    expected_outcome: str = ""
    due_at: str = ""
    run_id: str = ""
    holder: str = ""
    fence: int = 0
    lease_until: str = ""
    closed_seq: int | None = None
    note: str = ""


class FollowUpLine(_Model):
    """A ``follow_up`` entry and what its tracker said: ``open`` (not filed yet), ``synced`` (filed, open in the
    tracker) or ``closed`` (closed there; a reopen makes it ``synced`` again)."""

    seq: int
    at: str
    by: Actor
    text: str
    owner: str = ""
    due: str = ""
    obligation_id: str = ""
    state: Literal["open", "synced", "closed"] = "open"
    tracker: str = ""
    number: str = ""
    url: str = ""
    closed_by: str = ""
    reason: str = ""  # the tracker's state_reason (completed, not_planned)
    changed_seq: int | None = None  # the entry that set the state (synced / closed / reopened)


class Participant(_Model):
    actor: Actor
    roles: tuple[str, ...] = ()
    entries: int = 0
    first_at: str | None = None
    last_at: str | None = None


class TurnLine(_Model):
    seq: int
    at: str
    reasoner: str
    model: str = ""
    view: str = ""
    trigger: str = ""
    seq_from: int = 0
    seq_to: int = 0
    view_bytes: int = 0
    view_tokens: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    duration_ms: int = 0
    outcome: str = "ok"
    error: str = ""


class TurnTotals(_Model):
    turns: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    duration_ms: int = 0


class LinkedScope(_Model):
    scope: str
    relation: str = "related"
    reason: str = ""
    linked_seq: int
    linked_at: str
    found: bool = True
    kind: str = ""
    title: str = ""
    status: str = ""
    severity: int | None = None
    services: tuple[str, ...] = ()
    declared_at: str | None = None
    resolved_at: str | None = None
    merged_into_timeline: bool = False


class Integrity(_Model):
    """Whether a scope's hash chain verifies, and which head the report was built from."""

    scope: str
    checked: bool
    ok: bool
    last_seq: int = 0  # the last entry the report covers (``report_exported`` entries are not part of it)
    head_hash: str = ""  # that entry's chained hash
    first_bad_seq: int | None = None
    reason: str = ""


class Report(_Model):
    format_version: int = FORMAT_VERSION
    generator: str = "decklog"
    scope: str
    summary: Summary
    impact: Impact
    milestones: tuple[Milestone, ...]
    timeline: tuple[TimelineLine, ...]
    decisions: tuple[DecisionLine, ...]
    inferences: tuple[InferenceLine, ...]
    findings: tuple[FindingCount, ...] = ()  # how people answered each reasoner's findings
    actions: tuple[ActionLine, ...]
    verifications: tuple[VerificationLine, ...]
    fence_rejections: tuple[FenceRejection, ...]
    compensations: tuple[CompensationLine, ...]
    open_questions: tuple[OpenQuestion, ...]
    obligations: tuple[ObligationLine, ...]  # still open (or claimed), follow-ups excluded
    follow_ups: tuple[ObligationLine, ...]  # every follow-up, whatever its status
    tracker_follow_ups: tuple[FollowUpLine, ...] = ()  # follow_up entries, with their tracker state
    participants: tuple[Participant, ...]
    agent_turns: tuple[TurnLine, ...]
    agent_totals: TurnTotals
    linked_scopes: tuple[LinkedScope, ...]
    integrity: tuple[Integrity, ...]  # the report's scope first, then each linked scope

    @property
    def verified(self) -> bool:
        return all(i.checked and i.ok for i in self.integrity)
