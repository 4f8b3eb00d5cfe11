"""The ``actions`` outbox topic: runs what was approved, and verifies by the rules when nothing else does.

Delivery is at least once; the fence and the idempotency key of each run make that one effect (the desk's
``execute`` with the outbox row as the scheduler receipt). A verification obligation opened, or an alert resolved,
asks the rule-based verifier to look, unless the agents verify in their own turns (``verify_here`` False).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from decklog.core.actions.desk import ActionDesk
from decklog.core.entries import Approval, Entry, ObligationOpened, Observation, ProposalMade
from decklog.core.errors import DecklogError

log = logging.getLogger("decklog.actions")


class ActionsSender:
    """Outbox topic ``actions``: runs what was approved; verifies by the rules when nothing else does."""

    name = "actions"
    batch_size = 32

    def __init__(self, desk: ActionDesk, *, verify_here: bool) -> None:
        self.desk = desk
        self.verify_here = verify_here
        """The rule-based verifier acts on new evidence unless the agents part does verification turns."""

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        verify = False
        for entry in entries:
            p = entry.payload
            if (isinstance(p, ProposalMade) and p.status == "approved") or (
                isinstance(p, Approval) and p.decision == "approved"
            ):
                await self._run(scope, p.proposal_id, entry.seq)
            elif (isinstance(p, ObligationOpened) and p.purpose == "verification") or (
                isinstance(p, Observation) and p.alert_status == "resolved"
            ):
                verify = True
        if verify and self.verify_here:
            for line in await self.desk.verify(scope):
                log.info("actions: verified %s %s", scope, line)

    async def _run(self, scope: str, proposal_id: str, seq: int) -> None:
        try:
            report = await self.desk.execute(scope, proposal_id, receipt=f"outbox:{scope}#{seq}")
        except DecklogError as exc:
            log.info("actions: %s %s could not run: %s", scope, proposal_id, exc)
            return
        if report.status != "not_runnable":
            log.info("actions: %s %s → %s %s %s", scope, proposal_id, report.status, report.run_id, report.detail)
