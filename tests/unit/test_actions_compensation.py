"""Compensation: undoing a run is a new run with its own proposal, approval and authority, bound to the original
effect's digest by ``effect_compensated``."""

from __future__ import annotations

from pathlib import Path

import pytest

from decklog.core.actions import CompensationKind
from decklog.core.errors import NotFound
from tests.actions_support import AGENT, ALICE, BOB, desk_kit, pid_of
from tests.fakes.service_faults import service_faults


async def _rolled_back(kit) -> tuple[str, str]:
    scope = await kit.declare()
    await kit.alert(scope)
    change = await kit.change(scope)
    line = await kit.desk.propose(
        scope,
        action="rollback_deploy",
        params={"service": "payments", "change": change},
        rationale="r41 broke payments",
        obligation_id=None,
        actor=AGENT,
    )
    pid = pid_of(line)
    await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=ALICE, reason="", key="k-approve")
    report = await kit.desk.execute(scope, pid, receipt="t")
    assert report.status == "applied"
    assert kit.deploy.current_version("payments") == "r40"
    return scope, report.run_id


async def test_compensation_is_its_own_proposal_approval_and_run_bound_to_the_original_digest(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, run_id = await _rolled_back(kit)
        (original,) = await kit.payloads(scope, "action_result")
        reply = await kit.slack.compensate(scope=scope, run_id=run_id, actor=BOB, key="slack:cmd:1")
        assert "to compensate" in reply and "waiting for approval" in reply
        cpid = pid_of(reply)
        prop = (await kit.state(scope)).proposals[cpid]
        assert (prop.action, prop.compensates_run, prop.params) == (
            "restore_deploy",
            run_id,
            {"service": "payments", "to_version": "r41"},
        )
        assert prop.proposer == "U0BOB" and prop.obligation_id
        assert "already proposed" in await kit.slack.compensate(
            scope=scope, run_id=run_id, actor=BOB, key="slack:cmd:2"
        )
        typed = await kit.desk.compensate(scope, run_id, BOB, "slack:cmd:2")
        assert (typed.kind, typed.proposal_id) == (CompensationKind.ALREADY_PROPOSED, cpid)
        assert "(1 of 1)" not in await kit.slack.decide(
            scope=scope, proposal_id=cpid, approve=True, actor=ALICE, reason="", key="k2"
        )
        report = await kit.desk.execute(scope, cpid, receipt="t2")
        assert report.status == "applied" and report.run_id != run_id
        assert kit.deploy.current_version("payments") == "r41"
        (bound,) = await kit.payloads(scope, "effect_compensated")
        results = {r.run_id: r for r in await kit.payloads(scope, "action_result")}
        assert bound.original_run == run_id and bound.original_digest == original.effect_digest
        assert bound.compensating_run == report.run_id
        assert bound.compensating_digest == results[report.run_id].effect_digest
        started = {s.run_id: s for s in await kit.payloads(scope, "action_started")}
        assert started[report.run_id].compensates_run == run_id and started[report.run_id].approvers == ("U0ALICE",)
        assert started[report.run_id].fence > started[run_id].fence
        assert "already compensated" in await kit.slack.compensate(
            scope=scope, run_id=run_id, actor=BOB, key="slack:cmd:3"
        )
        verifying = [o for o in (await kit.state(scope)).obligations.values() if o.run_id == report.run_id]
        assert [o.expected_outcome for o in verifying] == [f"the effect of run {run_id} is undone"]
        assert len(kit.deploy.effects) == 2
        kit.deploy.assert_at_most_once_per_key()
        assert (await kit.store.verify(scope)).ok


async def test_only_an_applied_run_with_a_configured_compensation_can_be_compensated(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        service_faults(kit.deploy).refuse_next(422, "no")
        scope = await kit.declare()
        line = await kit.desk.propose(
            scope, action="poke", params={"target": "x"}, rationale="", obligation_id=None, actor=AGENT
        )
        refused = await kit.desk.execute(scope, pid_of(line), receipt="t")
        assert "no applied effect" in await kit.slack.compensate(
            scope=scope, run_id=refused.run_id, actor=BOB, key="k1"
        )
        line = await kit.desk.propose(
            scope, action="poke", params={"target": "y"}, rationale="", obligation_id=None, actor=AGENT
        )
        applied = await kit.desk.execute(scope, pid_of(line), receipt="t")
        assert "no compensation configured" in await kit.slack.compensate(
            scope=scope, run_id=applied.run_id, actor=BOB, key="k2"
        )
        with pytest.raises(NotFound):
            await kit.slack.compensate(scope=scope, run_id="run-nope", actor=BOB, key="k3")
