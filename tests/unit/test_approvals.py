"""The approval policy end to end through the action desk: who may decide, R3, R4, expiry, drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from decklog.adapters.slack.outcomes import decision_text
from decklog.core.actions import DecisionKind, DecisionOutcome
from decklog.core.clock import ManualClock
from decklog.core.entries import Approval, ApprovalRefused, ProposalClosed, ProposalMade
from decklog.core.errors import Forbidden, InvalidInput, NotFound
from tests.actions_support import (
    AGENT,
    ALICE,
    BOB,
    CAROL,
    MALLORY,
    desk_kit,
    effect_action,
    pid_of,
    restore_action,
    rollback_action,
)


async def _parked_rollback(kit, *, actor=AGENT) -> tuple[str, str, str]:
    scope = await kit.declare()
    await kit.alert(scope)
    change = await kit.change(scope)
    ob = await kit.obligation(scope, purpose="rollback", action="rollback_deploy", params={"service": "payments"})
    line = await kit.desk.propose(
        scope,
        action="rollback_deploy",
        params={"service": "payments", "change": change},
        rationale="r2026-09-19-4 raised the 5xx rate",
        obligation_id=ob,
        actor=actor,
    )
    assert line.startswith("parked p-")
    await kit.settle()
    return scope, pid_of(line), ob


async def test_an_unauthorised_approver_gets_a_refusal_and_the_attempt_is_recorded(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, pid, _ob = await _parked_rollback(kit)
        reply = await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=MALLORY, reason="", key="slack:act:1"
        )
        assert "You may not approve" in reply and "not one of the configured approvers" in reply
        refused = await kit.payloads(scope, "approval_refused")
        assert refused == [ApprovalRefused(proposal_id=pid, user_id="U0MALLORY", reason=refused[0].reason)]
        assert (await kit.state(scope)).proposals[pid].status == "waiting_for_approval"
        reply = await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=False, actor=MALLORY, reason="no", key="slack:act:2"
        )
        assert "You may not deny" in reply
        assert len(await kit.payloads(scope, "approval_refused")) == 2
        assert await kit.payloads(scope, "approval") == []
        # a repeated delivery of the same click records nothing new
        again = await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=MALLORY, reason="", key="slack:act:1"
        )
        assert "You may not approve" in again
        assert len(await kit.payloads(scope, "approval_refused")) == 2
        typed = await kit.desk.decide(scope, pid, True, MALLORY, "", "slack:act:1")  # core answers with a type
        assert typed.kind is DecisionKind.REFUSED and typed.proposal_id == pid and "approvers" in typed.reason
        assert len(await kit.payloads(scope, "approval_refused")) == 2


async def test_an_agent_never_approves(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, approvers=("triage",)) as kit:
        scope, pid, _ob = await _parked_rollback(kit)
        reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=AGENT, reason="", key="k")
        assert "only a person can approve" in reply


async def test_no_configured_approvers_means_nobody_can_approve_and_says_how_to_fix_it(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, approvers=()) as kit:
        scope, pid, _ob = await _parked_rollback(kit)
        reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=ALICE, reason="", key="k")
        assert "DECKLOG_APPROVERS" in reply


async def test_r2_any_approver_may_approve_even_the_proposer(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, pid, _ob = await _parked_rollback(kit, actor=ALICE)
        reply = await kit.slack.decide(
            scope=None, proposal_id=pid, approve=True, actor=ALICE, reason="", key="k"
        )  # no scope: found through the index
        assert reply.startswith(":white_check_mark: Approved") and "runs now" in reply
        assert (await kit.state(scope)).proposals[pid].status == "approved"


async def test_r3_needs_distinct_approvers_other_than_the_proposer(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, actions=[effect_action("drain_node", "R3")], r3_approvals=2) as kit:
        scope = await kit.declare()
        line = await kit.desk.propose(
            scope,
            action="drain_node",
            params={"target": "node-7"},
            rationale="bad disk",
            obligation_id=None,
            actor=ALICE,
        )
        pid = pid_of(line)
        prop = (await kit.state(scope)).proposals[pid]
        assert (prop.risk, prop.approvals_required, prop.proposer) == ("R3", 2, "U0ALICE")
        reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=ALICE, reason="", key="k1")
        assert "R3 actions need an approver other than the proposer" in reply
        reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=BOB, reason="", key="k2")
        assert "(1 of 2)" in reply
        reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=BOB, reason="", key="k3")
        assert "already approved" in reply
        assert (await kit.state(scope)).proposals[pid].status == "waiting_for_approval"
        assert "runs now" in await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=CAROL, reason="", key="k4"
        )
        report = await kit.desk.execute(scope, pid, receipt="test")
        assert report.status == "applied"
        started = (await kit.payloads(scope, "action_started"))[0]
        assert (started.proposer, started.approvers) == ("U0ALICE", ("U0BOB", "U0CAROL"))
        refusals = [r.reason for r in await kit.payloads(scope, "approval_refused")]
        assert len(refusals) == 2


async def test_r4_is_denied_when_proposed_with_the_reason_recorded(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, actions=[effect_action("drop_database", "R4")]) as kit:
        scope = await kit.declare()
        line = await kit.desk.propose(
            scope,
            action="drop_database",
            params={"target": "payments"},
            rationale="why not",
            obligation_id=None,
            actor=AGENT,
        )
        assert line.startswith("denied p-") and "never run by decklog" in line
        pid = pid_of(line)
        made = await kit.payloads(scope, "proposal")
        assert len(made) == 1 and made[0].status == "denied" and "R4" in made[0].reason
        state = await kit.state(scope)
        assert pid not in state.proposals and not state.obligations
        assert "denied by policy" in await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=ALICE, reason="", key="k"
        )
        assert (await kit.desk.execute(scope, pid, receipt="t")).status == "not_runnable"
        assert kit.deploy.effects == []


async def test_a_parked_proposal_expires_and_the_sweep_records_it(tmp_path: Path) -> None:
    clock = ManualClock()
    async with desk_kit(tmp_path, clock=clock) as kit:
        scope, pid, ob = await _parked_rollback(kit)
        clock.advance(minutes=29)
        assert (await kit.desk.sweep()).proposals_expired == 0
        clock.advance(minutes=2)
        report = await kit.desk.sweep()
        assert report.proposals_expired == 1
        closed = await kit.payloads(scope, "proposal_closed")
        assert closed == [ProposalClosed(proposal_id=pid, outcome="expired", reason="not approved within 30 minutes")]
        reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=ALICE, reason="", key="k")
        assert "closed (expired" in reply
        state = await kit.state(scope)
        assert pid not in state.proposals and ob in state.obligations  # the obligation stays: a person decides next


async def test_approving_after_expiry_closes_the_proposal_instead(tmp_path: Path) -> None:
    clock = ManualClock()
    async with desk_kit(tmp_path, clock=clock) as kit:
        scope, pid, _ob = await _parked_rollback(kit)
        clock.advance(minutes=31)
        reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=ALICE, reason="", key="k")
        assert reply.startswith(":hourglass:") and "nothing will run" in reply
        assert [c.outcome for c in await kit.payloads(scope, "proposal_closed")] == ["expired"]
        assert await kit.payloads(scope, "approval") == []


async def test_drift_voids_the_approval_tells_why_and_re_evaluates(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, pid, ob = await _parked_rollback(kit)
        await kit.alert(scope, "resolved")  # the evidence the safety conditions read has changed
        reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=BOB, reason="", key="k")
        assert reply.startswith(":warning: Your approval of") and "alert_still_firing" in reply
        assert "every alert on payments has resolved" in reply
        closed = (await kit.payloads(scope, "proposal_closed"))[0]
        assert closed.outcome == "voided" and "alert_still_firing" in closed.reason
        made = await kit.payloads(scope, "proposal")
        assert len(made) == 2 and made[1].proposal_id in reply
        again = made[1]
        assert again.obligation_id == ob and again.proposer == "triage" and "re-evaluated" in again.reason
        assert [c["ok"] for c in again.checks if c["name"] == "alert_still_firing"] == [False]
        state = await kit.state(scope)
        assert pid not in state.proposals
        assert state.proposals[again.proposal_id].proposer == "triage"
        assert await kit.payloads(scope, "approval") == []
        # approving the re-evaluated proposal works; the run then re-checks the conditions and does not act
        assert "runs now" in await kit.slack.decide(
            scope=scope, proposal_id=again.proposal_id, approve=True, actor=BOB, reason="", key="k2"
        )
        report = await kit.desk.execute(scope, again.proposal_id, receipt="t")
        assert report.status == "skipped" and "alert_still_firing" in report.detail
        assert kit.deploy.effects == []


async def test_a_newer_change_on_the_service_is_drift(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, pid, _ob = await _parked_rollback(kit)
        await kit.service.declare(
            title="deploy r5", kind="change", scope="change/r2026-09-19-5", services=["payments"], actor=ALICE
        )
        await kit.settle()
        reply = await kit.slack.decide(scope=scope, proposal_id=pid, approve=True, actor=BOB, reason="", key="k")
        assert "change_is_latest_on_service" in reply and "change/r2026-09-19-5 came after it" in reply


async def test_unrelated_entries_are_not_drift(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, pid, _ob = await _parked_rollback(kit)
        await kit.alert(scope)  # a repeat of the same firing alert
        await kit.service.record(scope, "message", {"text": "looking"}, BOB)
        assert "runs now" in await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=BOB, reason="", key="k"
        )


async def test_deny_by_an_approver_or_withdrawal_by_the_proposer(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, pid, ob = await _parked_rollback(kit)
        reply = await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=False, actor=CAROL, reason="the change is fine", key="k"
        )
        assert reply.startswith(":no_entry_sign: Denied")
        assert await kit.payloads(scope, "approval") == [
            Approval(
                proposal_id=pid,
                decision="denied",
                approver="U0CAROL",
                approver_name="carol",
                reason="the change is fine",
            )
        ]
        assert "already denied by carol" in await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=ALICE, reason="", key="k2"
        )
        assert (await kit.desk.execute(scope, pid, receipt="t")).status == "not_runnable"
        line = await kit.desk.propose(
            scope,
            action="rollback_deploy",
            params={"service": "payments"},
            rationale="again",
            obligation_id=ob,
            actor=MALLORY,
        )
        mine = pid_of(line)
        assert "Denied" in await kit.slack.decide(
            scope=scope, proposal_id=mine, approve=False, actor=MALLORY, reason="", key="k3"
        )  # the proposer withdraws


async def test_an_approver_group_narrows_who_may_approve(tmp_path: Path) -> None:
    actions = [rollback_action(approver_group="sre"), restore_action()]
    async with desk_kit(tmp_path, actions=actions, groups={"sre": ("U0BOB",)}) as kit:
        scope, pid, _ob = await _parked_rollback(kit)
        assert "not one of the sre group" in await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=ALICE, reason="", key="k1"
        )
        assert "runs now" in await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=BOB, reason="", key="k2"
        )


async def test_slack_user_group_approvers_are_resolved_through_the_port(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, approvers=("S0ONCALL",)) as kit:

        async def members(group: str) -> frozenset[str]:
            return frozenset({"U0CAROL"}) if group == "S0ONCALL" else frozenset()

        kit.desk.groups = members
        scope, pid, _ob = await _parked_rollback(kit)
        assert "You may not approve" in await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=BOB, reason="", key="k1"
        )
        assert "runs now" in await kit.slack.decide(
            scope=scope, proposal_id=pid, approve=True, actor=CAROL, reason="", key="k2"
        )


async def test_equal_arguments_look_equal_and_are_proposed_once(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, pid, ob = await _parked_rollback(kit)
        first = (await kit.state(scope)).proposals[pid]
        line = await kit.desk.propose(
            scope,
            action="rollback_deploy",
            params={"change": first.params["change"], "service": "  PAYMENTS "},
            rationale="same again",
            obligation_id=ob,
            actor=AGENT,
        )
        assert line.startswith(f"already parked as {pid}")
        assert len(await kit.payloads(scope, "proposal")) == 1
        assert first.preview == 'rollback_deploy(change="change/r2026-09-19-4", service="payments")'
        assert first.args_hash.startswith("sha256:")


async def test_bad_parameters_are_refused_naming_the_parameter(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope = await kit.declare()
        with pytest.raises(InvalidInput, match=r"params\.service: is required"):
            await kit.desk.propose(
                scope, action="rollback_deploy", params={}, rationale="", obligation_id=None, actor=AGENT
            )
        with pytest.raises(InvalidInput, match=r"params\.colour: unknown parameter"):
            await kit.desk.propose(
                scope,
                action="rollback_deploy",
                params={"service": "x", "colour": 1},
                rationale="",
                obligation_id=None,
                actor=AGENT,
            )
        with pytest.raises(InvalidInput, match=r"params\.n: must be an integer"):
            await kit.desk.propose(
                scope, action="poke", params={"target": "x", "n": "many"}, rationale="", obligation_id=None, actor=AGENT
            )
        with pytest.raises(NotFound, match="no action named 'reboot_world'"):
            await kit.desk.propose(
                scope, action="reboot_world", params={}, rationale="", obligation_id=None, actor=AGENT
            )
        with pytest.raises(NotFound, match="no open obligation ob-nope"):
            await kit.desk.propose(
                scope, action="poke", params={"target": "x"}, rationale="", obligation_id="ob-nope", actor=AGENT
            )
        assert await kit.payloads(scope, "proposal") == []


async def test_an_action_whose_executor_url_is_unset_is_listed_unavailable_and_never_proposed(tmp_path: Path) -> None:
    actions = [rollback_action(compensation=None), effect_action()]
    actions[0]["executor"] = {**actions[0]["executor"], "url": "${NOT_SET_ANYWHERE}/rollback"}
    async with desk_kit(tmp_path, actions=actions) as kit:
        listing = {a.name: a for a in kit.desk.listing()}
        assert not listing["rollback_deploy"].available
        assert listing["rollback_deploy"].unavailable_reason == "NOT_SET_ANYWHERE is not set"
        assert [a.name for a in kit.desk.available()] == ["poke"]
        scope = await kit.declare()
        with pytest.raises(Forbidden, match="unavailable"):
            await kit.desk.propose(
                scope,
                action="rollback_deploy",
                params={"service": "payments"},
                rationale="",
                obligation_id=None,
                actor=AGENT,
            )
        assert await kit.payloads(scope, "proposal") == []


async def test_a_new_proposal_on_the_same_obligation_supersedes_a_parked_one(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, pid, ob = await _parked_rollback(kit)
        line = await kit.desk.propose(
            scope,
            action="rollback_deploy",
            params={"service": "payments", "to_version": "r39"},
            rationale="further back",
            obligation_id=ob,
            actor=AGENT,
        )
        newer = pid_of(line)
        closed = await kit.payloads(scope, "proposal_closed")
        assert closed == [ProposalClosed(proposal_id=pid, outcome="superseded", reason=f"superseded by {newer}")]
        assert set((await kit.state(scope)).proposals) == {newer}
        made = await kit.payloads(scope, "proposal")
        assert all(isinstance(m, ProposalMade) for m in made)


async def test_an_approval_that_bypassed_the_desk_does_not_run(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, pid, _ob = await _parked_rollback(kit)
        forged = Approval(proposal_id=pid, decision="approved", approver="U0MALLORY")
        await kit.service.record(scope, "approval", forged, MALLORY)  # e.g. `decklog append … approval`
        assert (await kit.state(scope)).proposals[pid].status == "approved"
        report = await kit.desk.execute(scope, pid, receipt="t")
        assert report.status == "withdrawn" and "do not satisfy the policy" in report.detail
        assert (await kit.payloads(scope, "proposal_closed"))[0].outcome == "withdrawn"
        assert kit.deploy.effects == []


async def test_a_proposal_recorded_with_a_lower_risk_than_configured_does_not_run(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope = await kit.declare()
        forged = ProposalMade(
            proposal_id="p-000001",
            action="rollback_deploy",
            params={"service": "payments"},
            risk="R1",
            status="approved",
        )
        await kit.service.record(scope, "proposal", forged, MALLORY)
        report = await kit.desk.execute(scope, "p-000001", receipt="t")
        assert report.status == "withdrawn" and "rollback_deploy is R2" in report.detail
        assert kit.deploy.effects == []


def test_every_decision_outcome_has_its_own_slack_text() -> None:
    texts = {decision_text(DecisionOutcome(kind, "p-1", reason="why — because", status="ran")) for kind in DecisionKind}
    assert len(texts) == len(DecisionKind) and all("`p-1`" in t for t in texts)
