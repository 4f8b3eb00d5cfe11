"""Agent turns over a real SQLite log: the rules, the turn runtime (CAS, provenance, failures), the scheduler
(debounce, boot re-arm) and two runtimes racing for one scope. No timing assertions: effects are polled."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from decklog.core.agents import (
    ActionInfo,
    AgentsSender,
    ContextAgents,
    ReasonerError,
    RuleBasedReasoner,
    SuggestionIntent,
    TurnInput,
    TurnOutput,
    TurnRuntime,
    TurnScheduler,
)
from decklog.core.agents.triggers import warrants_turn
from decklog.core.alarm import AsyncioAlarm
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, AgentTurn, Entry, NewEntry
from decklog.core.service import ScopeService
from decklog.core.store.ports import IndexPort
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually

SCOPE = "incident/payments-5xx"
CHANGE = "change/payments-v2.4.1"
ALERTS = Actor.system("alertmanager")
ALICE = Actor.human("U0ALICE", "alice")
DESK = Actor.system("actions")


@dataclass
class World:
    dir: Path
    clock: ManualClock
    store: SqliteLogStore
    index: IndexPort
    service: ScopeService

    async def add(self, kind: str, actor: Actor, payload: dict[str, Any], *, scope: str = SCOPE) -> Entry:
        self.clock.advance(seconds=20)
        return (await self.store.append(scope, [NewEntry.make(kind, actor, payload)])).entries[0]

    async def alert(self, status: str = "firing", fingerprint: str = "fp-1", title: str = "HTTP 5xx above 5%") -> Entry:
        payload = {
            "text": title,
            "source": "alertmanager",
            "service": "payments",
            "fingerprint": fingerprint,
            "alert_status": status,
        }
        return await self.add("observation", ALERTS, payload)

    async def entries(self, kind: str | None = None) -> list[Entry]:
        return [e for e in await self.store.read(SCOPE) if kind is None or e.kind == kind]

    def runtime(self, reasoner: Any = None, **options: Any) -> TurnRuntime:
        options.setdefault("clock", self.clock)
        return TurnRuntime(self.store, reasoner=reasoner or RuleBasedReasoner(), index=self.index, **options)


@contextlib.asynccontextmanager
async def opened_world(tmp_path: Path) -> AsyncIterator[World]:
    """A SQLite log and index on a manual clock (the fixture below; other agent tests open their own)."""
    clock = ManualClock()
    store = SqliteLogStore(tmp_path, topics=("index",), clock=clock)
    index = SqliteIndex(tmp_path / "index.db", store.executor)
    await index.open()
    try:
        yield World(tmp_path, clock, store, index, ScopeService(store, index))
    finally:
        await index.close()
        await store.close()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with opened_world(tmp_path) as w:
        yield w


async def alerting_incident(w: World, *, link: bool = True, **what: str) -> None:
    """A deploy of payments (``what``: another ``kind``, a ``flag``), then a payments 5xx incident with a firing
    alert, linked to the change."""
    await w.service.declare(
        title="payments v2.4.1 deployed",
        scope=CHANGE,
        kind="change",
        services=["payments"],
        actor=Actor.system("generic"),
    )
    await w.add(
        "observation",
        Actor.system("generic"),
        {
            "text": "deploy succeeded",
            "data": {
                "change_id": "payments-v2.4.1",
                "version": "v2.4.1",
                "commits": [{"id": "abc", "message": "pool", "paths": ["src/db/pool.py"]}],
                **what,
            },
        },
        scope=CHANGE,
    )
    w.clock.advance(minutes=8)
    await w.service.declare(
        title="Payments 5xx", scope=SCOPE, severity=2, services=["payments"], actor=ALERTS, via="alert"
    )
    await w.alert()
    if link:
        await w.service.link(SCOPE, CHANGE, Actor.system("changes"), relation="suspected_cause")


class RecordingProposer:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def propose(
        self, scope: str, *, action: str, params: dict[str, Any], rationale: str, obligation_id: str, actor: Actor
    ) -> str:
        self.calls.append(
            {"scope": scope, "action": action, "params": params, "obligation_id": obligation_id, "actor": actor.id}
        )
        return f"parked p-{len(self.calls)} for approval"


class Catalog:
    def __init__(self, *actions: ActionInfo) -> None:
        self.actions = list(actions)

    def available(self) -> list[ActionInfo]:
        return self.actions


ROLLBACK = ActionInfo("rollback_deploy", "roll a service back", "R2", {}, ("alert_still_firing", "change_is_latest"))
REVERT = ActionInfo("revert_config", "revert a config push", "R2", {}, ("alert_still_firing",))
FLAG_OFF = ActionInfo(
    "flag_off", "turn a flag off", "R2", {"service": {"type": "string"}, "flag": {"type": "string"}}, ("no_run",)
)


class Scripted:
    """A reasoner that returns what the test says (and counts its calls); ``gate`` holds it until released."""

    name = "scripted"
    model = "scripted-1"
    wants_wakes = False

    def __init__(
        self, make: Any = None, *, gate: asyncio.Event | None = None, fail: str = "", sleep: float = 0
    ) -> None:
        self.make = make or (lambda turn: TurnOutput(suggestions=[SuggestionIntent("look at the pool")]))
        self.gate = gate
        self.fail = fail
        self.sleep = sleep
        self.calls: list[TurnInput] = []
        self.started = asyncio.Event()

    async def run(self, turn: TurnInput) -> TurnOutput:
        self.calls.append(turn)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.sleep:
            await asyncio.sleep(self.sleep)
        if self.fail:
            raise ReasonerError(self.fail)
        out: TurnOutput = self.make(turn)
        return out


# -- the rules -------------------------------------------------------------------------------------------------


async def test_an_alerting_incident_with_a_linked_change_gets_a_hypothesis_and_a_rollback_obligation(
    world: World,
) -> None:
    await alerting_incident(world)
    result = await world.runtime(catalog=Catalog(ROLLBACK)).run_turn(SCOPE)
    assert result.status == "recorded"
    hypothesis, obligation = await world.entries("hypothesis"), await world.entries("obligation_opened")
    assert len(hypothesis) == 1 and len(obligation) == 1
    h, o = hypothesis[0].payload, obligation[0].payload
    assert h.suspect_scope == CHANGE and h.text.startswith(f"suspect {CHANGE}")
    link = (await world.entries("scope_linked"))[0].seq
    first_alert = (await world.entries("observation"))[0].seq
    assert set(hypothesis[0].refs) == {link, first_alert}
    assert o.purpose == "rollback" and o.action == "rollback_deploy"
    assert o.text == f"roll back {CHANGE} only if the recorded safety conditions hold"
    assert o.params == {"service": "payments", "change": CHANGE}
    assert o.conditions == ("alert_still_firing", "change_is_latest")
    assert hypothesis[0].seq in obligation[0].refs  # the obligation points at the hypothesis it follows from
    # once per change: another alert warrants another turn, which does not repeat itself
    await world.alert(fingerprint="fp-2", title="payments latency")
    again = await world.runtime(catalog=Catalog(ROLLBACK)).run_turn(SCOPE)
    assert len(await world.entries("hypothesis")) == 1 and len(await world.entries("obligation_opened")) == 1
    assert again.status in ("noop", "recorded")


async def test_the_follow_up_turn_proposes_the_rollback_through_the_proposer_exactly_once(world: World) -> None:
    await alerting_incident(world)
    proposer = RecordingProposer()
    runtime = world.runtime(proposer=proposer, catalog=Catalog(ROLLBACK))
    await runtime.run_turn(SCOPE)
    follow_up = await runtime.run_turn(SCOPE)  # the agent's obligation with an action warrants one follow-up
    assert follow_up.status == "recorded" and follow_up.proposals == ["parked p-1 for approval"]
    ob = (await world.entries("obligation_opened"))[0].payload
    assert proposer.calls == [
        {
            "scope": SCOPE,
            "action": "rollback_deploy",
            "params": {"service": "payments", "change": CHANGE},
            "obligation_id": ob.obligation_id,
            "actor": "rules",
        }
    ]
    turns = [e.payload for e in await world.entries("agent_turn")]
    assert [t.trigger for t in turns] == ["debounce", "follow_up"]
    assert "action" in turns[1].view
    # a follow-up does not warrant another follow-up, and the proposal is never repeated
    assert (await runtime.run_turn(SCOPE)).status == "skipped"
    await world.alert(fingerprint="fp-2", title="payments latency")
    await runtime.run_turn(SCOPE)
    assert len(proposer.calls) == 1


async def test_a_config_change_is_undone_by_the_catalogs_config_revert_and_a_flag_by_turning_it_off(
    tmp_path: Path,
) -> None:
    for kind, flag, action, text, proposed in (
        (
            "config",
            "",
            "revert_config",
            f"revert the config change {CHANGE}",
            {"service": "payments", "change": CHANGE},
        ),
        (
            "flag",
            "newPsp",
            "flag_off",
            f"turn the flag newPsp off ({CHANGE})",
            {"service": "payments", "flag": "newPsp"},
        ),
    ):
        async with opened_world(tmp_path / kind) as w:
            await alerting_incident(w, kind=kind, **({"flag": flag} if flag else {}))
            proposer = RecordingProposer()
            runtime = w.runtime(proposer=proposer, catalog=Catalog(ROLLBACK, REVERT, FLAG_OFF))
            await runtime.run_turn(SCOPE)
            (ob,) = [e.payload for e in await w.entries("obligation_opened")]
            assert (ob.action, ob.text) == (action, f"{text} only if the recorded safety conditions hold")
            # the obligation keeps what it undoes; the proposal carries the parameters the action declares
            assert ob.params == {"service": "payments", "change": CHANGE} | ({"flag": flag} if flag else {})
            assert ob.conditions == (REVERT if kind == "config" else FLAG_OFF).safety_conditions
            await runtime.run_turn(SCOPE)
            assert [(c["action"], c["params"]) for c in proposer.calls] == [(action, proposed)]


async def test_a_change_whose_kinds_action_the_catalog_lacks_falls_back_to_the_rollback(world: World) -> None:
    await alerting_incident(world, kind="config")
    await world.runtime(catalog=Catalog(ROLLBACK)).run_turn(SCOPE)
    (ob,) = [e.payload for e in await world.entries("obligation_opened")]
    assert ob.action == "rollback_deploy" and ob.text.startswith(f"revert the config change {CHANGE}")


async def test_without_an_action_desk_the_proposal_becomes_a_would_propose_suggestion(world: World) -> None:
    await alerting_incident(world)
    runtime = world.runtime()
    await runtime.run_turn(SCOPE)
    await runtime.run_turn(SCOPE)
    suggestions = await world.entries("suggestion")
    assert len(suggestions) == 1
    assert suggestions[0].payload.text.startswith(f"would propose rollback_deploy(change={CHANGE}, service=payments)")
    ob = (await world.entries("obligation_opened"))[0]
    assert suggestions[0].refs == (ob.seq,)
    await world.alert(fingerprint="fp-2", title="payments latency")
    await runtime.run_turn(SCOPE)
    assert len(await world.entries("suggestion")) == 1  # the action view shows it was proposed once already


async def test_an_unavailable_action_is_never_proposed(world: World) -> None:
    await alerting_incident(world)
    proposer = RecordingProposer()
    runtime = world.runtime(proposer=proposer, catalog=Catalog())  # wired, but rollback_deploy is unavailable
    await runtime.run_turn(SCOPE)
    await runtime.run_turn(SCOPE)
    assert proposer.calls == [] and len(await world.entries("obligation_opened")) == 1


async def rolled_back_next_door(w: World, scope: str = "incident/payments-latency") -> str:
    """Another payments incident whose rollback of the same change applied (the index knows both incidents)."""
    await w.service.declare(title="Payments latency", scope=scope, services=["payments"], actor=ALERTS, via="alert")
    params = {"service": "payments", "change": CHANGE}
    started = {"run_id": "r-next", "action": "rollback_deploy", "fence": 1, "params": params}
    result = {"run_id": "r-next", "action": "rollback_deploy", "outcome": "applied", "fence": 1}
    await w.add("action_started", DESK, started, scope=scope)
    applied = await w.add("action_result", DESK, result, scope=scope)
    for s in (scope, SCOPE, CHANGE):
        if await w.store.exists(s):
            await w.index.apply(await w.store.get_state(s), await w.store.read(s))
    return f"{scope}#{applied.seq}"


async def test_a_rollback_applied_in_a_related_incident_is_cited_not_opened_again(world: World) -> None:
    await alerting_incident(world)
    ref = await rolled_back_next_door(world)
    proposer = RecordingProposer()
    runtime = world.runtime(proposer=proposer, catalog=Catalog(ROLLBACK))
    await runtime.run_turn(SCOPE)
    assert len(await world.entries("hypothesis")) == 1  # the suspicion stands
    assert await world.entries("obligation_opened") == [] and proposer.calls == []
    (finding,) = await world.entries("suggestion")
    assert finding.payload.text.startswith(f"already applied: rollback_deploy(change={CHANGE},service=payments)")
    assert ref in finding.payload.text and "related: service payments" in finding.payload.text
    await world.alert(fingerprint="fp-2", title="payments latency")
    await runtime.run_turn(SCOPE)
    assert len(await world.entries("suggestion")) == 1 and proposer.calls == []  # said once


async def test_an_open_rollback_is_not_proposed_once_a_related_incident_applied_it(world: World) -> None:
    await alerting_incident(world)
    proposer = RecordingProposer()
    runtime = world.runtime(proposer=proposer, catalog=Catalog(ROLLBACK))
    await runtime.run_turn(SCOPE)  # the obligation opens here, before the other incident rolled back
    ref = await rolled_back_next_door(world)
    await runtime.run_turn(SCOPE, force=True)
    ob = (await world.entries("obligation_opened"))[0]
    assert proposer.calls == []
    (finding,) = await world.entries("suggestion")
    assert ref in finding.payload.text and finding.refs == (ob.seq,)
    await world.alert(fingerprint="fp-2", title="payments latency")
    await runtime.run_turn(SCOPE)
    assert len(await world.entries("suggestion")) == 1 and proposer.calls == []  # the action view shows it once


async def test_without_a_related_run_in_the_window_the_rollback_is_proposed(world: World) -> None:
    await alerting_incident(world)
    await rolled_back_next_door(world)
    world.clock.advance(hours=7)  # the other incident's rollback is older than the window
    await world.alert(fingerprint="fp-2", title="payments latency")
    proposer = RecordingProposer()
    runtime = world.runtime(proposer=proposer, catalog=Catalog(ROLLBACK))
    await runtime.run_turn(SCOPE)
    await runtime.run_turn(SCOPE)
    assert len(proposer.calls) == 1
    assert not [e for e in await world.entries("suggestion") if e.payload.text.startswith("already applied")]


async def after_a_rollback(w: World) -> tuple[int, str]:
    await alerting_incident(w)
    await w.add("action_started", DESK, {"run_id": "r-1", "action": "rollback_deploy", "fence": 1})
    result = await w.add(
        "action_result", DESK, {"run_id": "r-1", "action": "rollback_deploy", "outcome": "applied", "fence": 1}
    )
    opened = await w.add(
        "obligation_opened",
        DESK,
        {
            "obligation_id": "ob-verify",
            "text": "verify the rollback",
            "purpose": "verification",
            "run_id": "r-1",
            "expected_outcome": "the 5xx alert resolves",
        },
    )
    assert opened.seq > result.seq
    return result.seq, "ob-verify"


async def test_verification_resolved_after_the_run_is_verified_claimed_and_fulfilled_under_a_fence(
    world: World,
) -> None:
    result_seq, oid = await after_a_rollback(world)
    resolved = await world.alert("resolved")
    turn = await world.runtime().run_turn(SCOPE)
    assert turn.status == "recorded"
    kinds = [e.kind for e in await world.store.read(SCOPE, after=resolved.seq)]
    assert kinds == ["obligation_claimed", "verification", "obligation_fulfilled", "suggestion", "agent_turn"]
    claimed = (await world.entries("obligation_claimed"))[0].payload
    verification = (await world.entries("verification"))[0]
    fulfilled = (await world.entries("obligation_fulfilled"))[0].payload
    assert verification.payload.outcome == "verified" and verification.payload.run_id == "r-1"
    assert verification.payload.expected == "the 5xx alert resolves"
    assert result_seq in verification.refs and resolved.seq in verification.refs
    assert fulfilled.fence == claimed.fence and fulfilled.obligation_id == oid
    assert oid not in (await world.store.get_state(SCOPE)).obligations


async def test_verification_still_firing_waits_for_the_grace_period_then_fails(world: World) -> None:
    await after_a_rollback(world)
    runtime = world.runtime(RuleBasedReasoner(verification_grace_s=300))
    woken: list[float] = []
    runtime.on_wake = lambda scope, delay: woken.append(delay)
    first = await runtime.run_turn(SCOPE)
    assert first.status in ("noop", "recorded")
    assert await world.entries("verification") == []  # inconclusive: left open
    assert woken and 0 < min(woken) <= 300
    world.clock.advance(seconds=400)
    second = await runtime.run_turn(SCOPE, trigger="wake", force=True)
    assert second.status == "recorded"
    verification = (await world.entries("verification"))[0].payload
    assert verification.outcome == "failed" and "still firing" in verification.observed


async def test_all_alerts_resolved_suggests_resolving_once_per_all_clear(world: World) -> None:
    await alerting_incident(world, link=False)
    runtime = world.runtime()
    await world.alert("resolved")
    await runtime.run_turn(SCOPE)
    suggestions = [e.payload for e in await world.entries("suggestion")]
    assert [(s.action, s.text) for s in suggestions] == [
        ("resolve", "All 1 alert have resolved. Resolve the incident?")
    ] or [s.action for s in suggestions] == ["resolve"]
    await world.add("message", ALICE, {"text": "watching for a bit"})
    await runtime.run_turn(SCOPE)
    assert len(await world.entries("suggestion")) == 1
    # dismissed, then the alert fires and clears again: a new all-clear gets a new suggestion
    await world.service.suggestion_feedback(SCOPE, suggestions[0].suggestion_id, "dismissed", ALICE)
    await world.alert("firing")
    await world.alert("resolved")
    await runtime.run_turn(SCOPE)
    assert [e.payload.action for e in await world.entries("suggestion")] == ["resolve", "resolve"]


async def test_no_human_activity_for_a_while_gets_one_nudge_per_quiet_period(world: World) -> None:
    await alerting_incident(world, link=False)
    runtime = world.runtime(RuleBasedReasoner(idle_nudge_minutes=20))
    await world.add("message", ALICE, {"text": "on it"})
    quiet = await runtime.run_turn(SCOPE)
    assert quiet.status == "recorded" and quiet.output is not None and quiet.output.outcome == "nothing"
    world.clock.advance(minutes=25)
    assert (await runtime.run_turn(SCOPE, trigger="wake", force=True)).status == "recorded"
    world.clock.advance(minutes=25)
    await runtime.run_turn(SCOPE, trigger="wake", force=True)
    nudges = [e for e in await world.entries("suggestion") if e.payload.suggestion_id.startswith("sg-nudge-")]
    assert len(nudges) == 1 and "No one has posted here for 25 minutes" in nudges[0].payload.text
    await world.add("message", ALICE, {"text": "still here"})
    world.clock.advance(minutes=21)
    await runtime.run_turn(SCOPE, trigger="wake", force=True)
    assert len([e for e in await world.entries("suggestion") if e.payload.suggestion_id.startswith("sg-nudge-")]) == 2


# -- the runtime -----------------------------------------------------------------------------------------------


async def test_a_recorded_turn_carries_its_provenance(world: World) -> None:
    await alerting_incident(world)
    before = await world.store.get_state(SCOPE)
    result = await world.runtime().run_turn(SCOPE)
    turn_entry = (await world.entries("agent_turn"))[0]
    t = turn_entry.payload
    assert isinstance(t, AgentTurn)
    assert (t.reasoner, t.model, t.outcome, t.error) == ("rules", "", "ok", "")
    assert t.seq_from == 1 and t.seq_to >= before.version
    assert t.view == "investigation" and t.view_bytes > 0 and t.view_tokens == pytest.approx(t.view_bytes / 4, abs=1)
    assert t.appended == result.appended and t.appended == tuple(
        range(turn_entry.seq - len(t.appended), turn_entry.seq)
    )
    assert t.duration_ms >= 0 and t.input_tokens == t.output_tokens == 0
    assert (await world.store.get_state(SCOPE)).last_turn_seq == t.seq_to
    assert not warrants_turn(turn_entry)


async def test_a_turn_with_nothing_to_do_records_outcome_nothing_and_is_not_repeated(world: World) -> None:
    await world.service.declare(title="Quiet", scope=SCOPE, actor=ALICE)
    runtime = world.runtime()
    result = await runtime.run_turn(SCOPE)
    assert result.status == "recorded" and result.appended == ()
    assert (await runtime.run_turn(SCOPE)).status == "skipped"
    turns = await world.entries("agent_turn")
    assert len(turns) == 1 and turns[0].seq == result.turn_seq
    t = turns[0].payload
    assert (t.outcome, t.reasoner, t.trigger, t.seq_from, t.seq_to, t.appended) == (
        "nothing",
        "rules",
        "debounce",
        1,
        1,
        (),
    )
    assert (t.view, t.view_bytes) == ("", 0)  # the rules read no view for a quiet, unlinked incident
    assert t.input_tokens == t.output_tokens == 0 and t.duration_ms >= 0
    assert t.cache_read_input_tokens == t.cache_creation_input_tokens == 0 and t.cost_usd == 0
    assert not warrants_turn(turns[0])
    state = await world.store.get_state(SCOPE)
    assert state.last_turn_seq == 1 and runtime.stats.noop == 1
    assert (await world.store.verify(SCOPE)).ok


async def test_a_failed_turn_is_recorded_and_the_next_turn_proceeds(world: World) -> None:
    await alerting_incident(world, link=False)
    failing = Scripted(fail="rate limited by the model API (429, retry-after 1s)")
    result = await world.runtime(failing).run_turn(SCOPE)
    assert result.status == "failed"
    t = (await world.entries("agent_turn"))[0].payload
    assert (t.outcome, t.error, t.reasoner) == (
        "failed",
        "rate limited by the model API (429, retry-after 1s)",
        "scripted",
    )
    assert await world.entries("suggestion") == []
    await world.add("message", ALICE, {"text": "anything?"})
    ok = await world.runtime(Scripted()).run_turn(SCOPE)
    assert ok.status == "recorded" and len(await world.entries("suggestion")) == 1


async def test_a_turn_that_outlives_its_timeout_fails(world: World) -> None:
    await alerting_incident(world, link=False)
    result = await world.runtime(Scripted(sleep=5), timeout_s=0.05).run_turn(SCOPE)
    assert result.status == "failed"
    assert (await world.entries("agent_turn"))[0].payload.error == "the turn timed out after 0.05s"


class GatedRules:
    """The rule-based reasoner, held at a gate so that two turns are in flight at once."""

    name = "rules"
    model = ""
    wants_wakes = True

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate
        self.started = asyncio.Event()
        self.rules = RuleBasedReasoner()

    async def run(self, turn: TurnInput) -> TurnOutput:
        self.started.set()
        await self.gate.wait()
        return await self.rules.run(turn)


async def test_two_runtimes_racing_for_one_scope_never_both_record_a_turn(world: World) -> None:
    await after_a_rollback(world)
    await world.alert("resolved")
    other_store = SqliteLogStore(world.dir, topics=("index",), clock=world.clock)  # a second process, in effect
    gate = asyncio.Event()
    reasoners = [GatedRules(gate), GatedRules(gate)]
    a = world.runtime(reasoners[0], instance="a")
    b = TurnRuntime(other_store, reasoner=reasoners[1], clock=world.clock, instance="b")
    try:
        tasks = [asyncio.create_task(rt.run_turn(SCOPE)) for rt in (a, b)]
        await asyncio.wait_for(asyncio.gather(*(r.started.wait() for r in reasoners)), 5)
        gate.set()  # both turns reasoned over the same range; now both try to record
        results = await asyncio.gather(*tasks)
    finally:
        await other_store.close()
    assert sorted(r.status for r in results) == ["raced", "recorded"]
    assert len(await world.entries("agent_turn")) == 1
    verifications = await world.entries("verification")
    assert len(verifications) <= 1 and len(await world.entries("obligation_fulfilled")) == len(verifications)
    state = await world.store.get_state(SCOPE)
    if "ob-verify" in state.obligations:  # the loser had claimed it: its claim was released, not left to expire
        assert state.obligations["ob-verify"].status == "open"
    assert (await world.store.verify(SCOPE)).ok


# -- the scheduler ---------------------------------------------------------------------------------------------


async def test_a_burst_of_entries_inside_the_debounce_window_gives_exactly_one_turn(world: World) -> None:
    await world.service.declare(title="Burst", scope=SCOPE, actor=ALICE)
    reasoner = Scripted()
    alarm = AsyncioAlarm()
    scheduler = TurnScheduler(world.runtime(reasoner), alarm, first_delay=0.0, debounce=0.2, clock=world.clock)
    sender = AgentsSender(scheduler)
    try:
        for i in range(100):
            result = await world.store.append(SCOPE, [NewEntry.make("message", ALICE, {"text": f"update {i}"})])
            await sender.deliver(SCOPE, result.entries)
        await eventually(lambda: len(reasoner.calls) == 1, what="the one debounced turn")
        await eventually(lambda: scheduler.runtime.stats.recorded == 1, what="the turn recorded")
        await asyncio.sleep(0.3)  # nothing else is armed: no second turn may start
        assert len(reasoner.calls) == 1 and not alarm.pending(f"agents:turn:{SCOPE}")
        assert reasoner.calls[0].seq_from == 1 and reasoner.calls[0].seq_to == 101
    finally:
        await scheduler.stop()
        await alarm.shutdown()


async def test_the_first_turn_waits_for_the_first_delay_and_agent_turns_arm_nothing(world: World) -> None:
    await world.service.declare(title="Settle", scope=SCOPE, actor=ALICE)
    alarm = AsyncioAlarm()
    scheduler = TurnScheduler(
        world.runtime(Scripted()), alarm, first_delay=3600, debounce=0.01, max_wait=7200, clock=world.clock
    )
    try:
        assert scheduler.delay_for(await world.store.get_state(SCOPE)) == pytest.approx(3600, abs=1)
        turn = NewEntry.make("agent_turn", Actor.agent("rules"), {"reasoner": "rules"})
        result = await world.store.append(SCOPE, [turn])
        await scheduler.on_entries(SCOPE, result.entries)
        assert not alarm.pending(f"agents:turn:{SCOPE}")
        await scheduler.on_entries(SCOPE, await world.store.read(SCOPE, limit=1))
        assert alarm.pending(f"agents:turn:{SCOPE}")
    finally:
        await scheduler.stop()
        await alarm.shutdown()


async def test_pending_turns_are_rearmed_from_the_log_at_boot(world: World) -> None:
    await alerting_incident(world)
    await world.service.declare(title="Already handled", scope="incident/done", actor=ALICE)
    done = await world.runtime().run_turn("incident/done")
    assert done.status == "recorded" and done.turn_seq  # it decided nothing, recorded as such: covered
    await world.add("message", ALICE, {"text": "one more thing"}, scope="incident/done")  # pending again
    alarm = AsyncioAlarm()
    reasoner = Scripted()
    scheduler = TurnScheduler(world.runtime(reasoner), alarm, first_delay=0.0, debounce=0.01, clock=world.clock)
    try:
        assert await scheduler.arm_pending() == 2
        await eventually(lambda: {t.scope for t in reasoner.calls} == {SCOPE, "incident/done"}, what="both turns")
        assert [t.trigger for t in reasoner.calls] == ["boot", "boot"]
        await scheduler.idle()
        await world.service.resolve("incident/done", ALICE)
        assert await scheduler.arm_pending() == 0  # recorded or resolved: nothing pending any more
    finally:
        await scheduler.stop()
        await alarm.shutdown()


# -- asking ----------------------------------------------------------------------------------------------------


async def test_ask_answers_what_changed_and_is_idempotent_by_key(world: World) -> None:
    await alerting_incident(world)
    runtime = world.runtime(context=ContextAgents(world.store, world.index, clock=world.clock))
    first = await runtime.ask(SCOPE, "what changed?", ALICE, key="slack:mention:C1:1.5", question_ts="1.5")
    assert first.status == "recorded"
    answer = (await world.entries("answer"))[0].payload
    assert answer.question == "what changed?" and answer.question_ts == "1.5"
    assert CHANGE in answer.text and "src/db/pool.py" in answer.text
    turn = (await world.entries("agent_turn"))[0].payload
    assert turn.trigger == "ask" and turn.tool_calls[0] == {"tool": "ask", "asked_by": "U0ALICE"}
    assert (await world.store.get_state(SCOPE)).last_turn_seq == 0  # an answer does not cover the range
    again = await runtime.ask(SCOPE, "what changed?", ALICE, key="slack:mention:C1:1.5")
    assert again.status == "duplicate" and len(await world.entries("answer")) == 1
    assert await runtime.answered(SCOPE, "slack:mention:C1:1.5")
    assert not await runtime.answered(SCOPE, "another")


# -- context agents --------------------------------------------------------------------------------------------


async def test_context_agents_append_similar_incidents_and_recent_changes_once(world: World) -> None:
    await world.service.declare(
        title="Payments 5xx after pool change", scope="incident/old", services=["payments"], actor=ALICE
    )
    await world.add("decision", ALICE, {"text": "rolled back the payments pool change"}, scope="incident/old")
    await world.service.resolve("incident/old", ALICE)
    world.clock.advance(hours=30)
    await alerting_incident(world)
    for scope in ("incident/old", CHANGE, SCOPE):
        await world.index.apply(await world.store.get_state(scope), await world.store.read(scope))
    agents = ContextAgents(world.store, world.index, clock=world.clock, link_window_hours=6)
    first = await agents.gather(await world.store.get_state(SCOPE))
    again = await agents.gather(await world.store.get_state(SCOPE))
    assert len(first) == 2 and again == first
    found = {
        e.payload.data["kind"]: e for e in await world.entries("observation") if e.payload.source == "agent:context"
    }
    similar = found["similar_incidents"].payload.data["items"]
    assert [i["scope"] for i in similar] == ["incident/old"] and {"payments", "5xx"} <= set(similar[0]["matched"])
    assert similar[0]["status"] == "resolved" and "[" in similar[0]["snippet"]
    changes = found["recent_changes"].payload.data["items"]
    assert [c["scope"] for c in changes] == [CHANGE] and changes[0]["linked"] is True
    assert found["similar_incidents"].actor.type == "agent"
    # another process (no shared memory) appends nothing either: the keys and the memo are in the scope's file
    other = SqliteLogStore(world.dir, topics=("index",), clock=world.clock)
    try:
        await ContextAgents(other, world.index, clock=world.clock).gather(await other.get_state(SCOPE))
    finally:
        await other.close()
    assert len([e for e in await world.entries("observation") if e.payload.source == "agent:context"]) == 2
    # the incident learns a new service: its recent changes get a fresh look (nothing new here: no entry)
    await world.add("observation", ALERTS, {"text": "ledger errors", "service": "ledger"})
    await agents.gather(await world.store.get_state(SCOPE))
    assert len([e for e in await world.entries("observation") if e.payload.source == "agent:context"]) == 2


def test_turn_delays_come_from_the_environment_then_decklog_toml_then_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from decklog.bot.agents import turn_delays
    from decklog.bot.config import AgentsConfig
    from decklog.bot.settings import Settings

    assert turn_delays(Settings(), AgentsConfig()) == (15.0, 13.0)
    assert turn_delays(Settings(), AgentsConfig(first_turn_delay=30, turn_debounce=5)) == (30.0, 5.0)
    monkeypatch.setenv("DECKLOG_FIRST_TURN_DELAY", "0.5")
    monkeypatch.setenv("DECKLOG_TURN_DEBOUNCE", "0.25")
    assert turn_delays(Settings(), AgentsConfig(first_turn_delay=30, turn_debounce=5)) == (0.5, 0.25)


def test_the_max_wait_comes_from_the_environment_as_seconds_and_must_be_positive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic import ValidationError

    from decklog.bot.settings import Settings

    assert Settings().turn_max_wait == 60.0
    monkeypatch.setenv("DECKLOG_TURN_MAX_WAIT", "2.5")
    assert Settings().turn_max_wait == 2.5
    monkeypatch.setenv("DECKLOG_TURN_MAX_WAIT", "0")
    with pytest.raises(ValidationError, match="DECKLOG_TURN_MAX_WAIT"):
        Settings()


async def test_a_suspect_changes_confidence_comes_from_its_evidence(tmp_path: Path) -> None:
    """Without metrics a linked change is the evidence there is: the closer it landed before the incident, the more
    confident the hypothesis; two linked changes on the service share the suspicion."""

    async def confidence(name: str, minutes: list[int]) -> list[float]:
        async with opened_world(tmp_path / name) as w:
            changes = []
            for n, before in enumerate(minutes):
                change = f"change/payments-r{n}"
                await w.service.declare(
                    title=f"payments r{n}", scope=change, kind="change", services=["payments"], actor=ALERTS
                )
                changes.append((before, change))
                w.clock.advance(seconds=1)
            w.clock.advance(minutes=max(minutes))
            await w.service.declare(
                title="Payments 5xx", scope=SCOPE, severity=2, services=["payments"], actor=ALERTS, via="alert"
            )
            await w.alert()
            for _, change in changes:
                await w.service.link(SCOPE, change, Actor.system("changes"), relation="suspected_cause")
            assert (await w.runtime().run_turn(SCOPE)).status == "recorded"
            return [h.payload.confidence for h in await w.entries("hypothesis")]  # type: ignore[attr-defined]

    (close,) = await confidence("close", [2])
    (far,) = await confidence("far", [50])
    shared = await confidence("shared", [2, 2])
    assert close > far > 0, (close, far)
    assert shared and max(shared) < close, (shared, close)
