"""Block Kit rendering: pure functions from core data (state, entries, index rows) to Slack message payloads.

Nothing here does I/O. The sender decides *when* to post; this module decides *what it looks like*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters.slack.ids import Action, DeclareField, View
from core.clock import parse_iso
from core.entries import (
    ActionResult,
    ActionStarted,
    AgentTurn,
    Answer,
    Approval,
    ApprovalRefused,
    Constraint,
    Decision,
    DeliveryFailed,
    EffectCompensated,
    Entry,
    FenceRejected,
    Goal,
    Hypothesis,
    Message,
    ObligationOpened,
    Observation,
    ProposalClosed,
    ProposalMade,
    ReportExported,
    RoleAssigned,
    ScopeLinked,
    SeverityChanged,
    StatusChanged,
    Suggestion,
    SuggestionFeedback,
    Verification,
)
from core.index import ScopeRow
from core.state import ScopeState

Block = dict[str, Any]
SEV_EMOJI = {1: ":red_circle:", 2: ":large_orange_circle:", 3: ":large_yellow_circle:", 4: ":large_blue_circle:"}
STATUS_EMOJI = {
    "investigating": ":mag:",
    "identified": ":dart:",
    "mitigated": ":adhesive_bandage:",
    "monitoring": ":eyes:",
    "resolved": ":white_check_mark:",
}


@dataclass(frozen=True)
class Outgoing:
    """A message to post: fallback text (notifications, screen readers), blocks, and how it is tracked."""

    text: str
    blocks: list[Block] = field(default_factory=list)


def esc(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def _context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:3000]}]}


def _button(text: str, action_id: str, value: str, *, style: str | None = None) -> Block:
    b: Block = {"type": "button", "text": {"type": "plain_text", "text": text}, "action_id": action_id, "value": value}
    if style:
        b["style"] = style
    return b


def _date(at: str, fmt: str = "{date_short_pretty} {time}") -> str:
    if not at:
        return "—"
    ts = int(parse_iso(at).timestamp())
    return f"<!date^{ts}^{fmt}|{at[:16].replace('T', ' ')} UTC>"


def severity_label(sev: int | None) -> str:
    return f"{SEV_EMOJI.get(sev or 0, ':white_circle:')} SEV{sev}" if sev else ":white_circle: SEV?"


def severity_options() -> list[Block]:
    labels = {1: "SEV1 — critical", 2: "SEV2 — major", 3: "SEV3 — minor", 4: "SEV4 — low"}
    return [{"text": {"type": "plain_text", "text": labels[n]}, "value": str(n)} for n in (1, 2, 3, 4)]


# -- the header ---------------------------------------------------------------------------------------------------


def header(state: ScopeState) -> Outgoing:
    """The incident's header message, updated in place (``chat.update``) as its state changes."""
    sev = severity_label(state.severity)
    status = f"{STATUS_EMOJI.get(state.status, '')} {state.status}".strip()
    title = f"{sev} · {state.title}" if state.kind == "incident" else f":package: {state.title}"
    roles = ", ".join(f"{r}: <@{h.user_id}>" for r, h in sorted(state.roles.items())) or "_none yet_"
    firing = len(state.firing_alerts)
    fields = [
        {"type": "mrkdwn", "text": f"*Status*\n{status}"},
        {"type": "mrkdwn", "text": f"*Severity*\n{sev}"},
        {"type": "mrkdwn", "text": f"*Roles*\n{roles}"},
        {"type": "mrkdwn", "text": f"*Declared*\n{_date(state.created_at, '{ago}')}"},
    ]
    if state.alerts:
        repeats = f" · {state.alert_repeats} repeats" if state.alert_repeats else ""
        fields.append({"type": "mrkdwn", "text": f"*Alerts*\n{firing} firing of {len(state.alerts)}{repeats}"})
    waiting = [p for p in state.proposals.values() if p.status == "waiting_for_approval"]
    if waiting:
        fields.append({"type": "mrkdwn", "text": f"*Awaiting approval*\n{', '.join(p.id for p in waiting)}"})
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150], "emoji": True}},
        {"type": "section", "fields": fields[:10]},
    ]
    if state.obligations:
        lines = [
            f"• {esc(o.text)}" + (f" _(held by {o.holder})_" if o.holder else "") for o in state.obligations.values()
        ]
        blocks.append(_section("*Open obligations*\n" + "\n".join(lines[:8])))
    if state.linked:
        blocks.append(_context("Linked: " + ", ".join(f"`{s}`" for s in state.linked)))
    if state.kind == "incident" and state.status != "resolved":
        blocks.append(
            {
                "type": "actions",
                "block_id": f"header:{state.scope}",
                "elements": [
                    {
                        "type": "static_select",
                        "action_id": Action.SEVERITY,
                        "placeholder": {"type": "plain_text", "text": "Set severity"},
                        "options": severity_options(),
                    },
                    {
                        **_button("Resolve", Action.RESOLVE, state.scope, style="primary"),
                        "confirm": {
                            "title": {"type": "plain_text", "text": "Resolve this incident?"},
                            "text": {"type": "mrkdwn", "text": f"`{state.scope}` will be marked resolved."},
                            "confirm": {"type": "plain_text", "text": "Resolve"},
                            "deny": {"type": "plain_text", "text": "Cancel"},
                        },
                    },
                    _button("Export report", Action.EXPORT, state.scope),
                ],
            }
        )
    elif state.kind == "incident":
        blocks.append(
            {
                "type": "actions",
                "block_id": f"header:{state.scope}",
                "elements": [_button("Export report", Action.EXPORT, state.scope)],
            }
        )
    blocks.append(_context(f"`{state.scope}` · reply in this thread; everything here is recorded"))
    return Outgoing(text=f"{title} — {state.status}", blocks=blocks)


# -- thread replies -----------------------------------------------------------------------------------------------


def entry_reply(entry: Entry, state: ScopeState) -> Outgoing | None:
    """The thread reply for an entry people should see, or None for entries that stay in the log only."""
    p = entry.payload
    who = esc(entry.actor.label())
    agent = entry.actor.type == "agent"
    match p:
        case Message():
            if p.ts:  # it came from Slack: it is already there
                return None
            return Outgoing(f"{who}: {p.text}", [_section(f"*{who}* (via {entry.actor.type}): {esc(p.text)}")])
        case Observation():
            return _observation(entry, p, state)
        case Hypothesis():
            marker = ":robot_face: " if agent else ":bulb: "
            conf = f" _(confidence {p.confidence:.0%})_" if p.confidence is not None else ""
            return Outgoing(
                f"Hypothesis: {p.text}", [_section(f"{marker}*Hypothesis* — {esc(p.text)}{conf}"), _by(entry)]
            )
        case Decision():
            return Outgoing(f"Decision: {p.text}", [_section(f":scales: *Decision* — {esc(p.text)}"), _by(entry)])
        case Goal():
            return Outgoing(f"Goal: {p.text}", [_section(f":dart: *Goal* — {esc(p.text)}")])
        case Constraint():
            return Outgoing(f"Constraint: {p.text}", [_section(f":no_entry: *Constraint* — {esc(p.text)}")])
        case StatusChanged():
            extra = f" — {esc(p.summary)}" if p.summary else ""
            return Outgoing(
                f"Status: {p.status}",
                [_context(f"{STATUS_EMOJI.get(p.status, '')} {who} set status to *{p.status}*{extra}")],
            )
        case SeverityChanged():
            return Outgoing(
                f"Severity: SEV{p.severity}", [_context(f"{who} set severity to *{severity_label(p.severity)}*")]
            )
        case RoleAssigned():
            return Outgoing(f"{p.role}: {p.user_id}", [_context(f"{who} assigned *{esc(p.role)}* to <@{p.user_id}>")])
        case ScopeLinked():
            reason = f" — {esc(p.reason)}" if p.reason else ""
            return Outgoing(f"Linked {p.scope}", [_context(f":link: Linked `{p.scope}` ({p.relation}){reason}")])
        case Suggestion():
            return Outgoing(
                f"Suggestion: {p.text}",
                [
                    _section(
                        f":robot_face: *Suggestion* — {esc(p.text)}"
                        + (f"\n_{esc(p.rationale)}_" if p.rationale else "")
                    ),
                    {
                        "type": "actions",
                        "block_id": f"suggestion:{p.suggestion_id}",
                        "elements": [
                            _button(
                                "Accept", Action.SUGGESTION_ACCEPT, f"{state.scope}|{p.suggestion_id}", style="primary"
                            ),
                            _button("Dismiss", Action.SUGGESTION_DISMISS, f"{state.scope}|{p.suggestion_id}"),
                        ],
                    },
                    _context("React with :white_check_mark: to accept or :x: to dismiss."),
                ],
            )
        case SuggestionFeedback():
            return Outgoing(
                f"Suggestion {p.verdict}",
                [
                    _context(
                        f"Suggestion `{p.suggestion_id}` *{p.verdict}* by <@{p.user_id}>"
                        if p.user_id
                        else f"Suggestion `{p.suggestion_id}` *{p.verdict}*"
                    )
                ],
            )
        case Answer():
            return Outgoing(f"Answer: {p.text}", [_section(f":robot_face: *{esc(p.question[:200])}*\n{esc(p.text)}")])
        case ObligationOpened():
            cond = "".join(f"\n• {esc(c)}" for c in p.conditions)
            return Outgoing(
                f"Obligation: {p.text}",
                [_section(f":clipboard: *Obligation* `{p.obligation_id}` — {esc(p.text)}{cond}")],
            )
        case ProposalMade():
            return proposal_message(p, state, entry)
        case Approval():
            verb = "approved" if p.decision == "approved" else "denied"
            reason = f" — {esc(p.reason)}" if p.reason else ""
            return Outgoing(
                f"{p.proposal_id} {verb}",
                [
                    _context(
                        f"{':white_check_mark:' if verb == 'approved' else ':no_entry_sign:'} <@{p.approver}> {verb} `{p.proposal_id}`{reason}"
                    )
                ],
            )
        case ApprovalRefused():
            return None  # the person was told ephemerally; the attempt is in the log and the report
        case ProposalClosed():
            return Outgoing(
                f"{p.proposal_id} {p.outcome}",
                [
                    _context(
                        f":hourglass: Proposal `{p.proposal_id}` {p.outcome}"
                        + (f": {esc(p.reason)}" if p.reason else "")
                    )
                ],
            )
        case ActionStarted():
            return Outgoing(
                f"Running {p.action}",
                [
                    _context(
                        f":gear: Run `{p.run_id}` started *{p.action}* under fence {p.fence}"
                        + (f", approved by {', '.join(f'<@{a}>' for a in p.approvers)}" if p.approvers else "")
                    )
                ],
            )
        case ActionResult():
            icon = {
                "applied": ":white_check_mark:",
                "refused": ":no_entry_sign:",
                "uncertain": ":grey_question:",
                "abandon_uncertain": ":warning:",
                "not_applied": ":heavy_minus_sign:",
                "skipped": ":double_vertical_bar:",
                "failed": ":x:",
            }[p.outcome]
            detail = f": {esc(p.error)}" if p.error else ""
            note = " — *outcome unknown; recorded as an open question*" if p.outcome == "abandon_uncertain" else ""
            return Outgoing(
                f"Run {p.run_id} {p.outcome}",
                [_section(f"{icon} Run `{p.run_id}` ({p.action}) *{p.outcome}*{detail}{note}")],
            )
        case EffectCompensated():
            return Outgoing(
                "Compensated",
                [_context(f":leftwards_arrow_with_hook: Run `{p.compensating_run}` compensated `{p.original_run}`")],
            )
        case Verification():
            icon = {"verified": ":white_check_mark:", "failed": ":x:", "inconclusive": ":grey_question:"}[p.outcome]
            return Outgoing(
                f"Verification {p.outcome}",
                [
                    _section(
                        f"{icon} *Verification {p.outcome}* — expected: {esc(p.expected)}\nobserved: {esc(p.observed)}"
                    )
                ],
            )
        case FenceRejected():
            return Outgoing(
                "Stale write rejected",
                [
                    _context(
                        f":shield: Rejected a stale write on `{p.obligation_id}` (fence {p.fence} < {p.current_fence})"
                    )
                ],
            )
        case DeliveryFailed():
            if p.sender == "slack":
                return None  # saying it on Slack would fail the same way
            return Outgoing(
                "Delivery failed",
                [
                    _context(
                        f":warning: Delivery of #{p.seq} to {p.sender} failed after {p.attempts} attempts: {esc(p.error[:200])}"
                    )
                ],
            )
        case ReportExported():
            return None  # the upload itself is the message
        case AgentTurn():
            if p.outcome == "failed":
                return Outgoing(
                    "Agent turn failed",
                    [
                        _context(
                            f":warning: The {esc(p.reasoner)} turn failed ({esc(p.error[:150])}); the next turn will try again."
                        )
                    ],
                )
            return None
    return None


def _by(entry: Entry) -> Block:
    tag = "agent-inferred" if entry.actor.type == "agent" else "recorded by"
    return _context(f"{tag} {esc(entry.actor.label())} · #{entry.seq}")


def _observation(entry: Entry, p: Observation, state: ScopeState) -> Outgoing | None:
    if p.fingerprint:
        # No message per alert: the alert that opened the incident is its header, and every later one (a new
        # fingerprint joining, a repeat, a resolve) is counted on the header and in the per-minute summary below.
        return None
    if p.source == "decklog:alerts" and isinstance(p.data.get("summary"), dict):
        return _alert_summary(p)
    icon = ":package:" if p.source == "change" else ":mag:"
    return Outgoing(f"Observed: {p.text}", [_section(f"{icon} {esc(p.text)}"), _by(entry)])


def _alert_summary(p: Observation) -> Outgoing:
    """One concise line for an incident's alerts of the last minute (``core.alerts.summary``)."""
    counts = p.data["summary"]
    icon = ":white_check_mark:" if counts.get("total") and not counts.get("firing") else ":bell:"
    return Outgoing(p.text, [_context(f"{icon} {esc(p.text)}")])


def _proposal_head(p: ProposalMade) -> list[Block]:
    need = {"R1": "runs without approval", "R4": "never runs (denied by policy)"}.get(
        p.risk, f"needs {p.approvals_required} approver(s)" + (" other than the proposer" if p.risk == "R3" else "")
    )
    return [
        _section(f":raised_hand: *{p.action}* `{p.proposal_id}` — risk *{p.risk}*, {need}\n```{p.preview[:2500]}```")
    ]


def _proposal_checks(p: ProposalMade) -> str:
    if p.checks:
        lines = [
            f"\n{':white_check_mark:' if c.get('ok') else ':x:'} `{esc(str(c.get('name')))}` — {esc(str(c.get('detail', '')))}"
            for c in p.checks
        ]
        return "".join(lines)
    return "".join(f"\n• `{esc(c)}`" for c in p.safety_conditions) or "\n• _none_"


def proposal_message(p: ProposalMade, state: ScopeState, entry: Entry | None = None) -> Outgoing:
    """A parked action: preview, risk, why, safety conditions as checked, evidence, and Approve / Deny."""
    prop = state.proposals.get(p.proposal_id)
    blocks = _proposal_head(p)
    why = f"*Why*: {esc(p.rationale) or '—'}"
    if p.reason and p.status != "denied":
        why += f"\n_{esc(p.reason)}_"
    blocks.append(
        _section(f"{why}\n*Safety conditions* (as proposed; checked again before it runs){_proposal_checks(p)}")
    )
    facts = []
    if entry is not None and entry.refs:
        facts.append("Evidence: " + ", ".join(f"#{r}" for r in entry.refs))
    if p.compensates_run:
        facts.append(f"Compensates `{p.compensates_run}`")
    if p.args_hash:
        facts.append(f"args `{p.args_hash[:19]}…`")
    if facts:
        blocks.append(_context(" · ".join(facts)))
    waiting = p.status == "waiting_for_approval" and (prop is None or prop.status == "waiting_for_approval")
    if waiting:
        value = f"{state.scope}|{p.proposal_id}"
        blocks.append(
            {
                "type": "actions",
                "block_id": f"proposal:{p.proposal_id}",
                "elements": [
                    _button("Approve", Action.PROPOSAL_APPROVE, value, style="primary"),
                    _button("Deny", Action.PROPOSAL_DENY, value, style="danger"),
                ],
            }
        )
        blocks.append(
            _context(
                f"Or: `@decklog approve {p.proposal_id}` / `@decklog deny {p.proposal_id} [reason]` · "
                f"expires {_date(p.expires_at, '{time}')}"
            )
        )
    elif p.status == "denied":
        blocks.append(
            _context(f":no_entry_sign: *Denied by policy*: {esc(p.reason or 'R4 is never offered for approval')}")
        )
    elif p.status == "approved" and p.risk == "R1":
        blocks.append(_context(":zap: R1: runs now, without approval"))
    if entry is not None:
        blocks.append(_by(entry))
    return Outgoing(f"Approval needed: {p.action} ({p.risk})" if waiting else f"Proposal {p.action}", blocks)


def proposal_outcome(p: ProposalMade, outcome: str, who: str, *, details: tuple[str, ...] = ()) -> Outgoing:
    """The proposal message, updated in place once it is decided: the outcome, then how the run went."""
    blocks = _proposal_head(p)
    blocks.append(_section(f"*Safety conditions* (as proposed){_proposal_checks(p)}"))
    blocks.append(_section(f"*{esc(outcome)}*" + (f" by {who}" if who else "")))
    if details:
        blocks.append(_context("\n".join(details)[:3000]))
    return Outgoing(f"{p.action} {p.proposal_id}: {outcome}", blocks)


# -- ephemeral helpers, modals, App Home ------------------------------------------------------------------------


def usage(text: str, reason: str = "") -> list[Block]:
    """The help ``text`` (``adapters.slack.subcommands.usage_text``), after a warning saying what was wrong."""
    blocks = [_section(f":warning: {esc(reason)}")] if reason else []
    return [*blocks, _section(text)]


def picker(rows: list[ScopeRow], command_text: str) -> list[Block]:
    """Which incident? An ephemeral select of open incidents that re-runs the command with the choice."""
    if not rows:
        return [_section("There is no open incident. `/incident declare <title>` opens one.")]
    options = [
        {
            "text": {"type": "plain_text", "text": f"{r.title[:60]} ({r.id})"[:75]},
            "value": f"{r.id} {command_text}"[:150],
        }
        for r in rows[:100]
    ]
    return [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"Which incident is `{esc(command_text)}` for?"},
            "accessory": {
                "type": "static_select",
                "action_id": Action.PICK_SCOPE,
                "placeholder": {"type": "plain_text", "text": "Open incidents"},
                "options": options,
            },
        }
    ]


def declare_modal(channel_id: str, title: str = "") -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": View.DECLARE,
        "private_metadata": channel_id,
        "title": {"type": "plain_text", "text": "Declare an incident"},
        "submit": {"type": "plain_text", "text": "Declare"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": DeclareField.TITLE_BLOCK,
                "label": {"type": "plain_text", "text": "What is happening?"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": DeclareField.TITLE,
                    "initial_value": title,
                    "max_length": 150,
                    "placeholder": {"type": "plain_text", "text": "Elevated 5xx on payments"},
                },
            },
            {
                "type": "input",
                "block_id": DeclareField.SEVERITY_BLOCK,
                "optional": True,
                "label": {"type": "plain_text", "text": "Severity"},
                "element": {"type": "static_select", "action_id": DeclareField.SEVERITY, "options": severity_options()},
            },
            {
                "type": "input",
                "block_id": DeclareField.OPTIONS_BLOCK,
                "optional": True,
                "label": {"type": "plain_text", "text": "Options"},
                "element": {
                    "type": "checkboxes",
                    "action_id": DeclareField.OPTIONS,
                    "options": [
                        {
                            "text": {"type": "plain_text", "text": "Create a dedicated channel"},
                            "value": "dedicated_channel",
                        }
                    ],
                },
            },
        ],
    }


def home_view(rows: list[ScopeRow], pending: list[tuple[ScopeRow, list[tuple[str, str, str]]]]) -> dict[str, Any]:
    """App Home: open incidents (severity, status, age, link to the thread) and pending approvals."""
    blocks: list[Block] = [{"type": "header", "text": {"type": "plain_text", "text": "Open incidents"}}]
    if not rows:
        blocks.append(_section("_No open incidents._ :sunny:"))
    for r in rows[:40]:
        link = f"<{r.permalink}|{esc(r.title)}>" if r.permalink else esc(r.title)
        blocks.append(
            _section(
                f"{severity_label(r.severity)} · *{link}*\n`{r.id}` · {r.status} · declared {_date(r.created_at, '{ago}')}"
            )
        )
    blocks.append({"type": "divider"})
    blocks.append({"type": "header", "text": {"type": "plain_text", "text": "Pending approvals"}})
    if not pending:
        blocks.append(_section("_Nothing is waiting for approval._"))
    for row, proposals in pending:
        for pid, action, risk in proposals:
            blocks.append(
                {
                    **_section(f"*{action}* `{pid}` · {risk} · `{row.id}`"),
                    "accessory": _button("Approve", Action.PROPOSAL_APPROVE, f"{row.id}|{pid}", style="primary"),
                }
            )
    blocks.append(_context("decklog — every entry is in the scope's log; `/incident help` for commands."))
    return {"type": "home", "blocks": blocks[:100]}
