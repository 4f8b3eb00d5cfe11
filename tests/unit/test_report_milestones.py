"""The report's "first human response" is the state's ``acknowledged_at``, whatever the entries: one definition,
checked over every short sequence of the entries that could differ; and the report's MTTA is the number insights
reads, paged or not."""

from __future__ import annotations

import itertools

import pytest

from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, NewEntry
from decklog.core.insights import insights, times_line
from decklog.core.reports import ScopeLog, build_report, render
from decklog.core.store.memory.index import MemoryIndex
from decklog.core.store.memory.log_store import MemoryLogStore

ALICE = Actor.human("U0ALICE", "alice")
CAROL = Actor.human("U0CAROL", "carol")
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


PAGE = {
    "escalation": 1, "level": 0, "target": "U0CAROL", "method": "slack", "key": "k-0",
    "due_at": "2026-12-07T09:00:00.000000Z", "source": "user:U0CAROL",
}  # fmt: skip


@pytest.mark.parametrize("paged", [True, False], ids=["paged", "unpaged"])
async def test_the_reports_mtta_is_the_one_insights_reads(paged: bool) -> None:
    """The report's MTTA and the index row insights reads (one rule, core/state/mtta.py): from the first page to
    the first acknowledgement after it when paged; otherwise today's number, declaration → first human response."""
    clock = ManualClock()
    store = MemoryLogStore(clock=clock)
    scope = "incident/payments-5xx"
    await store.append(scope, [NewEntry.make("declared", SOURCE, {"title": "Payments 5xx"})], create=True)
    clock.advance(seconds=5.3)
    await store.append(scope, [STEPS["message"]()])  # the first human response: T+5.3 s
    if paged:
        clock.advance(seconds=60)
        await store.append(scope, [NewEntry.make("page", Actor.system("oncall"), PAGE)])
        clock.advance(seconds=95.4)
        await store.append(scope, [NewEntry.make("acknowledged", CAROL, {"user": "U0CAROL"})])
        clock.advance(seconds=30)
        await store.append(scope, [NewEntry.make("acknowledged", ALICE, {"user": "U0ALICE"})])  # changes nothing
    entries = tuple(await store.read(scope))
    report = build_report(ScopeLog(scope, entries), [])
    index = MemoryIndex()
    await index.apply(await store.get_state(scope), entries)
    (row,) = await index.milestones(None)
    first = next(m for m in report.milestones if m.name == "first_human_response")

    body = insights([row], since_days=None, now=0)  # the index keeps epoch floats: insights gives milliseconds
    assert report.summary.mtta_s == body["mtta_seconds"]["p50"] == (95.4 if paged else 5.3)
    assert report.summary.mtta_from == ("page" if paged else "declaration")
    assert first.since_declared_s == 5.3  # the milestone itself is 143's, paged or not
    said = "from the first page to the first acknowledgement after it" if paged else "from the declaration"
    markdown = render(report, "md").decode()
    assert f"MTTA {'1m 35s' if paged else '5s'}, {said}" in markdown
    assert times_line(body).startswith(f"MTTA {'1m 35s' if paged else '5s'} (")
