"""Keeps a proposal's Slack message in step with what happened to it: approvals, closing, runs and their results
(an updater of the Slack sender: the message is edited in place as each of these entries is delivered)."""

from __future__ import annotations

from decklog.adapters.slack.render.blocks import Outgoing
from decklog.adapters.slack.render.proposals import proposal_rendering
from decklog.core.entries import ActionResult, ActionStarted, Approval, Entry, ProposalClosed, ProposalMade
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore


class ProposalMessages:
    """Keeps a proposal's Slack message in step with what happened to it (an updater of the Slack sender)."""

    KINDS = ("proposal", "approval", "proposal_closed", "action_started", "action_result")

    def __init__(self, store: LogStore) -> None:
        self.store = store

    async def __call__(self, scope: str, entry: Entry, state: ScopeState) -> list[tuple[int, Outgoing]]:
        p = entry.payload
        if not isinstance(p, Approval | ProposalClosed | ActionStarted | ActionResult):
            return []
        entries = await self.store.read(scope, kinds=self.KINDS)
        if isinstance(p, ActionResult):
            pid = next(
                (
                    e.payload.proposal_id
                    for e in entries
                    if isinstance(e.payload, ActionStarted) and e.payload.run_id == p.run_id
                ),
                "",
            )
        else:
            pid = p.proposal_id
        made = next((e for e in entries if isinstance(e.payload, ProposalMade) and e.payload.proposal_id == pid), None)
        if made is None or not isinstance(made.payload, ProposalMade):
            return []
        return [(made.seq, proposal_rendering(made, entries, state))]
