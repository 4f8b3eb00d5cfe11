"""Thread replies: one renderer per entry kind, in a table (``REPLIES``, keyed by the kind's payload class).

An entry whose kind has no renderer, or whose renderer returns None, stays in the log only. Adding a kind that
people should see in the thread is one function and one row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.render.blocks import STATUS_EMOJI, Outgoing, button, context, esc, section, severity_label
from decklog.adapters.slack.render.findings import finding_blocks
from decklog.adapters.slack.render.proposals import by, proposal_message
from decklog.core.alerts.splits import QUIET_RELATIONS
from decklog.core.entries import (
    ActionResult,
    ActionStarted,
    AgentTurn,
    Answer,
    Approval,
    Constraint,
    Decision,
    DeliveryFailed,
    EffectCompensated,
    Entry,
    FenceRejected,
    FindingAnswer,
    Goal,
    Hypothesis,
    Message,
    ObligationOpened,
    Observation,
    Payload,
    ProposalClosed,
    ProposalMade,
    Retracted,
    RoleAssigned,
    ScopeLinked,
    SeverityChanged,
    StatusChanged,
    Suggestion,
    SuggestionFeedback,
    Verification,
)
from decklog.core.state import ScopeState

Renderer = Callable[[Entry, Any, ScopeState], Outgoing | None]  # (entry, its payload, the scope's state)

RUN_ICONS = {
    "applied": ":white_check_mark:",
    "refused": ":no_entry_sign:",
    "uncertain": ":grey_question:",
    "abandon_uncertain": ":warning:",
    "not_applied": ":heavy_minus_sign:",
    "skipped": ":double_vertical_bar:",
    "failed": ":x:",
}
VERIFICATION_ICONS = {"verified": ":white_check_mark:", "failed": ":x:", "inconclusive": ":grey_question:"}


def entry_reply(entry: Entry, state: ScopeState) -> Outgoing | None:
    """The thread reply for an entry people should see, or None for entries that stay in the log only."""
    render = REPLIES.get(type(entry.payload))
    return render(entry, entry.payload, state) if render is not None else None


def _who(entry: Entry) -> str:
    return esc(entry.actor.label())


def _message(entry: Entry, p: Message, _state: ScopeState) -> Outgoing | None:
    if p.ts:  # it came from Slack: it is already there
        return None
    who = _who(entry)
    return Outgoing(f"{who}: {esc(p.text)}", [section(f"*{who}* (via {entry.actor.type}): {esc(p.text)}")])


def _observation(entry: Entry, p: Observation, _state: ScopeState) -> Outgoing | None:
    if p.fingerprint:
        # No message per alert: the alert that opened the incident is its header, and every later one (a new
        # fingerprint joining, a repeat, a resolve) is counted on the header and in the per-minute summary below.
        return None
    if entry.actor.type == "agent" and "query" in p.data:
        return None  # an agent's read of Prometheus, Alertmanager, the catalog…: the hypothesis citing it shows it
    if p.source == "decklog:alerts" and isinstance(p.data.get("summary"), dict):
        return _alert_summary(p)
    icon = ":package:" if p.source == "change" else ":mag:"
    return Outgoing(f"Observed: {esc(p.text)}", [section(f"{icon} {esc(p.text)}"), by(entry)])


def _alert_summary(p: Observation) -> Outgoing:
    """One concise line for an incident's alerts of the last minute (``core.alerts.summary``)."""
    counts = p.data["summary"]
    icon = ":white_check_mark:" if counts.get("total") and not counts.get("firing") else ":bell:"
    return Outgoing(esc(p.text), [context(f"{icon} {esc(p.text)}")])


def _hypothesis(entry: Entry, p: Hypothesis, state: ScopeState) -> Outgoing:
    marker = ":robot_face: " if entry.actor.type == "agent" else ":bulb: "
    conf = f" _(confidence {p.confidence:.0%})_" if p.confidence is not None else ""
    blocks = [section(f"{marker}*Hypothesis* — {esc(p.text)}{conf}"), by(entry), *finding_blocks(entry, state.scope)]
    return Outgoing(f"Hypothesis: {esc(p.text)}", blocks)


def _decision(entry: Entry, p: Decision, _state: ScopeState) -> Outgoing:
    return Outgoing(f"Decision: {esc(p.text)}", [section(f":scales: *Decision* — {esc(p.text)}"), by(entry)])


def _goal(_entry: Entry, p: Goal, _state: ScopeState) -> Outgoing:
    return Outgoing(f"Goal: {esc(p.text)}", [section(f":dart: *Goal* — {esc(p.text)}")])


def _constraint(_entry: Entry, p: Constraint, _state: ScopeState) -> Outgoing:
    return Outgoing(f"Constraint: {esc(p.text)}", [section(f":no_entry: *Constraint* — {esc(p.text)}")])


def _status(entry: Entry, p: StatusChanged, _state: ScopeState) -> Outgoing:
    extra = f" — {esc(p.summary)}" if p.summary else ""
    line = f"{STATUS_EMOJI.get(p.status, '')} {_who(entry)} set status to *{esc(p.status)}*{extra}"
    return Outgoing(f"Status: {esc(p.status)}", [context(line)])


def _severity(entry: Entry, p: SeverityChanged, _state: ScopeState) -> Outgoing:
    line = f"{_who(entry)} set severity to *{severity_label(p.severity)}*"
    return Outgoing(f"Severity: SEV{p.severity}", [context(line)])


def _role(entry: Entry, p: RoleAssigned, _state: ScopeState) -> Outgoing:
    return Outgoing(
        f"{esc(p.role)}: {esc(p.user_id)}", [context(f"{_who(entry)} assigned *{esc(p.role)}* to <@{esc(p.user_id)}>")]
    )


def _linked(_entry: Entry, p: ScopeLinked, _state: ScopeState) -> Outgoing | None:
    if p.relation in QUIET_RELATIONS:  # a split alert notification's links: one line in the parent says it all
        return None
    reason = f" — {esc(p.reason)}" if p.reason else ""
    return Outgoing(f"Linked {esc(p.scope)}", [context(f":link: Linked `{esc(p.scope)}` ({esc(p.relation)}){reason}")])


def _suggestion(entry: Entry, p: Suggestion, state: ScopeState) -> Outgoing:
    value = f"{state.scope}|{p.suggestion_id}"
    rationale = f"\n_{esc(p.rationale)}_" if p.rationale else ""
    buttons = {
        "type": "actions",
        "block_id": f"suggestion:{p.suggestion_id}",
        "elements": [
            button("Accept", Action.SUGGESTION_ACCEPT, value, style="primary"),
            button("Dismiss", Action.SUGGESTION_DISMISS, value),
        ],
    }
    return Outgoing(
        f"Suggestion: {esc(p.text)}",
        [
            section(f":robot_face: *Suggestion* — {esc(p.text)}" + rationale),
            buttons,
            context("React with :white_check_mark: to accept or :x: to dismiss."),
            *finding_blocks(entry, state.scope),
        ],
    )


def _feedback(_entry: Entry, p: SuggestionFeedback, _state: ScopeState) -> Outgoing:
    line = f"Suggestion `{esc(p.suggestion_id)}` *{p.verdict}*" + (f" by <@{esc(p.user_id)}>" if p.user_id else "")
    return Outgoing(f"Suggestion {p.verdict}", [context(line)])


def _retracted(entry: Entry, p: Retracted, _state: ScopeState) -> Outgoing:
    taken = f"#{entry.refs[0]}" if entry.refs else "an entry"
    what = f"the evidence {taken}" if p.what == "evidence" else f"the feedback {taken} on `{esc(p.suggestion_id)}`"
    who = _who(entry)
    line = f":leftwards_arrow_with_hook: *{who}* took back {what}" + (f": {esc(p.text)}" if p.text else "")
    return Outgoing(f"{who} took back {what}", [context(line)])


def _answer(_entry: Entry, p: Answer, _state: ScopeState) -> Outgoing:
    return Outgoing(f"Answer: {esc(p.text)}", [section(f":robot_face: *{esc(p.question[:200])}*\n{esc(p.text)}")])


def _obligation(entry: Entry, p: ObligationOpened, state: ScopeState) -> Outgoing:
    cond = "".join(f"\n• {esc(c)}" for c in p.conditions)
    head = section(f":clipboard: *Obligation* `{esc(p.obligation_id)}` — {esc(p.text)}{cond}")
    return Outgoing(f"Obligation: {esc(p.text)}", [head, *finding_blocks(entry, state.scope)])


def _finding_answer(entry: Entry, p: FindingAnswer, _state: ScopeState) -> Outgoing:
    icon = {
        "confirmed": ":white_check_mark:",
        "ruled_out": ":x:",
        "taken": ":raising_hand:",
        "done": ":ballot_box_with_check:",
    }
    line = f"{icon.get(p.verdict, ':speech_balloon:')} {_who(entry)} {p.verdict.replace('_', ' ')} {esc(p.finding_kind)} #{p.finding}"
    what = esc(p.suspect_scope or p.obligation_id)
    return Outgoing(line, [context(line + (f" (`{what}`)" if what else ""))])


def _proposal(entry: Entry, p: ProposalMade, state: ScopeState) -> Outgoing:
    return proposal_message(p, state, entry)


def _approval(_entry: Entry, p: Approval, _state: ScopeState) -> Outgoing:
    verb = "approved" if p.decision == "approved" else "denied"
    reason = f" — {esc(p.reason)}" if p.reason else ""
    icon = ":white_check_mark:" if verb == "approved" else ":no_entry_sign:"
    return Outgoing(
        f"{esc(p.proposal_id)} {verb}", [context(f"{icon} <@{esc(p.approver)}> {verb} `{esc(p.proposal_id)}`{reason}")]
    )


def _closed(_entry: Entry, p: ProposalClosed, _state: ScopeState) -> Outgoing:
    line = f":hourglass: Proposal `{esc(p.proposal_id)}` {p.outcome}" + (f": {esc(p.reason)}" if p.reason else "")
    return Outgoing(f"{esc(p.proposal_id)} {p.outcome}", [context(line)])


def _started(_entry: Entry, p: ActionStarted, _state: ScopeState) -> Outgoing:
    approved = f", approved by {', '.join(f'<@{esc(a)}>' for a in p.approvers)}" if p.approvers else ""
    line = f":gear: Run `{esc(p.run_id)}` started *{esc(p.action)}* under fence {p.fence}" + approved
    return Outgoing(f"Running {esc(p.action)}", [context(line)])


def _result(_entry: Entry, p: ActionResult, _state: ScopeState) -> Outgoing:
    detail = f": {esc(p.error)}" if p.error else ""
    note = " — *outcome unknown; recorded as an open question*" if p.outcome == "abandon_uncertain" else ""
    line = f"{RUN_ICONS[p.outcome]} Run `{esc(p.run_id)}` ({esc(p.action)}) *{p.outcome}*{detail}{note}"
    return Outgoing(f"Run {esc(p.run_id)} {p.outcome}", [section(line)])


def _compensated(_entry: Entry, p: EffectCompensated, _state: ScopeState) -> Outgoing:
    line = f":leftwards_arrow_with_hook: Run `{esc(p.compensating_run)}` compensated `{esc(p.original_run)}`"
    return Outgoing("Compensated", [context(line)])


def _verification(_entry: Entry, p: Verification, _state: ScopeState) -> Outgoing:
    icon = VERIFICATION_ICONS[p.outcome]
    line = f"{icon} *Verification {p.outcome}* — expected: {esc(p.expected)}\nobserved: {esc(p.observed)}"
    return Outgoing(f"Verification {p.outcome}", [section(line)])


def _fence(_entry: Entry, p: FenceRejected, _state: ScopeState) -> Outgoing:
    line = f":shield: Rejected a stale write on `{esc(p.obligation_id)}` (fence {p.fence} < {p.current_fence})"
    return Outgoing("Stale write rejected", [context(line)])


def _delivery(_entry: Entry, p: DeliveryFailed, _state: ScopeState) -> Outgoing | None:
    if p.sender == "slack":
        return None  # saying it on Slack would fail the same way
    line = f":warning: Delivery of #{p.seq} to {esc(p.sender)} failed after {p.attempts} attempts: {esc(p.error[:200])}"
    return Outgoing("Delivery failed", [context(line)])


def _turn(_entry: Entry, p: AgentTurn, _state: ScopeState) -> Outgoing | None:
    if p.outcome != "failed":
        return None
    line = f":warning: The {esc(p.reasoner)} turn failed ({esc(p.error[:150])}); the next turn will try again."
    return Outgoing("Agent turn failed", [context(line)])


# Not here, on purpose: ApprovalRefused (the person was told ephemerally; the attempt is in the log and the
# report) and ReportExported (the upload itself is the message); nor kinds that only change the header.
REPLIES: dict[type[Payload], Renderer] = {
    Message: _message,
    Observation: _observation,
    Hypothesis: _hypothesis,
    Decision: _decision,
    Goal: _goal,
    Constraint: _constraint,
    StatusChanged: _status,
    SeverityChanged: _severity,
    RoleAssigned: _role,
    ScopeLinked: _linked,
    Suggestion: _suggestion,
    SuggestionFeedback: _feedback,
    Retracted: _retracted,  # a 📌, pin or ✅/❌ taken back: people see it leave the record
    Answer: _answer,
    ObligationOpened: _obligation,
    ProposalMade: _proposal,
    Approval: _approval,
    ProposalClosed: _closed,
    ActionStarted: _started,
    ActionResult: _result,
    EffectCompensated: _compensated,
    Verification: _verification,
    FenceRejected: _fence,
    DeliveryFailed: _delivery,
    AgentTurn: _turn,
    FindingAnswer: _finding_answer,  # a person's verdict on an agent finding, in the thread
}
