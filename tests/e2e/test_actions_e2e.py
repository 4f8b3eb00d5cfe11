"""End to end over the fake Slack and the fake deploy service: an alert on payments 5xx → a linked change →
hypothesis + "roll back only if the safety conditions hold" → the proposal parks in the thread (Approve / Deny,
and in App Home) → a non-approver is refused → Approve → the rollback runs through the executor → the proposal
message shows the outcome → "verification needed" → the alert resolves → verified → resolved."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.local.services import FakeDeployService
from decklog.adapters.local.slack import FakeSlack
from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.outcomes import SlackDesk
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.core.actions import ActionDesk
from decklog.core.entries import Actor, NewEntry
from decklog.core.obligations import open_obligation
from decklog.core.state import ScopeState
from tests.conftest import eventually, test_config

ALICE, BOB = "U0ALICE", "U0BOB"
ALERTS = "C0ALERTS"


@pytest.fixture
async def deploy() -> AsyncIterator[FakeDeployService]:
    async with FakeDeployService() as fake:
        fake.record_deploy("payments", "r40")
        fake.record_deploy("payments", "r41")
        yield fake


@pytest.fixture
async def server(tmp_path: Path, deploy: FakeDeployService) -> AsyncIterator[DecklogServer]:
    """decklog serve with the actions feature only (no agents: the test plays the agent's part itself)."""
    settings = Settings(
        data_dir=tmp_path / "data",
        host="127.0.0.1",
        port=0,
        deploy_api_url=deploy.base_url,
        approvers=ALICE,
    )
    srv = DecklogServer(settings, config=test_config(), parts={"actions"})
    await srv.start()
    yield srv
    await srv.stop()


def _buttons(message: Any) -> set[str]:
    return {
        el.get("action_id")
        for block in message.blocks or []
        if block.get("type") == "actions"
        for el in block.get("elements", [])
    }


def _text(message: Any) -> str:
    return json.dumps(message.blocks or []) + message.text


async def _kinds(server: DecklogServer, scope: str) -> list[str]:
    return [e.kind for e in await server.runtime.store.read(scope)]


async def test_alert_to_approved_rollback_to_verified_to_resolved(
    server: DecklogServer, deploy: FakeDeployService
) -> None:
    rt, fake = server.runtime, server.sandbox
    assert isinstance(fake, FakeSlack)
    desk = server.parts.actions.desk
    assert isinstance(desk, ActionDesk)
    assert {a.name for a in desk.available()} == {"rollback_deploy", "restore_deploy"}  # no status page URL here

    # 03:12 — an alert on elevated payments 5xx opens the incident in #alerts
    declared = await rt.service.declare(
        title="Payments 5xx elevated",
        severity=2,
        services=["payments"],
        via="alert",
        channel=ALERTS,
        actor=Actor.system("alertmanager"),
    )
    scope = declared.state.scope
    await rt.service.record(
        scope,
        "observation",
        {
            "text": "payments 5xx above 5%",
            "source": "alertmanager",
            "service": "payments",
            "fingerprint": "am-payments-5xx",
            "alert_status": "firing",
        },
        Actor.system("alertmanager"),
    )
    state = await eventually(lambda: _threaded(server, scope), what="the incident's thread")
    thread = state.thread.ts
    # the deploy that touched payments is a change scope, linked as the suspected cause
    change = await rt.service.declare(
        title="deploy r41 of payments",
        kind="change",
        scope="change/r2026-09-19-4",
        services=["payments"],
        actor=Actor.system("ci"),
    )
    await rt.service.link(scope, change.state.scope, Actor.system("linker"), relation="suspected_cause")
    agent = Actor.agent("triage", "rule-based")
    await rt.service.record(
        scope, "hypothesis", {"text": "suspect change/r2026-09-19-4", "suspect_scope": "change/r2026-09-19-4"}, agent
    )
    made: list[str] = []

    def oblige(s: ScopeState) -> list[NewEntry]:
        entries = open_obligation(
            s,
            text="roll back change/r2026-09-19-4 only if the safety conditions hold",
            purpose="rollback",
            action="rollback_deploy",
            params={"service": "payments", "change": "change/r2026-09-19-4"},
            conditions=("alert_still_firing", "change_is_latest_on_service", "no_other_run_in_flight"),
            actor=agent,
        )
        made.append(entries[0].payload.obligation_id)  # type: ignore[attr-defined]
        return entries

    await rt.store.append(scope, oblige)
    await rt.dispatcher.idle()  # the index knows the change scope (the drift check reads it)

    # the agent proposes; the proposal parks in the thread with Approve / Deny
    line = await desk.propose(
        scope,
        action="rollback_deploy",
        params={"service": "payments", "change": "change/r2026-09-19-4"},
        rationale="r41 went out 9 minutes before the 5xx started",
        obligation_id=made[0],
        actor=agent,
    )
    assert line.startswith("parked p-")
    pid = line.split()[1]
    parked = await eventually(
        lambda: [m for m in fake.workspace.thread(ALERTS, thread) if Action.PROPOSAL_APPROVE in _buttons(m)],
        what="the parked proposal in the thread",
    )
    message = parked[0]
    assert pid in _text(message) and "risk *R2*" in _text(message) and "alert_still_firing" in _text(message)
    assert "Evidence: #" in _text(message)

    # App Home lists it under pending approvals
    await fake.open_home("alice")
    home = await eventually(lambda: fake.workspace.home(ALICE), what="Alice's App Home")
    assert pid in json.dumps(home.body)

    # Bob may not approve: he is told so, ephemerally, and the attempt is recorded
    await fake.click_button("bob", ALERTS, message.ts, Action.PROPOSAL_APPROVE)
    refusal = await eventually(
        lambda: [r for r in fake.server.responses if "You may not approve" in r.body.get("text", "")],
        what="Bob's ephemeral refusal",
    )
    assert refusal[0].body.get("response_type") == "ephemeral"
    await eventually(lambda: _has(server, scope, "approval_refused"), what="the recorded refusal")
    assert deploy.effects == []

    # Alice approves: the rollback runs through the executor under a fenced authority
    await fake.click_button("alice", ALERTS, message.ts, Action.PROPOSAL_APPROVE)
    await eventually(
        lambda: [e for e in deploy.effects if e.kind == "rollback_deploy"], what="the rollback at the target"
    )
    assert deploy.current_version("payments") == "r40"
    results = await eventually(
        lambda: rt.store.read(scope, kinds=["action_result"]), what="the run's result in the log"
    )
    assert results[-1].payload.outcome == "applied"  # type: ignore[attr-defined]
    started = (await rt.store.read(scope, kinds=["action_started"]))[0].payload
    assert started.approvers == (ALICE,) and started.fence >= 1  # type: ignore[attr-defined]
    assert deploy.calls[0].headers["Idempotency-Key"] == started.idempotency_key  # type: ignore[attr-defined]

    # the proposal's own message is updated in place with the outcome (no buttons any more)
    await eventually(
        lambda: "Approved and applied" in _text(fake.workspace.message(ALERTS, message.ts)),
        what="the proposal message updated in place",
    )
    assert not _buttons(fake.workspace.message(ALERTS, message.ts))

    # "verification needed", carrying the run and the expected outcome
    verifying = [o for o in (await rt.store.get_state(scope)).obligations.values() if o.purpose == "verification"]
    assert len(verifying) == 1 and verifying[0].run_id == started.run_id  # type: ignore[attr-defined]
    assert verifying[0].expected_outcome == "the alerts on payments resolve"

    # the alert resolves → the rule-based verification records "verified"
    await rt.service.record(
        scope,
        "observation",
        {
            "text": "payments 5xx back under 1%",
            "source": "alertmanager",
            "service": "payments",
            "fingerprint": "am-payments-5xx",
            "alert_status": "resolved",
        },
        Actor.system("alertmanager"),
    )
    verification = await eventually(lambda: rt.store.read(scope, kinds=["verification"]), what="the verification entry")
    assert verification[0].payload.outcome == "verified"  # type: ignore[attr-defined]
    assert verification[0].payload.run_id == started.run_id  # type: ignore[attr-defined]
    await eventually(
        lambda: any("Verification verified" in m.text for m in fake.workspace.thread(ALERTS, thread)),
        what="the verification in the thread",
    )

    # resolved from the header's button
    header = fake.workspace.message(ALERTS, thread)
    await fake.click_button("alice", ALERTS, header.ts, Action.RESOLVE)
    await eventually(lambda: _status(server, scope, "resolved"), what="the incident resolved")
    final = await rt.store.get_state(scope)
    assert not final.obligations and not final.proposals and not final.runs
    assert (await rt.store.verify(scope)).ok
    deploy.assert_at_most_once_per_key()


async def test_approve_and_deny_by_mention_in_the_thread(server: DecklogServer, deploy: FakeDeployService) -> None:
    rt, fake = server.runtime, server.sandbox
    declared = await rt.service.declare(title="Checkout errors", channel=ALERTS, actor=Actor.human(ALICE, "alice"))
    scope = declared.state.scope
    state = await eventually(lambda: _threaded(server, scope), what="the thread")
    desk = server.parts.actions.desk
    first = (
        await desk.propose(
            scope,
            action="restore_deploy",
            params={"service": "payments", "to_version": "r40"},
            rationale="",
            obligation_id=None,
            actor=Actor.human(BOB, "bob"),
        )
    ).split()[1]
    await fake.post_message("bob", ALERTS, f"@decklog approve {first}", thread_ts=state.thread.ts)
    await eventually(
        lambda: [e for e in fake.workspace.ephemerals(user=BOB) if "You may not approve" in e.text],
        what="Bob's ephemeral refusal",
    )
    await fake.post_message("alice", ALERTS, f"@decklog deny {first} not now", thread_ts=state.thread.ts)
    denial = await eventually(lambda: rt.store.read(scope, kinds=["approval"]), what="the denial")
    assert denial[0].payload.decision == "denied" and denial[0].payload.reason == "not now"  # type: ignore[attr-defined]
    proposal_post = await eventually(
        lambda: [
            m for m in fake.workspace.thread(ALERTS, state.thread.ts) if first in _text(m) and "Denied" in _text(m)
        ],
        what="the proposal message showing the denial",
    )
    assert not _buttons(proposal_post[0])
    assert deploy.effects == []


async def _threaded(server: DecklogServer, scope: str) -> Any:
    state = await server.runtime.store.get_state(scope)
    return state if state.thread else None


async def _has(server: DecklogServer, scope: str, kind: str) -> bool:
    return kind in await _kinds(server, scope)


async def _status(server: DecklogServer, scope: str, status: str) -> bool:
    return (await server.runtime.store.get_state(scope)).status == status


async def test_with_every_feature_wired_the_desk_is_the_agents_proposer_and_catalog(
    make_server: Any, deploy: FakeDeployService
) -> None:

    server = await make_server(deploy_api_url=deploy.base_url, approvers=ALICE)
    runtime = server.parts.agents.turns
    assert runtime.proposer is server.parts.actions.desk
    offered = runtime.catalog.available()
    assert {"rollback_deploy", "restore_deploy"} <= {a.name for a in offered}
    rollback = next(a for a in offered if a.name == "rollback_deploy")
    assert rollback.risk == "R2" and "change_is_latest_on_service" in rollback.safety_conditions
    assert rollback.params_schema["service"]["required"] is True
    slack = server.parts.slack.hooks.decide.__self__  # the Slack rendering of the desk's typed outcomes
    assert isinstance(slack, SlackDesk) and slack.desk is server.parts.actions.desk
    assert server.parts.slack.hooks.compensate == slack.compensate


async def test_compensate_from_the_thread_is_a_new_approved_run_bound_to_the_original(
    server: DecklogServer, deploy: FakeDeployService
) -> None:
    rt, fake = server.runtime, server.sandbox
    alert = {
        "text": "5xx",
        "source": "alertmanager",
        "service": "payments",
        "fingerprint": "fp",
        "alert_status": "firing",
    }
    scope = (await rt.service.declare(title="Payments 5xx", channel=ALERTS, actor=Actor.system("am"))).state.scope
    await rt.service.record(scope, "observation", alert, Actor.system("am"))
    thread = (await eventually(lambda: _threaded(server, scope), what="the thread")).thread.ts
    await rt.service.declare(
        title="r41", kind="change", scope="change/r41", services=["payments"], actor=Actor.system("ci")
    )
    await rt.service.link(scope, "change/r41", Actor.system("linker"), relation="suspected_cause")
    await rt.dispatcher.idle()
    desk = server.parts.actions.desk
    line = await desk.propose(
        scope,
        action="rollback_deploy",
        params={"service": "payments"},
        rationale="",
        obligation_id=None,
        actor=Actor.human(BOB, "bob"),
    )
    pid = line.split()[1]
    await fake.post_message("alice", ALERTS, f"@decklog approve {pid}", thread_ts=thread)
    started = await eventually(lambda: rt.store.read(scope, kinds=["action_result"]), what="the rollback's result")
    run_id = started[0].payload.run_id  # type: ignore[attr-defined]
    assert deploy.current_version("payments") == "r40"
    await fake.post_message("bob", ALERTS, f"@decklog compensate {run_id}", thread_ts=thread)
    reply = await eventually(
        lambda: [e for e in fake.workspace.ephemerals(user=BOB) if "to compensate" in e.text], what="Bob's reply"
    )
    cpid = reply[0].text.split("`")[1]
    parked = await eventually(
        lambda: [
            m
            for m in fake.workspace.thread(ALERTS, thread)
            if cpid in _text(m) and Action.PROPOSAL_APPROVE in _buttons(m)
        ],
        what="the compensation parked with its own Approve / Deny",
    )
    assert f"Compensates `{run_id}`" in _text(parked[0])
    await fake.click_button("alice", ALERTS, parked[0].ts, Action.PROPOSAL_APPROVE)
    bound = await eventually(lambda: rt.store.read(scope, kinds=["effect_compensated"]), what="effect_compensated")
    assert bound[0].payload.original_run == run_id  # type: ignore[attr-defined]
    assert deploy.current_version("payments") == "r41" and len(deploy.effects) == 2
