"""A process that dies after a turn recorded its obligation and proposal, and before the proposal reached the desk,
leaves the obligation with nothing that warrants another turn. At boot the recorded proposal is handed to the desk
again: once, however many replicas boot, and never when it did reach the desk."""

from __future__ import annotations

from pathlib import Path

from decklog.core.agents.recover_proposals import recover_proposals
from decklog.core.entries import Actor, NewEntry
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.unit.test_agents import RecordingProposer

AGENT = Actor.agent("rules", "decklog rules")
ALICE = Actor.human("U0ALICE", "alice")
SCOPE = "incident/lost-proposal"
CALL = {"tool": "propose", "action": "rollback_deploy", "params": {"service": "api"}, "obligation_id": "ob-1"}


async def _recorded_turn(store: SqliteLogStore) -> None:
    """What a turn's one append leaves: its obligation and its agent_turn naming the proposal (then the crash)."""
    await store.append(SCOPE, [NewEntry.make("declared", ALICE, {"title": "api 5xx"})], create=True)
    ob = {"obligation_id": "ob-1", "text": "roll back api", "action": "rollback_deploy", "params": {"service": "api"}}
    turn = {"reasoner": "rules", "outcome": "ok", "tool_calls": [CALL]}
    await store.append(SCOPE, [NewEntry.make("obligation_opened", AGENT, ob), NewEntry.make("agent_turn", AGENT, turn)])


async def test_a_lost_proposal_is_proposed_again_once(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path)
    try:
        await _recorded_turn(store)
        desk = RecordingProposer()
        assert await recover_proposals(store, desk, AGENT, SCOPE) == 1
        assert desk.calls == [
            {
                "scope": SCOPE,
                "action": "rollback_deploy",
                "params": {"service": "api"},
                "obligation_id": "ob-1",
                "actor": AGENT.id,
            }
        ]
        other = RecordingProposer()  # a second replica booting, or this one again
        assert await recover_proposals(store, other, AGENT, SCOPE) == 0
        assert other.calls == []
    finally:
        await store.close()


async def test_a_proposal_that_reached_the_desk_is_left_alone(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path)
    try:
        await _recorded_turn(store)
        made = {
            "proposal_id": "p-1",
            "action": "rollback_deploy",
            "params": {"service": "api"},
            "risk": "R2",
            "obligation_id": "ob-1",
        }
        await store.append(SCOPE, [NewEntry.make("proposal", AGENT, made)])
        desk = RecordingProposer()
        assert await recover_proposals(store, desk, AGENT, SCOPE) == 0
        assert desk.calls == []
    finally:
        await store.close()
