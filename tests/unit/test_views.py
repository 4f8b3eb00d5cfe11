"""Views: golden files for every view on fixed logs, budgets, omission summaries, and a 5,000-entry joiner view.

Logs are built with a ``ManualClock`` so that every time in a view is fixed; ids that would be random (entry ids,
hashes) never appear in a view. ``DECKLOG_UPDATE_GOLDEN=1`` rewrites the golden files; a missing one fails.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from decklog.core.agents.context import ContextAgents
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, NewEntry
from decklog.core.service import ScopeService
from decklog.core.store.ports import IndexPort
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from decklog.core.views import VIEW_NAMES, Part, ViewCache, Views, build_view, compose
from tests.helpers.golden import golden_text

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "views"
SCOPE = "incident/payments-5xx"
CHANGE = "change/payments-v2.4.1"
ALERTS = Actor.system("alertmanager")
ALICE = Actor.human("U0ALICE", "alice")
BOB = Actor.human("U0BOB", "bob")
RULES = Actor.agent("rules", "decklog rules")
DESK = Actor.system("actions")


@dataclass
class Story:
    store: SqliteLogStore
    index: IndexPort
    service: ScopeService
    clock: ManualClock

    async def add(
        self, scope: str, kind: str, actor: Actor, payload: dict[str, Any], *, refs: tuple[int, ...] = ()
    ) -> int:
        self.clock.advance(seconds=30)
        result = await self.store.append(scope, [NewEntry.make(kind, actor, payload, refs=refs)])
        return result.entries[0].seq

    async def reindex(self, *scopes: str) -> None:
        for scope in scopes:
            await self.index.apply(await self.store.get_state(scope), await self.store.read(scope))


@pytest.fixture
async def story(tmp_path: Path) -> AsyncIterator[Story]:
    clock = ManualClock()
    store = SqliteLogStore(tmp_path, topics=("index",), clock=clock)
    index = SqliteIndex(tmp_path / "index.db", store.executor)
    await index.open()
    yield Story(store, index, ScopeService(store, index), clock)
    await index.close()
    await store.close()


async def past_incident(s: Story) -> None:
    """A resolved incident from last month that the similar-incidents agent should find."""
    await s.service.declare(
        title="Payments 5xx after connection pool change",
        scope="incident/payments-5xx-old",
        actor=ALERTS,
        services=["payments"],
    )
    await s.add(
        "incident/payments-5xx-old", "observation", ALERTS, {"text": "payments 5xx rate 9%", "service": "payments"}
    )
    await s.add("incident/payments-5xx-old", "decision", ALICE, {"text": "rolled back the pool size change"})
    await s.service.resolve("incident/payments-5xx-old", ALICE)
    await s.reindex("incident/payments-5xx-old")


async def build_story(s: Story, *, until: str = "end") -> dict[str, int]:
    """The 03:12 story: a deploy, an alert, a link, a hypothesis, a rollback obligation, approval, run, verify."""
    seqs: dict[str, int] = {}
    await past_incident(s)
    s.clock.advance(minutes=40)
    await s.service.declare(
        title="payments v2.4.1 deployed",
        scope=CHANGE,
        kind="change",
        actor=Actor.system("generic"),
        services=["payments"],
        via="change",
    )
    await s.add(
        CHANGE,
        "observation",
        Actor.system("generic"),
        {
            "text": "deploy of payments v2.4.1 succeeded",
            "source": "generic",
            "data": {
                "version": "v2.4.1",
                "environment": "production",
                "author": "dev1",
                "commits": [
                    {"id": "a1b2c3d4e5f6", "message": "raise db pool size to 200", "paths": ["src/db/pool.py"]}
                ],
            },
        },
    )
    await s.reindex(CHANGE)
    s.clock.advance(minutes=10)
    await s.service.declare(
        title="Payments 5xx", scope=SCOPE, severity=2, services=["payments"], actor=ALERTS, via="alert"
    )
    seqs["alert"] = await s.add(
        SCOPE,
        "observation",
        ALERTS,
        {
            "text": "HTTP 5xx above 5% on payments",
            "source": "alertmanager",
            "service": "payments",
            "fingerprint": "fp-payments-5xx",
            "alert_status": "firing",
        },
    )
    await s.add(SCOPE, "role_assigned", ALICE, {"role": "commander", "user_id": "U0ALICE", "user_name": "alice"})
    await s.add(
        SCOPE, "message", ALICE, {"text": "looking at it, checkout is failing", "channel": "C0ALERTS", "ts": "1.1"}
    )
    await s.add(SCOPE, "goal", ALICE, {"text": "restore checkout success rate above 99%"})
    await s.add(SCOPE, "constraint", ALICE, {"text": "no deploys to payments without the commander"})
    s.clock.advance(seconds=30)
    await s.service.link(
        SCOPE, CHANGE, Actor.system("changes"), relation="suspected_cause", reason="deployed 10 min before"
    )
    seqs["link"] = (await s.store.get_state(SCOPE)).version
    await s.reindex(SCOPE)
    await ContextAgents(s.store, s.index, clock=s.clock).gather(await s.store.get_state(SCOPE))
    seqs["hypothesis"] = await s.add(
        SCOPE,
        "hypothesis",
        RULES,
        {
            "text": "suspect change/payments-v2.4.1: raised the db pool size",
            "confidence": 0.75,
            "suspect_scope": CHANGE,
        },
        refs=(seqs["alert"], seqs["link"]),
    )
    seqs["obligation"] = await s.add(
        SCOPE,
        "obligation_opened",
        RULES,
        {
            "obligation_id": "ob-rollback",
            "text": "roll back change/payments-v2.4.1 only if the recorded safety conditions hold",
            "purpose": "rollback",
            "conditions": ["alert_still_firing", "change_is_latest"],
            "action": "rollback_deploy",
            "params": {"service": "payments", "change": CHANGE},
            "expected_outcome": "the payments alerts resolve",
        },
        refs=(seqs["hypothesis"],),
    )
    await s.add(
        SCOPE,
        "proposal",
        RULES,
        {
            "proposal_id": "p-1",
            "action": "rollback_deploy",
            "params": {"service": "payments", "change": CHANGE},
            "preview": "rollback_deploy service=payments",
            "risk": "R2",
            "obligation_id": "ob-rollback",
            "safety_conditions": ["alert_still_firing", "change_is_latest"],
        },
    )
    if until == "proposal":
        return seqs
    await s.add(
        SCOPE, "decision", ALICE, {"text": "roll back v2.4.1", "expected_outcome": "5xx back under 1% within 5 minutes"}
    )
    await s.add(
        SCOPE,
        "approval",
        BOB,
        {"proposal_id": "p-1", "decision": "approved", "approver": "U0BOB", "approver_name": "bob"},
    )
    await s.add(
        SCOPE,
        "action_started",
        DESK,
        {
            "run_id": "r-1",
            "action": "rollback_deploy",
            "proposal_id": "p-1",
            "obligation_id": "ob-rollback",
            "fence": 1,
        },
    )
    seqs["result"] = await s.add(
        SCOPE, "action_result", DESK, {"run_id": "r-1", "action": "rollback_deploy", "outcome": "applied", "fence": 1}
    )
    await s.add(
        SCOPE, "obligation_fulfilled", DESK, {"obligation_id": "ob-rollback", "run_id": "r-1", "note": "rolled back"}
    )
    await s.add(
        SCOPE,
        "obligation_opened",
        DESK,
        {
            "obligation_id": "ob-verify",
            "text": "verify that rollback_deploy (run r-1) had the expected effect",
            "purpose": "verification",
            "expected_outcome": "5xx back under 1% within 5 minutes",
            "run_id": "r-1",
        },
        refs=(seqs["result"],),
    )
    seqs["resolved"] = await s.add(
        SCOPE,
        "observation",
        ALERTS,
        {
            "text": "HTTP 5xx above 5% on payments",
            "source": "alertmanager",
            "service": "payments",
            "fingerprint": "fp-payments-5xx",
            "alert_status": "resolved",
        },
    )
    await s.add(SCOPE, "message", BOB, {"text": "error rate is back to normal", "channel": "C0ALERTS", "ts": "1.2"})
    return seqs


def check_golden(name: str, value: dict[str, Any]) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False) + "\n"
    assert json.loads(golden_text(path, text)) == json.loads(text), f"{name} differs from {path}"


@pytest.mark.parametrize("name", ["triage", "investigation", "joiner", "verification"])
async def test_view_matches_its_golden_file(story: Story, name: str) -> None:
    await build_story(story)
    view = await build_view(story.store, SCOPE, name)
    check_golden(name, view.to_json())
    assert view.bytes == len(view.text.encode()) <= view.budget


async def test_a_view_cache_is_owned_not_shared_and_changes_nothing_but_the_reads(story: Story) -> None:
    await build_story(story)
    views = Views(story.store)  # the owner of its cache (the agent runtime holds one)
    other = ViewCache()
    for name in ("triage", "investigation", "joiner", "verification"):
        fresh = await build_view(story.store, SCOPE, name)  # no cache: this build remembers only for itself
        first, again = await views.build(SCOPE, name), await views.build(SCOPE, name)
        assert fresh.text == first.text == again.text
    assert views.cache.memo(story.store).tails, "the owner's cache remembered the tails its builds read"
    assert not other.memo(story.store).tails, "another cache shares nothing with it"


async def test_action_view_matches_its_golden_file(story: Story) -> None:
    await build_story(story, until="proposal")
    view = await build_view(story.store, SCOPE, "action", obligation_id="ob-rollback")
    check_golden("action", view.to_json())
    sections = view.sections
    assert sections["obligation"]["id"] == "ob-rollback"
    assert sections["safety_conditions"] == ["alert_still_firing", "change_is_latest"]
    assert [p["id"] for p in sections["pending_proposals"]] == ["p-1"]
    assert [e["kind"] for e in sections["opened"]["evidence"]] == ["hypothesis"]  # the chain: obligation → hypothesis
    assert {e["kind"] for e in sections["opened"]["evidence"][0]["evidence"]} == {"observation", "scope_linked"}


async def test_investigation_view_carries_evidence_chains_linked_changes_and_similar_incidents(story: Story) -> None:
    seqs = await build_story(story, until="proposal")
    sections = (await build_view(story.store, SCOPE, "investigation")).sections
    hypothesis = sections["hypotheses"][-1]
    assert hypothesis["suspect_scope"] == CHANGE
    assert [e["seq"] for e in hypothesis["evidence"]] == [seqs["alert"], seqs["link"]]
    change = sections["linked_changes"][0]
    assert change["version"] == "v2.4.1" and change["commits"][0]["paths"] == ["src/db/pool.py"]
    assert change["link_seq"] == seqs["link"]
    about = {c["about"]: c for c in sections["context"]}
    similar = about["similar_incidents"]["items"][0]
    assert similar["scope"] == "incident/payments-5xx-old" and "payments" in similar["matched"]
    assert about["recent_changes"]["items"][0]["scope"] == CHANGE


async def test_verification_view_has_decision_expected_outcome_result_and_later_alerts(story: Story) -> None:
    seqs = await build_story(story)
    sections = (await build_view(story.store, SCOPE, "verification")).sections
    assert sections["obligation"]["id"] == "ob-verify"
    assert sections["expected_outcome"] == "5xx back under 1% within 5 minutes"
    assert sections["decisions"][-1]["text"].endswith("roll back v2.4.1")
    assert sections["result"]["outcome"] == "applied" and sections["result"]["seq"] == seqs["result"]
    assert [e["seq"] for e in sections["after_result"]] == [seqs["resolved"]]
    assert sections["resolved_alerts"][0]["last_seq"] == seqs["resolved"]


async def test_every_view_reports_its_size_and_stays_within_a_small_budget(story: Story) -> None:
    await build_story(story)
    for name in VIEW_NAMES:
        view = await build_view(story.store, SCOPE, name, budget=2500)
        assert view.bytes <= 2500, (name, view.bytes)
        assert view.to_json()["bytes"] == view.bytes and view.tokens == -(-view.bytes // 4)


async def test_an_action_or_verification_view_without_its_obligation_says_so(story: Story) -> None:
    await build_story(story)
    view = await build_view(story.store, SCOPE, "action", obligation_id="ob-nope")
    assert view.sections["obligation"] == {"missing": "no open obligation ob-nope"}
    with pytest.raises(ValueError, match="unknown view"):
        await build_view(story.store, SCOPE, "everything")


def test_compose_drops_the_least_important_oldest_items_first_and_says_so() -> None:
    items = [{"seq": i, "kind": "message", "text": "x" * 50} for i in range(1, 101)]
    keep = [{"id": f"ob-{i}", "text": "must stay"} for i in range(3)]
    parts = [
        Part("open_obligations", items=keep, keep=10**6),
        Part("messages", items=items, keep=2, priority=10, noun="messages", total=4_900),
        Part("notes", items=[{"n": 1}, {"n": 2}], keep=0, priority=90, noun="notes"),
    ]
    view = compose("test", SCOPE, 5_000, parts, 1_500)
    assert view.bytes <= 1_500
    assert view.sections["open_obligations"] == keep
    assert view.sections["notes"] == [{"n": 1}, {"n": 2}]  # the higher priority list kept everything
    shown = view.sections["messages"]
    assert shown[-1]["seq"] == 100 and 2 <= len(shown) < 100
    assert view.omitted == (f"messages: + {4_900 - len(shown):,} earlier messages omitted",)


async def test_joiner_view_of_a_5000_entry_incident_stays_in_budget_with_every_open_obligation_and_the_last_decision(
    story: Story,
) -> None:
    s = story
    await s.service.declare(
        title="Checkout latency", scope="incident/checkout", severity=1, services=["checkout"], actor=ALICE
    )
    await s.add(
        "incident/checkout", "role_assigned", ALICE, {"role": "commander", "user_id": "U0ALICE", "user_name": "alice"}
    )
    batch: list[NewEntry] = []
    last_decision = ""
    for i in range(5_000 - 2):
        if i % 997 == 0:
            last_decision = f"decision {i}: shed 10% of traffic from region {i % 7}"
            batch.append(NewEntry.make("decision", ALICE, {"text": last_decision}))
        elif i % 701 == 0:
            batch.append(
                NewEntry.make(
                    "obligation_opened",
                    BOB,
                    {
                        "obligation_id": f"ob-{i}",
                        "text": f"follow up on shard {i} before the next peak",
                        "purpose": "follow_up",
                    },
                )
            )
        elif i % 3 == 0:
            batch.append(
                NewEntry.make("observation", ALERTS, {"text": f"p99 latency {400 + i % 50} ms", "service": "checkout"})
            )
        else:
            batch.append(
                NewEntry.make(
                    "message",
                    BOB if i % 2 else ALICE,
                    {"text": f"status update {i}: still digging into the cache tier"},
                )
            )
        if len(batch) == 500:
            await s.store.append("incident/checkout", batch)
            batch = []
    if batch:
        await s.store.append("incident/checkout", batch)
    state = await s.store.get_state("incident/checkout")
    assert state.version == 5_000
    view = await build_view(s.store, "incident/checkout", "joiner", budget=12_000)
    assert view.bytes <= 12_000
    assert {o["id"] for o in view.sections["open_obligations"]} == set(state.obligations) and len(
        state.obligations
    ) == 7
    assert view.sections["last_decisions"][-1]["text"].endswith(last_decision)
    assert view.sections["roles"] == {"commander": "alice"}
    omitted = "\n".join(view.omitted)
    messages_shown = sum(1 for e in view.sections["timeline"] if e["kind"] == "message")
    expected = state.kind_counts["message"] - messages_shown
    assert f"timeline: + {expected:,} earlier messages omitted" in omitted
    assert "earlier observations omitted" in omitted
