"""The rules reasoner's status rule (rule 6 in core/agents/rules.py): a SEV1/SEV2 incident with no public update for
``status_update_after`` gets a proposal of the configured status action — once — and nothing when the action is not
configured or the severity is lower."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from decklog.core.agents import ActionInfo, RuleBasedReasoner
from decklog.core.entries import Actor, NewEntry
from tests.unit.test_agents import SCOPE, Catalog, World, alerting_incident, opened_world


@pytest.fixture
async def w(tmp_path: Path) -> AsyncIterator[World]:
    async with opened_world(tmp_path) as world:
        yield world


STATUS = ActionInfo("public_status", "post on the status page", "R2", {}, ())


class LoggingProposer:
    """Records each proposal in the log as the desk would (waiting for approval), so later turns see it."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.calls: list[dict[str, Any]] = []

    async def propose(
        self, scope: str, *, action: str, params: dict[str, Any], rationale: str, obligation_id: str, actor: Actor
    ) -> str:
        pid = f"p-{len(self.calls) + 1}"
        self.calls.append({"action": action, "params": params, "rationale": rationale})
        payload = {"proposal_id": pid, "action": action, "params": params, "risk": "R2", "proposer": actor.id}
        await self.w.store.append(scope, [NewEntry.make("proposal", actor, payload)])
        return f"parked {pid} for approval (R2)"


def rules(**kw: Any) -> RuleBasedReasoner:
    return RuleBasedReasoner(status_action="public_status", status_update_after_minutes=30, **kw)


async def test_a_quiet_sev2_gets_one_status_page_proposal_of_the_configured_action(w: World) -> None:
    await alerting_incident(w, link=False)  # SEV2, firing, no linked change
    proposer = LoggingProposer(w)
    runtime = w.runtime(rules(), proposer=proposer, catalog=Catalog(STATUS))
    await runtime.run_turn(SCOPE, force=True)
    assert proposer.calls == []  # not quiet for 30 minutes yet
    w.clock.advance(minutes=31)
    await runtime.run_turn(SCOPE, trigger="wake", force=True)
    assert [c["action"] for c in proposer.calls] == ["public_status"]
    call = proposer.calls[0]
    assert call["params"]["status"] == "investigating" and "Payments 5xx" in call["params"]["message"]
    assert call["rationale"].startswith("SEV2 with no public update for 3")
    w.clock.advance(minutes=10)
    await runtime.run_turn(SCOPE, trigger="wake", force=True)
    assert len(proposer.calls) == 1  # one is waiting: not proposed again


async def test_no_status_proposal_below_sev2_or_without_the_action(w: World) -> None:
    await alerting_incident(w, link=False)
    proposer = LoggingProposer(w)
    runtime = w.runtime(rules(), proposer=proposer, catalog=Catalog())  # the status action is not configured
    w.clock.advance(minutes=31)
    await runtime.run_turn(SCOPE, force=True)
    assert proposer.calls == []
    await w.service.set_severity(SCOPE, 3, Actor.human("U0ALICE", "alice"))
    runtime = w.runtime(rules(), proposer=proposer, catalog=Catalog(STATUS))
    w.clock.advance(minutes=31)
    await runtime.run_turn(SCOPE, trigger="wake", force=True)
    assert proposer.calls == []  # SEV3: no public update is proposed
