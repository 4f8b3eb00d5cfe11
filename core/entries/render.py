"""``render_text``: one human-readable line per entry, what the timeline and the report show.

One small function per payload type (``_LINES``), each given the payload and the actor who recorded it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from decklog.core.entries.actions import (
    ActionResult,
    ActionStarted,
    Approval,
    ApprovalRefused,
    EffectCompensated,
    ProposalClosed,
    ProposalMade,
    Verification,
)
from decklog.core.entries.agents import (
    AgentTurn,
    Answer,
    DeliveryFailed,
    FindingAnswer,
    Forked,
    Question,
    ReportExported,
    Suggestion,
    SuggestionFeedback,
)
from decklog.core.entries.base import Actor, Payload
from decklog.core.entries.frame import (
    Constraint,
    Decision,
    Declared,
    Evidence,
    Goal,
    Hypothesis,
    Message,
    MessageDeleted,
    MessageEdited,
    Observation,
    Retracted,
    RoleAssigned,
    ScopeLinked,
    SeverityChanged,
    StatusChanged,
    ThreadLinked,
)
from decklog.core.entries.lifecycle import ArchiveNotice, ChannelArchive, Reminder
from decklog.core.entries.obligations import (
    FenceRejected,
    FollowUp,
    FollowUpClosed,
    FollowUpSynced,
    ObligationCancelled,
    ObligationClaimed,
    ObligationExpired,
    ObligationFulfilled,
    ObligationOpened,
    ObligationReleased,
)

Line = Callable[[Any, Actor], str]


def _clip(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _suffix(sep: str, text: str) -> str:
    return f"{sep}{_clip(text)}" if text else ""


def _declared(p: Declared, a: Actor) -> str:
    sev = f" (SEV{p.severity})" if p.severity else ""
    return f"{a.label()} declared “{_clip(p.title)}”{sev}"


def _severity(p: SeverityChanged, a: Actor) -> str:
    why = f" ({_clip(p.reason)})" if p.reason and a.type == "system" else ""  # an alert source's reason
    return f"{a.label()} set severity to SEV{p.severity}{why}"


def _finding_answer(p: FindingAnswer, a: Actor) -> str:
    what = f" ({p.suspect_scope or p.obligation_id})" if p.suspect_scope or p.obligation_id else ""
    return f"{a.label()} {p.verdict.replace('_', ' ')} {p.finding_kind} #{p.finding}{what}"


# Labels that name one instance of an alert, shown first: what tells two alerts of one rule apart.
INSTANCE_LABELS = ("instance", "pod", "host", "hostname", "node", "container", "device", "mountpoint", "job")
# Labels that never tell alerts apart in a line that already shows the title and the status.
SAID_ELSEWHERE = frozenset({"alertname", "severity", "priority"})
MAX_LABELS = 4


def _observation(p: Observation, a: Actor) -> str:
    """An alert's observation names its status and what tells it from its siblings: ``Alert firing: Disk full
    {instance=db-1:9100, mountpoint=/var}``. Any other observation: ``Observed: <text>``."""
    if not p.alert_status:
        return f"Observed: {_clip(p.text)}"
    shown = _distinguishing(p)
    labels = " {" + ", ".join(f"{k}={_clip(v, 60)}" for k, v in shown) + "}" if shown else ""
    return f"Alert {p.alert_status}: {_clip(p.text, 160)}{labels}"


def _distinguishing(p: Observation) -> list[tuple[str, str]]:
    """At most ``MAX_LABELS`` labels: those not shared by the whole notification first (Alertmanager and
    Grafana send ``commonLabels``), then instance-like ones, then the rest by name; none already in the title
    or the service, none of ``SAID_ELSEWHERE``."""
    common = _common_labels(p)
    candidates = [
        (k, v)
        for k, v in p.labels.items()
        if k not in SAID_ELSEWHERE and v and v != p.service and not (len(v) >= 4 and v in p.text)
    ]

    def rank(item: tuple[str, str]) -> tuple[int, int, str]:
        key, value = item
        varies = 0 if common and common.get(key) != value else 1
        known = INSTANCE_LABELS.index(key) if key in INSTANCE_LABELS else len(INSTANCE_LABELS)
        return varies, known, key

    ranked = sorted(candidates, key=rank)
    return ranked[:MAX_LABELS]


def _common_labels(p: Observation) -> dict[str, str]:
    """The notification's ``commonLabels`` when it grouped several alerts (else nothing varies by definition)."""
    body = p.raw.get("json") if isinstance(p.raw, dict) else None
    if not isinstance(body, dict):
        return {}
    alerts, common = body.get("alerts"), body.get("commonLabels")
    if not isinstance(alerts, list) or len(alerts) < 2 or not isinstance(common, dict):
        return {}
    return {str(k): str(v) for k, v in common.items()}


def _export_place(p: ReportExported) -> str:
    """Where an export went: two exports of the same bytes to two places are two lines that say so."""
    if p.destination == "slack":
        return "to the Slack thread"
    return f"to {_clip(p.destination, 120)}" if p.destination else ""


def _follow_up(p: FollowUp, a: Actor) -> str:
    extra = (f" → {p.owner}" if p.owner else "") + (f" (due {p.due})" if p.due else "")
    return f"Follow-up ({a.label()}): {_clip(p.text)}{extra}"


def _follow_up_closed(p: FollowUpClosed, a: Actor) -> str:
    verb = "reopened" if p.state == "open" else "closed" + (f" ({p.reason.replace('_', ' ')})" if p.reason else "")
    by = f" by {p.by}" if p.by else ""
    return f"Follow-up #{p.follow_up} {verb} in the tracker{by}{': ' + p.url if p.url else ''}"


def _retracted(p: Retracted, a: Actor) -> str:
    if p.what == "evidence":
        return f"{a.label()} took back the evidence: {_clip(p.text)}"
    return f"{a.label()} took back the feedback on suggestion {p.suggestion_id}"


_LINES: dict[type[Payload], Line] = {
    Declared: _declared,
    Goal: lambda p, a: f"Goal: {_clip(p.text)}",
    Constraint: lambda p, a: f"Constraint: {_clip(p.text)}",
    Observation: _observation,
    Hypothesis: lambda p, a: f"Hypothesis ({a.label()}): {_clip(p.text)}",
    Decision: lambda p, a: f"Decision ({a.label()}): {_clip(p.text)}",
    Message: lambda p, a: f"{a.label()}: {_clip(p.text)}",
    MessageEdited: lambda p, a: f"{a.label()} edited a message: {_clip(p.text)}",
    MessageDeleted: lambda p, a: f"{a.label()} deleted a message",
    Evidence: lambda p, a: f"📌 {a.label()} pinned: {_clip(p.text)}",
    Retracted: _retracted,
    StatusChanged: lambda p, a: f"{a.label()} set status to {p.status}{_suffix(' — ', p.summary)}",
    SeverityChanged: _severity,
    RoleAssigned: lambda p, a: f"{a.label()} assigned {p.role} to {p.user_name or p.user_id}",
    ThreadLinked: lambda p, a: f"Thread opened in {p.channel}",
    ScopeLinked: lambda p, a: f"Linked {p.scope} ({p.relation}){_suffix(': ', p.reason)}",
    ObligationOpened: lambda p, a: f"Obligation {p.obligation_id} opened: {_clip(p.text)}",
    ObligationClaimed: lambda p, a: f"{p.holder} claimed {p.obligation_id} (fence {p.fence})",
    ObligationReleased: lambda p, a: f"Obligation {p.obligation_id} released (fence {p.fence})",
    ObligationExpired: lambda p, a: f"Lease on {p.obligation_id} expired (fence {p.fence})",
    ObligationFulfilled: lambda p, a: f"Obligation {p.obligation_id} fulfilled{_suffix(': ', p.note)}",
    ObligationCancelled: lambda p, a: f"Obligation {p.obligation_id} cancelled{_suffix(': ', p.reason)}",
    FenceRejected: lambda p, a: f"Rejected a stale write on {p.obligation_id} (fence {p.fence} < {p.current_fence})",
    ProposalMade: lambda p, a: (
        f"{a.label()} proposed {p.action} [{p.risk}] {_clip(p.preview, 120)} — {p.status.replace('_', ' ')}"
    ),
    Approval: lambda p, a: f"{p.approver_name or p.approver} {p.decision} {p.proposal_id}",
    ApprovalRefused: lambda p, a: f"Refused {p.user_id} on {p.proposal_id}: {_clip(p.reason)}",
    ProposalClosed: lambda p, a: f"Proposal {p.proposal_id} {p.outcome}{_suffix(': ', p.reason)}",
    ActionStarted: lambda p, a: f"Run {p.run_id} started {p.action} under fence {p.fence}",
    ActionResult: lambda p, a: f"Run {p.run_id} {p.outcome}{_suffix(': ', p.error)}",
    EffectCompensated: lambda p, a: f"Run {p.compensating_run} compensated run {p.original_run}",
    Verification: lambda p, a: f"Verification {p.outcome}: {_clip(p.observed or p.expected)}",
    Suggestion: lambda p, a: f"Suggestion ({a.label()}): {_clip(p.text)}",
    SuggestionFeedback: lambda p, a: f"Suggestion {p.suggestion_id} {p.verdict}",
    Question: lambda p, a: f"Question ({a.label()}): {_clip(p.text)}",
    Answer: lambda p, a: f"Answer ({a.label()}): {_clip(p.text)}",
    AgentTurn: lambda p, a: f"Agent turn ({p.reasoner}, {p.view}): {p.outcome}",
    ReportExported: lambda p, a: f"Report exported ({p.format}, sha256 {p.sha256[:12]}) {_export_place(p)}".rstrip(),
    FindingAnswer: _finding_answer,
    FollowUp: _follow_up,
    FollowUpSynced: lambda p, a: p.text,
    FollowUpClosed: _follow_up_closed,
    Forked: lambda p, a: f"forked from {p.source} at seq {p.seq}",
    ArchiveNotice: lambda p, a: p.text,
    ChannelArchive: lambda p, a: p.text,
    Reminder: lambda p, a: p.text,
    DeliveryFailed: lambda p, a: (
        f"Delivery of #{p.seq} to {p.sender} failed after {p.attempts} attempts: {_clip(p.error)}"
    ),
}


def render_text(kind: str, p: Payload, actor: Actor) -> str:
    """One human-readable line for an entry: what the timeline and the report show (``kind`` for a payload
    type without a line of its own)."""
    for cls in type(p).__mro__:
        line = _LINES.get(cls)
        if line is not None:
            return line(p, actor)
    return kind
