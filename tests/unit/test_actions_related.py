"""The ``not_run_in_related_incident`` safety condition through the action desk: one cause opens two incidents, and
the mitigation applied in the first is not applied again from the second — at proposal (a failing check the approver
sees), at approval (a run next door meanwhile is drift), and right before the call (the runner skips)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from decklog.core.actions.conditions import Evidence, RelatedRun, evaluate
from decklog.core.entries import Actor
from decklog.core.state import empty_state
from tests.actions_support import AGENT, BOB, Kit, desk_kit, effect_action, pid_of, restore_action, rollback_action

GUARDED = ["not_run_in_related_incident"]
PARAMS = {"service": "payments", "change": "change/r2026-09-19-4"}


def guarded_rollback() -> dict[str, Any]:
    return rollback_action(safety_conditions=GUARDED)


async def _incident(kit: Kit, title: str) -> tuple[str, str]:
    """An incident on payments with the same deploy linked as its suspected cause (made with the first one)."""
    scope = await kit.declare(title)
    await kit.alert(scope)
    if await kit.store.exists(PARAMS["change"]):
        await kit.service.link(scope, PARAMS["change"], Actor.system("linker"), relation="suspected_cause")
        await kit.settle()
    else:
        await kit.change(scope)
    ob = await kit.obligation(scope, purpose="rollback", action="rollback_deploy", params={"service": "payments"})
    return scope, ob


async def _propose(kit: Kit, scope: str, ob: str) -> str:
    line = await kit.desk.propose(
        scope,
        action="rollback_deploy",
        params=PARAMS,
        rationale="the deploy raised the 5xx rate",
        obligation_id=ob,
        actor=AGENT,
    )
    assert line.startswith("parked p-"), line
    await kit.settle()
    return pid_of(line)


async def _approve_and_run(kit: Kit, scope: str, pid: str, key: str) -> Any:
    reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=BOB, reason="", key=key)
    assert "runs now" in reply, reply
    report = await kit.desk.execute(scope, pid, receipt=key)
    await kit.settle()
    return report


async def test_a_rollback_applied_in_a_sibling_incident_is_not_applied_again(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, actions=[guarded_rollback(), restore_action(), effect_action()]) as kit:
        first, ob1 = await _incident(kit, "Payments 5xx")
        pid1 = await _propose(kit, first, ob1)
        assert (await _approve_and_run(kit, first, pid1, "k1")).status == "applied"
        assert len(kit.deploy.effects) == 1

        second, ob2 = await _incident(kit, "Checkout 5xx on payments")
        pid2 = await _propose(kit, second, ob2)
        made = next(p for p in await kit.payloads(second, "proposal") if p.proposal_id == pid2)
        check = next(c for c in made.checks if c["name"] == "not_run_in_related_incident")
        assert not check["ok"] and f"already applied in {first}" in check["detail"], check
        report = await _approve_and_run(kit, second, pid2, "k2")
        assert report.status == "skipped" and f"already applied in {first}" in report.detail
        assert len(kit.deploy.effects) == 1  # one rollback, not two


async def test_a_run_next_door_between_proposal_and_approval_is_drift(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, actions=[guarded_rollback(), restore_action(), effect_action()]) as kit:
        first, ob1 = await _incident(kit, "Payments 5xx")
        second, ob2 = await _incident(kit, "Checkout 5xx on payments")
        pid1, pid2 = await _propose(kit, first, ob1), await _propose(kit, second, ob2)
        assert (await _approve_and_run(kit, first, pid1, "k1")).status == "applied"
        reply = await kit.slack.decide(scope=second, proposal_id=pid2, approve=True, actor=BOB, reason="", key="k2")
        assert "not_run_in_related_incident" in reply and f"already applied in {first}" in reply, reply
        closed = (await kit.payloads(second, "proposal_closed"))[0]
        assert closed.outcome == "voided"
        assert len(kit.deploy.effects) == 1


def test_the_condition_passes_with_no_related_run_and_names_the_newest_when_there_are_some() -> None:
    state = empty_state("incident/payments-5xx")
    ok = evaluate(GUARDED, state, Evidence(), PARAMS)[0]
    assert ok.ok and ok.detail == "not run on this target in a related incident"
    runs = (
        RelatedRun("incident/a", "applied", "2026-09-19T03:10:00Z", "incident/a#9", "service payments"),
        RelatedRun("incident/b", "uncertain", "2026-09-19T03:12:00Z", "incident/b#4", "declared within 1 h"),
    )
    failed = evaluate(GUARDED, state, Evidence(related_runs=runs), PARAMS)[0]
    assert not failed.ok
    assert failed.detail == (
        "already uncertain in incident/b at 2026-09-19T03:12:00Z (incident/b#4, related: declared within 1 h)"
        " (and 1 more)"
    )


async def test_two_siblings_starting_at_once_apply_it_once(tmp_path: Path) -> None:
    """Both approved, both run at the same moment: the (action, target) gate makes the second runner's last check see
    the first one's start (core/actions/run_targets.py)."""
    async with desk_kit(tmp_path, actions=[guarded_rollback(), restore_action(), effect_action()]) as kit:
        first, ob1 = await _incident(kit, "Payments 5xx")
        second, ob2 = await _incident(kit, "Checkout 5xx on payments")
        pid1, pid2 = await _propose(kit, first, ob1), await _propose(kit, second, ob2)
        for scope, pid, key in ((first, pid1, "k1"), (second, pid2, "k2")):
            reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=BOB, reason="", key=key)
            assert "runs now" in reply, reply
        reports = await asyncio.gather(
            kit.desk.execute(first, pid1, receipt="r1"), kit.desk.execute(second, pid2, receipt="r2")
        )
        assert sorted(r.status for r in reports) == ["applied", "skipped"], reports
        assert len(kit.deploy.effects) == 1
        assert kit.desk.runner.gate._locks == {}  # nothing left behind
