"""A proposed action in the thread: parked for approval (with Approve / Deny), and updated once it is decided."""

from __future__ import annotations

from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.render.blocks import Block, Outgoing, button, context, date, esc, section
from decklog.core.entries import Entry, ProposalMade
from decklog.core.state import ScopeState


def by(entry: Entry) -> Block:
    """Who recorded an entry (or that an agent inferred it), and its seq."""
    tag = "agent-inferred" if entry.actor.type == "agent" else "recorded by"
    return context(f"{tag} {esc(entry.actor.label())} · #{entry.seq}")


def _head(p: ProposalMade) -> list[Block]:
    need = {"R1": "runs without approval", "R4": "never runs (denied by policy)"}.get(
        p.risk, f"needs {p.approvals_required} approver(s)" + (" other than the proposer" if p.risk == "R3" else "")
    )
    return [
        section(
            f":raised_hand: *{esc(p.action)}* `{esc(p.proposal_id)}` — risk *{p.risk}*, {need}\n```{esc(p.preview[:2500])}```"
        )
    ]


def _checks(p: ProposalMade) -> str:
    if p.checks:
        lines = [
            f"\n{':white_check_mark:' if c.get('ok') else ':x:'} `{esc(str(c.get('name')))}` — {esc(str(c.get('detail', '')))}"
            for c in p.checks
        ]
        return "".join(lines)
    return "".join(f"\n• `{esc(c)}`" for c in p.safety_conditions) or "\n• _none_"


def _facts(p: ProposalMade, entry: Entry | None) -> list[str]:
    facts = []
    if entry is not None and entry.refs:
        facts.append("Evidence: " + ", ".join(f"#{r}" for r in entry.refs))
    if p.compensates_run:
        facts.append(f"Compensates `{esc(p.compensates_run)}`")
    if p.args_hash:
        facts.append(f"args `{esc(p.args_hash[:19])}…`")
    return facts


def _decide_controls(p: ProposalMade, state: ScopeState) -> list[Block]:
    value = f"{state.scope}|{p.proposal_id}"
    return [
        {
            "type": "actions",
            "block_id": f"proposal:{p.proposal_id}",
            "elements": [
                button("Approve", Action.PROPOSAL_APPROVE, value, style="primary"),
                button("Deny", Action.PROPOSAL_DENY, value, style="danger"),
            ],
        },
        context(
            f"Or: `@decklog approve {esc(p.proposal_id)}` / `@decklog deny {esc(p.proposal_id)} [reason]` · "
            f"expires {date(p.expires_at, '{time}')}"
        ),
    ]


def proposal_message(p: ProposalMade, state: ScopeState, entry: Entry | None = None) -> Outgoing:
    """A parked action: preview, risk, why, safety conditions as checked, evidence, and Approve / Deny."""
    prop = state.proposals.get(p.proposal_id)
    blocks = _head(p)
    why = f"*Why*: {esc(p.rationale) or '—'}"
    if p.reason and p.status != "denied":
        why += f"\n_{esc(p.reason)}_"
    blocks.append(section(f"{why}\n*Safety conditions* (as proposed; checked again before it runs){_checks(p)}"))
    facts = _facts(p, entry)
    if facts:
        blocks.append(context(" · ".join(facts)))
    waiting = p.status == "waiting_for_approval" and (prop is None or prop.status == "waiting_for_approval")
    if waiting:
        blocks.extend(_decide_controls(p, state))
    elif p.status == "denied":
        blocks.append(
            context(f":no_entry_sign: *Denied by policy*: {esc(p.reason or 'R4 is never offered for approval')}")
        )
    elif p.status == "approved" and p.risk == "R1":
        blocks.append(context(":zap: R1: runs now, without approval"))
    if entry is not None:
        blocks.append(by(entry))
    action = esc(p.action)
    return Outgoing(f"Approval needed: {action} ({p.risk})" if waiting else f"Proposal {action}", blocks)


def proposal_outcome(p: ProposalMade, outcome: str, who: str, *, details: tuple[str, ...] = ()) -> Outgoing:
    """The proposal message, updated in place once it is decided: the outcome, then how the run went."""
    blocks = _head(p)
    blocks.append(section(f"*Safety conditions* (as proposed){_checks(p)}"))
    blocks.append(section(f"*{esc(outcome)}*" + (f" by {who}" if who else "")))
    if details:
        blocks.append(context("\n".join(details)[:3000]))
    return Outgoing(f"{esc(p.action)} {esc(p.proposal_id)}: {esc(outcome)}", blocks)
