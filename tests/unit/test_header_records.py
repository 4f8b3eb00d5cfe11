"""The Slack sender's cache of the header's goal/constraint/decision record (adapters/slack/sender.py):
kept between storm refreshes, read again after a record entry is delivered or another replica drained the scope."""

from __future__ import annotations

from decklog.adapters.slack.sender import HeaderRecords
from decklog.core.entries import Actor, NewEntry
from decklog.core.store.memory.log_store import MemoryLogStore

SCOPE = "incident/header"
ALICE = Actor.human("U0ALICE", "alice")


async def test_the_record_is_read_again_after_a_decision_or_a_hand_over() -> None:
    store = MemoryLogStore()
    await store.append(SCOPE, [NewEntry.make("declared", ALICE, {"title": "x"})], create=True)
    records = HeaderRecords(store)
    assert await records.get(SCOPE) == []
    decided = (await store.append(SCOPE, [NewEntry.make("decision", ALICE, {"text": "roll back"})])).entries
    assert await records.get(SCOPE) == []  # cached: nothing delivered yet
    records.saw(SCOPE, decided)
    assert [e.kind for e in await records.get(SCOPE)] == ["decision"]
    await store.append(SCOPE, [NewEntry.make("goal", ALICE, {"text": "stop the 5xx"})])  # delivered elsewhere
    assert [e.kind for e in await records.get(SCOPE)] == ["decision"]
    records.forget(SCOPE)  # SlackSender.handed_over: another replica drained the scope
    assert sorted(e.kind for e in await records.get(SCOPE)) == ["decision", "goal"]
