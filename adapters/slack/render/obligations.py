"""Open obligations, each with a way to close it or keep it as a follow-up — the thread's notice when an
incident resolved with obligations still open (a ``reminder`` of purpose ``obligations``, core/obligations.py
``left_open``), and the answer to ``/incident obligations``.

Buttons per obligation: *Done* (``Action.OBLIGATION_DONE``, value ``<scope>|<seq of its obligation_opened>``: the
finding answer that fulfils it, core/agents/answers.py) and *Follow-up* (``Action.OBLIGATION_FOLLOW_UP``, value
``<scope>|<obligation id>``: kept as a follow-up, filed in the team's tracker).
"""

from __future__ import annotations

from collections.abc import Sequence

from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.render.blocks import Block, Outgoing, button, context, esc, section
from decklog.core.entries.lifecycle import Reminder
from decklog.core.state import ObligationState, ScopeState

#: Obligations shown with their buttons in one message (two blocks each; Slack allows 50 blocks a message).
SHOWN = 20
HOW = "Or: `@decklog done <id> [note]` / `@decklog follow-up <id>` (`/incident … <scope>` outside the thread)."


def obligation_controls(scope: str, ob: ObligationState) -> list[Block]:
    """One open obligation: its text, id and holder, then Done / Follow-up."""
    held = f" _(held by {esc(ob.holder)})_" if ob.holder else ""
    buttons = [button("Follow-up", Action.OBLIGATION_FOLLOW_UP, f"{scope}|{ob.id}")]
    if ob.opened_seq:
        buttons.insert(0, button("Done", Action.OBLIGATION_DONE, f"{scope}|{ob.opened_seq}", style="primary"))
    return [
        section(f"• *{esc(' '.join(ob.text.split()))[:2800]}* `{ob.id}`{held}"),
        {"type": "actions", "block_id": f"open-obligation:{ob.id}", "elements": buttons},
    ]


def _listed(scope: str, obs: Sequence[ObligationState]) -> list[Block]:
    blocks = [b for ob in obs[:SHOWN] for b in obligation_controls(scope, ob)]
    if len(obs) > SHOWN:
        blocks.append(context(f"… and {len(obs) - SHOWN} more: `@decklog obligations` lists them."))
    return blocks


def left_open_notice(p: Reminder, state: ScopeState) -> Outgoing:
    """The resolve's notice: the obligations it left open, with their buttons while they are still open."""
    n = len(p.obligations)
    head = (
        f":clipboard: *Resolved with {n} obligation{'s' if n != 1 else ''} still open.* Close each one (*Done*), "
        "or keep it as a follow-up for the team's tracker (*Follow-up*)."
    )
    still = [state.obligations[o] for o in p.obligations if o in state.obligations]
    blocks = [section(head), *_listed(state.scope, still)]
    closed = [o for o in p.obligations if o not in state.obligations]
    if closed:
        blocks.append(context("Closed since: " + ", ".join(f"`{o}`" for o in closed)))
    blocks.append(context(HOW))
    return Outgoing(esc(p.text), blocks)


def open_obligations(state: ScopeState) -> Outgoing:
    """``/incident obligations``: every open obligation of the scope, with its buttons."""
    obs = list(state.obligations.values())
    if not obs:
        return Outgoing(f"No open obligations in `{state.scope}`.")
    head = f"*{len(obs)} open obligation{'s' if len(obs) != 1 else ''}* in `{state.scope}`"
    return Outgoing(head, [section(head), *_listed(state.scope, obs), context(HOW)])
