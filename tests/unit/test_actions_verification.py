"""After an applied run: "verification needed", carrying the run and the expected outcome, decided by the rules
against later evidence — verified when the alerts resolve, failed when they still fire at the due time."""

from __future__ import annotations

from pathlib import Path

from decklog.core.actions import Verified
from decklog.core.clock import ManualClock
from tests.actions_support import AGENT, ALICE, desk_kit, pid_of


async def _applied_rollback(kit) -> tuple[str, str]:
    scope = await kit.declare()
    await kit.alert(scope)
    change = await kit.change(scope)
    line = await kit.desk.propose(
        scope,
        action="rollback_deploy",
        params={"service": "payments", "change": change},
        rationale="",
        obligation_id=None,
        actor=AGENT,
    )
    await kit.slack.decide(scope=scope, proposal_id=pid_of(line), approve=True, actor=ALICE, reason="", key="k")
    report = await kit.desk.execute(scope, pid_of(line), receipt="t")
    assert report.status == "applied"
    return scope, report.run_id


async def test_resolved_alerts_verify_the_run(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, run_id = await _applied_rollback(kit)
        (ob,) = (await kit.state(scope)).obligations.values()
        assert (ob.purpose, ob.run_id, ob.expected_outcome, ob.conditions) == (
            "verification",
            run_id,
            "the alerts on payments resolve",
            ("alerts_resolved",),
        )
        assert await kit.desk.verify(scope) == []  # still firing, not due: nothing to decide yet
        await kit.alert(scope, "resolved")
        assert await kit.desk.verify(scope) == [Verified(ob.id, "verified")]
        (v,) = await kit.payloads(scope, "verification")
        assert (v.outcome, v.run_id, v.expected) == ("verified", run_id, "the alerts on payments resolve")
        entry = (await kit.entries(scope, "verification"))[0]
        assert entry.actor.type == "agent" and entry.refs  # agent-inferred, with its evidence
        assert not (await kit.state(scope)).obligations


async def test_alerts_still_firing_when_due_fail_the_verification_and_suggest_compensating(tmp_path: Path) -> None:
    clock = ManualClock()
    async with desk_kit(tmp_path, clock=clock) as kit:
        scope, run_id = await _applied_rollback(kit)
        clock.advance(minutes=10)
        assert (await kit.desk.sweep()).verifications == []
        clock.advance(minutes=6)
        report = await kit.desk.sweep()
        assert len(report.verifications) == 1 and str(report.verifications[0]).endswith("failed")
        (v,) = await kit.payloads(scope, "verification")
        assert v.outcome == "failed" and "still firing on payments" in v.observed
        (follow_up,) = (await kit.state(scope)).obligations.values()
        assert follow_up.purpose == "follow_up" and f"/incident compensate {run_id}" in follow_up.text
