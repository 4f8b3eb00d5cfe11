"""Executors over real loopback HTTP against the fake deploy service and the fake Statuspage: applied, refused,
uncertain (500, timeout, a dropped response) → reconcile → applied / not_applied, or abandon_uncertain."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import aiohttp

from decklog.adapters.executors.http import HttpExecutor
from decklog.adapters.executors.statuspage import StatuspageExecutor
from decklog.adapters.local.services import FakeDeployService, FakeStatuspage
from decklog.core.actions import ExecutionRequest, idempotency_key
from decklog.core.entries import ActionResult
from tests.actions_support import AGENT, desk_kit, effect_action, pid_of
from tests.fakes.polling import wait_for
from tests.fakes.service_faults import service_faults


async def _run(kit, *, action: str = "poke", target: str = "db-1") -> tuple[str, ActionResult]:
    scope = await kit.declare()
    line = await kit.desk.propose(
        scope, action=action, params={"target": target}, rationale="test", obligation_id=None, actor=AGENT
    )
    report = await kit.desk.execute(scope, pid_of(line), receipt="test")
    results = await kit.payloads(scope, "action_result")
    assert results and results[-1].outcome == report.status
    return scope, results[-1]


def _effect_calls(fake: FakeDeployService) -> list:
    return [c for c in fake.calls if c.path == "/effect"]


async def test_applied_records_the_body_and_its_sha256_as_the_effect_digest(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        scope, result = await _run(kit)
        (call,) = _effect_calls(kit.deploy)
        started = (await kit.payloads(scope, "action_started"))[0]
        assert call.body == {
            "action": "poke",
            "params": {"n": 1, "target": "db-1"},
            "scope": scope,
            "run_id": started.run_id,
            "fence": started.fence,
            "idempotency_key": started.idempotency_key,
        }
        assert call.headers["Idempotency-Key"] == started.idempotency_key
        assert started.idempotency_key == idempotency_key(scope, started.run_id, started.fence)
        assert kit.deploy.protocol_errors == []
        body = json.dumps(kit.deploy.effects[0].response).encode()
        assert result.effect_digest == "sha256:" + hashlib.sha256(body).hexdigest()
        assert result.response["status"] == "applied" and result.fence == started.fence and not result.reconciled
        state = await kit.state(scope)
        assert not state.obligations and not state.proposals and not state.runs


async def test_a_4xx_is_refused_and_nothing_is_applied(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        service_faults(kit.deploy).refuse_next(409, "change freeze")
        scope, result = await _run(kit)
        assert result.outcome == "refused" and result.error == "HTTP 409: change freeze"
        assert kit.deploy.effects == [] and len(_effect_calls(kit.deploy)) == 1
        cancelled = await kit.payloads(scope, "obligation_cancelled")
        assert len(cancelled) == 1 and "change freeze" in cancelled[0].reason


async def test_a_500_is_uncertain_then_reconciled_as_not_applied(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        service_faults(kit.deploy).fail_next(500)
        scope, result = await _run(kit)
        outcomes = [r.outcome for r in await kit.payloads(scope, "action_result")]
        assert outcomes == ["uncertain", "not_applied"] and result.reconciled
        assert len(_effect_calls(kit.deploy)) == 1  # never retried
        assert [c.path.split("/")[1] for c in kit.deploy.calls] == ["effect", "reconcile"]


async def test_a_500_after_the_effect_is_uncertain_then_reconciled_as_applied(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        service_faults(kit.deploy).fail_next(500, applied=True)
        scope, result = await _run(kit)
        assert [r.outcome for r in await kit.payloads(scope, "action_result")] == ["uncertain", "applied"]
        assert result.reconciled and result.effect_digest.startswith("sha256:")
        assert len(kit.deploy.effects) == 1 and len(_effect_calls(kit.deploy)) == 1
        assert len(await kit.payloads(scope, "obligation_fulfilled")) == 1


async def test_a_delay_past_the_timeout_is_uncertain_and_reconciled(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, actions=[effect_action(timeout=0.3)]) as kit:
        service_faults(kit.deploy).delay_next(1.0, apply="before")
        scope, result = await _run(kit)
        results = await kit.payloads(scope, "action_result")
        assert results[0].outcome == "uncertain" and "no answer within 0.3s" in results[0].error
        assert result.outcome == "applied" and result.reconciled
        assert len(_effect_calls(kit.deploy)) == 1


async def test_an_effect_still_in_flight_after_the_lookups_is_abandoned_not_retried(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, actions=[effect_action(timeout=0.2)]) as kit:
        service_faults(kit.deploy).delay_next(1.5, apply="after")
        scope, result = await _run(kit)
        assert result.outcome == "abandon_uncertain" and "still unknown" in result.error
        follow_ups = [o for o in (await kit.state(scope)).obligations.values() if o.purpose == "follow_up"]
        assert len(follow_ups) == 1 and "Find out whether run" in follow_ups[0].text
        await wait_for(kit.deploy, lambda: len(kit.deploy.effects) == 1, timeout=5, what="the late effect")
        assert len(_effect_calls(kit.deploy)) == 1
        kit.deploy.assert_at_most_once_per_key()


async def test_apply_then_drop_is_uncertain_and_reconcile_says_applied(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        service_faults(kit.deploy).apply_then_drop_next()
        scope, result = await _run(kit)
        results = await kit.payloads(scope, "action_result")
        assert results[0].outcome == "uncertain" and "connection was lost" in results[0].error
        assert result.outcome == "applied" and result.reconciled
        assert len(kit.deploy.effects) == 1 and len(_effect_calls(kit.deploy)) == 1


async def test_without_a_reconcile_url_an_uncertain_effect_is_abandon_uncertain(tmp_path: Path) -> None:
    async with desk_kit(tmp_path, actions=[effect_action(reconcile=False)]) as kit:
        service_faults(kit.deploy).fail_next(502, applied=True)
        scope, result = await _run(kit)
        assert [r.outcome for r in await kit.payloads(scope, "action_result")] == ["uncertain", "abandon_uncertain"]
        assert "no reconcile lookup" in result.error
        assert [c.path for c in kit.deploy.calls] == ["/effect"]  # no lookup, no retry
        state = await kit.state(scope)
        assert not state.runs and not state.proposals
        assert [o.purpose for o in state.obligations.values()] == ["follow_up"]


async def test_a_target_that_cannot_be_reached_fails_without_sending(tmp_path: Path) -> None:
    actions = [effect_action()]
    actions[0]["executor"] = {"type": "http", "url": "http://127.0.0.1:9/effect", "timeout_s": 2}
    async with desk_kit(tmp_path, actions=actions) as kit:
        _scope, result = await _run(kit)
        assert result.outcome == "failed" and "nothing was sent" in result.error


async def test_http_reconcile_answers(tmp_path: Path) -> None:
    async with FakeDeployService(extra_paths=("/effect",)) as fake, aiohttp.ClientSession() as session:
        ex = HttpExecutor(session, url=fake.base_url + "/effect", reconcile_url=fake.reconcile_url, timeout=2)
        req = ExecutionRequest("poke", {"target": "x"}, "incident/x", "run-1", 3, "run-1-f3-abc")
        assert (await ex.reconcile(req)).status == "not_applied"  # 404: never heard of it
        applied = await ex.execute(req)
        assert applied.outcome == "applied"
        again = await ex.execute(req)  # the target dedupes a repeated key: same body, no second effect
        assert again.effect_digest == applied.effect_digest and len(fake.effects) == 1
        rec = await ex.reconcile(req)
        assert rec.status == "applied" and rec.response["effect"] == fake.effects[0].response
        service_faults(fake).fail_next(503, on="read")
        assert (await ex.reconcile(req)).status == "unknown"
        assert not HttpExecutor(session, url=fake.base_url).can_reconcile


async def test_statuspage_creates_then_updates_the_scopes_incident(tmp_path: Path) -> None:
    async with FakeStatuspage(api_key="sp-key", page_id="page1") as page, aiohttp.ClientSession() as session:
        url = page.base_url.replace("http://", "http://sp-key@") + "/v1/pages/page1"
        ex = StatuspageExecutor(session, url=url, timeout=2)
        first = ExecutionRequest(
            "status_page_update",
            {"status": "investigating", "message": "Payments are failing", "name": "Payments degraded"},
            "incident/payments-5xx",
            "run-1",
            1,
            "run-1-f1-x",
        )
        created = await ex.execute(first)
        assert created.outcome == "applied" and created.status == 201
        second = ExecutionRequest(
            "status_page_update",
            {"status": "monitoring", "message": "Rolled back"},
            "incident/payments-5xx",
            "run-2",
            2,
            "run-2-f2-x",
        )
        updated = await ex.execute(second)
        assert updated.outcome == "applied" and updated.status == 200
        (incident,) = page.incidents
        assert incident["status"] == "monitoring" and incident["name"] == "Payments degraded"
        assert [u["body"] for u in incident["incident_updates"]] == ["Rolled back", "Payments are failing"]
        assert all(c.headers.get("Authorization") == "OAuth sp-key" for c in page.calls)
        assert (await ex.reconcile(second)).status == "applied"
        assert (await ex.reconcile(first)).status == "not_applied"  # overwritten by the later write
        other = StatuspageExecutor(session, url=page.base_url, page_id="page1", api_key="wrong", timeout=2)
        refused = await other.execute(first)
        assert refused.outcome == "failed" and "401" in refused.error


async def test_statuspage_action_through_the_desk_with_a_dropped_response(tmp_path: Path) -> None:
    action = {
        "name": "status_page_update",
        "description": "status page",
        "risk": "R1",
        "verify": "none",
        "params": {"status": {"type": "string", "required": True}, "message": {"type": "string", "required": True}},
        "executor": {"type": "statuspage", "url": "${SP}", "page_id": "page1", "api_key": "sp-key", "timeout_s": 2},
    }
    page = FakeStatuspage(api_key="sp-key", page_id="page1")
    base = await page.start()
    try:
        async with desk_kit(tmp_path, actions=[action], env={"SP": base}) as kit:
            service_faults(page).apply_then_drop_next()
            scope = await kit.declare()
            line = await kit.desk.propose(
                scope,
                action="status_page_update",
                params={"status": "identified", "message": "We found it"},
                rationale="",
                obligation_id=None,
                actor=AGENT,
            )
            report = await kit.desk.execute(scope, pid_of(line), receipt="t")
            assert report.status == "applied"
            assert [r.outcome for r in await kit.payloads(scope, "action_result")] == ["uncertain", "applied"]
            assert len(page.incidents) == 1 and len(page.effects) == 1
    finally:
        await page.stop()
