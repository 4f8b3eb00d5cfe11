"""A proposed action in the thread: parked for approval (with Approve / Deny), and updated once it is decided
(``proposal_rendering``: the message as of a proposal's approvals, closing and runs)."""

from __future__ import annotations

from collections.abc import Sequence

from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.render.blocks import Block, Outgoing, button, context, date, esc, section
from decklog.core.entries import ActionResult, ActionStarted, Approval, Entry, ProposalClosed, ProposalMade
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


def proposal_rendering(made: Entry, entries: Sequence[Entry], state: ScopeState) -> Outgoing:
    """The proposal's message as of now: still parked (with buttons), or its outcome and its runs."""
    prop = made.payload
    assert isinstance(prop, ProposalMade)
    pid = prop.proposal_id
    approvals = [e.payload for e in entries if isinstance(e.payload, Approval) and e.payload.proposal_id == pid]
    closed = [e.payload for e in entries if isinstance(e.payload, ProposalClosed) and e.payload.proposal_id == pid]
    runs = [e.payload for e in entries if isinstance(e.payload, ActionStarted) and e.payload.proposal_id == pid]
    run_ids = {r.run_id for r in runs}
    results = [e.payload for e in entries if isinstance(e.payload, ActionResult) and e.payload.run_id in run_ids]
    yes = [a for a in approvals if a.decision == "approved"]
    details = [f":white_check_mark: approved by <@{a.approver}>" for a in yes]
    for run in runs:
        details.append(f":gear: run `{run.run_id}` under fence {run.fence} (key `{run.idempotency_key}`)")
    for res in results:
        digest = f" · effect `{res.effect_digest[:19]}…`" if res.effect_digest else ""
        why = f": {esc(res.error[:200])}" if res.error else ""
        details.append(f"run `{res.run_id}` *{res.outcome}*{' (reconciled)' if res.reconciled else ''}{digest}{why}")
    who = ", ".join(f"<@{a.approver}>" for a in yes)
    current = state.proposals.get(pid)
    if not closed and not results and current is not None and current.status == "waiting_for_approval":
        out = proposal_message(prop, state, made)
        if yes:
            extra = context(f"Approved so far by {who} ({len(yes)} of {prop.approvals_required})")
            out = Outgoing(out.text, [*out.blocks[:-1], extra, out.blocks[-1]])
        return out
    denied = next((a for a in approvals if a.decision == "denied"), None)
    if closed:
        c = closed[-1]
        outcome = {"expired": "Expired", "voided": "Void", "superseded": "Superseded", "withdrawn": "Withdrawn"}[
            c.outcome
        ]
        return proposal_outcome(prop, f"{outcome}: {c.reason}" if c.reason else outcome, "", details=tuple(details))
    if denied is not None:
        reason = f" — {denied.reason}" if denied.reason else ""
        return proposal_outcome(prop, f"Denied{reason}", f"<@{denied.approver}>", details=tuple(details))
    final = results[-1].outcome if results else ""
    outcome = {
        "": "Approved — running" if runs else "Approved — starting",
        "applied": "Approved and applied",
        "refused": "Approved — refused by the target; nothing changed",
        "failed": "Approved — the target could not be reached; nothing changed",
        "not_applied": "Approved — not applied",
        "skipped": "Approved — not run: the safety conditions no longer held",
        "uncertain": "Approved — outcome uncertain; asking the target",
        "abandon_uncertain": "Approved — outcome unknown (recorded as an open question; not retried)",
    }.get(final, f"Approved — {final}")
    if prop.risk == "R1":
        outcome = outcome.replace("Approved and applied", "Applied").replace("Approved — ", "")
    return proposal_outcome(prop, outcome, who, details=tuple(details))
