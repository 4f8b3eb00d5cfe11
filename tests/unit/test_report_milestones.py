"""The report's "first human response" is the state's ``acknowledged_at`` (what insights' MTTA reads), whatever
the entries: one definition, checked over every short sequence of the entries that could differ."""

from __future__ import annotations

import itertools

import pytest

from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, NewEntry
from decklog.core.reports import ScopeLog, build_report
from decklog.core.store.memory.log_store import MemoryLogStore

ALICE = Actor.human("U0ALICE", "alice")
SOURCE = Actor.system("alertmanager")
AGENT = Actor.agent("rules", "decklog rules")

STEPS = {
    "message": lambda: NewEntry.make("message", ALICE, {"text": "looking"}),
    "export": lambda: NewEntry.make(
        "report_exported", ALICE, {"format": "md", "sha256": "0" * 64, "bytes": 1, "destination": "stdout"}
    ),
    "thread": lambda: NewEntry.make("thread_linked", ALICE, {"channel": "C0ALERTS", "ts": "1.000100"}),
    "ack": lambda: NewEntry.make(
        "observation",
        SOURCE,
        {"text": "acknowledged", "fingerprint": "fp-1", "alert_status": "acknowledged", "source": "pagerduty"},
    ),
    "hypothesis": lambda: NewEntry.make("hypothesis", AGENT, {"text": "the deploy"}),
}


@pytest.mark.parametrize("declared_by", [ALICE, SOURCE], ids=["person", "source"])
@pytest.mark.parametrize("steps", list(itertools.product(STEPS, repeat=2)), ids="-".join)
async def test_first_human_response_is_the_states_acknowledgement(declared_by: Actor, steps: tuple[str, ...]) -> None:
    clock = ManualClock()
    store = MemoryLogStore(clock=clock)
    scope = "incident/payments-5xx"
    await store.append(scope, [NewEntry.make("declared", declared_by, {"title": "Payments 5xx"})], create=True)
    for step in steps:
        clock.advance(seconds=7.6)
        await store.append(scope, [STEPS[step]()])
    state = await store.get_state(scope)
    report = build_report(ScopeLog(scope, tuple(await store.read(scope))), [])
    first = next(m for m in report.milestones if m.name == "first_human_response")
    assert (first.at if first.reached else "") == state.acknowledged_at, (steps, first)
