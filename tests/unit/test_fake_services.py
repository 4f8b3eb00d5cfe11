"""Tests of the fake executor targets (deploy service, Statuspage), driven over loopback with aiohttp.

They pin the ``http`` executor protocol of DESIGN.md §7 as the fakes implement it — at most one effect per
idempotency key, reconcile lookups, and the uncertain outcomes (timeout, lost connection) — and the
Statuspage subset. Waiting for an effect is always a deadline poll, never a fixed sleep.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from decklog.adapters.local.services import FakeDeployService, FakeStatuspage
from tests.fakes.polling import wait_for
from tests.fakes.service_faults import service_faults


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def deploy() -> AsyncIterator[FakeDeployService]:
    svc = FakeDeployService(extra_paths=("/restart",))
    await svc.start()
    svc.record_deploy("payments", "v811")
    svc.record_deploy("payments", "v812")
    yield svc
    await svc.stop()


@pytest.fixture
async def statuspage() -> AsyncIterator[FakeStatuspage]:
    async with FakeStatuspage(api_key="sp-key", page_id="pg1") as svc:
        yield svc


def action_body(key: str, *, fence: int = 1, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "action": "rollback",
        "params": params if params is not None else {"service": "payments"},
        "scope": "incident/payments-5xx",
        "run_id": "run-1",
        "fence": fence,
        "idempotency_key": key,
    }


async def post_action(
    http: aiohttp.ClientSession,
    url: str,
    key: str,
    *,
    timeout: float = 5.0,
    **kwargs: Any,
) -> tuple[int, bytes]:
    async with http.post(
        url,
        json=action_body(key, **kwargs),
        headers={"Idempotency-Key": key},
        timeout=aiohttp.ClientTimeout(total=timeout),
    ) as resp:
        return resp.status, await resp.read()


async def reconcile(http: aiohttp.ClientSession, svc: FakeDeployService, key: str) -> tuple[int, dict[str, Any]]:
    async with http.get(f"{svc.reconcile_url}/{key}") as resp:
        return resp.status, await resp.json()


# ------------------------------------------------------------------------------------------- deploy service


async def test_apply_is_idempotent_per_key(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    status, first = await post_action(http, deploy.rollback_url, "k-1")
    assert status == 200
    effect = json.loads(first)
    assert effect["status"] == "applied"
    assert effect["service"] == "payments"
    assert effect["rolled_back_from"] == "v812" and effect["rolled_back_to"] == "v811"
    assert effect["deployment_id"] and effect["idempotency_key"] == "k-1"
    assert deploy.current_version("payments") == "v811"

    status, again = await post_action(http, deploy.rollback_url, "k-1")
    assert status == 200
    assert again == first  # byte-identical, so the effect digest is stable
    assert deploy.calls[-1].replayed
    assert len(deploy.effects_for("k-1")) == 1
    assert deploy.current_version("payments") == "v811"  # not rolled back a second time

    status, body = await post_action(http, deploy.rollback_url, "k-1", params={"service": "checkout"})
    assert status == 422 and b"different parameters" in body
    assert len(deploy.effects) == 1
    deploy.assert_at_most_once_per_key()


async def test_reconcile_applied_not_applied_unknown(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    await post_action(http, deploy.rollback_url, "k-applied")
    status, body = await reconcile(http, deploy, "k-applied")
    assert status == 200 and body["status"] == "applied"
    assert body["effect"]["rolled_back_to"] == "v811"

    service_faults(deploy).fail_next(500)
    status, _ = await post_action(http, deploy.rollback_url, "k-failed")
    assert status == 500
    assert await reconcile(http, deploy, "k-failed") == (
        200,
        {"status": "not_applied", "idempotency_key": "k-failed"},
    )

    service_faults(deploy).refuse_next(409, "change freeze")
    status, raw = await post_action(http, deploy.rollback_url, "k-refused")
    assert status == 409 and json.loads(raw) == {"status": "refused", "reason": "change freeze"}
    assert (await reconcile(http, deploy, "k-refused"))[1]["status"] == "not_applied"

    status, body = await reconcile(http, deploy, "k-never-seen")
    assert status == 404
    assert len(deploy.effects) == 1


async def test_failure_after_apply_is_uncertain_and_reconcilable(
    http: aiohttp.ClientSession, deploy: FakeDeployService
) -> None:
    service_faults(deploy).fail_next(502, applied=True)
    status, _ = await post_action(http, deploy.rollback_url, "k-502")
    assert status == 502
    assert (await reconcile(http, deploy, "k-502"))[1]["status"] == "applied"
    status, raw = await post_action(http, deploy.rollback_url, "k-502")  # a retry just replays
    assert status == 200 and json.loads(raw)["status"] == "applied"
    assert len(deploy.effects_for("k-502")) == 1


async def test_retry_after_a_failure_that_applied_nothing_applies_once(
    http: aiohttp.ClientSession, deploy: FakeDeployService
) -> None:
    service_faults(deploy).fail_next(503)
    assert (await post_action(http, deploy.rollback_url, "k-r"))[0] == 503
    assert deploy.effects == []
    assert (await post_action(http, deploy.rollback_url, "k-r"))[0] == 200
    assert (await post_action(http, deploy.rollback_url, "k-r"))[0] == 200
    assert len(deploy.effects_for("k-r")) == 1


async def test_delay_past_client_timeout_then_applied(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    service_faults(deploy).delay_next(1.0)  # the effect lands after the delay, whether or not the caller is still there
    with pytest.raises(TimeoutError):
        await post_action(http, deploy.rollback_url, "k-slow", timeout=0.1)

    status, body = await reconcile(http, deploy, "k-slow")
    assert status == 200 and body["status"] == "not_applied" and body["in_flight"] is True
    status, raw = await post_action(http, deploy.rollback_url, "k-slow")  # a duplicate while in flight
    assert status == 503 and json.loads(raw)["status"] == "in_progress"  # 5xx: uncertain, by the protocol

    await wait_for(deploy, lambda: len(deploy.effects) == 1, timeout=5.0, what="the delayed effect")
    assert (await reconcile(http, deploy, "k-slow"))[1]["status"] == "applied"
    deploy.assert_at_most_once_per_key()


async def test_delay_that_never_applies(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    service_faults(deploy).delay_next(0.3, apply="never")
    with pytest.raises(TimeoutError):
        await post_action(http, deploy.rollback_url, "k-lost", timeout=0.05)
    await wait_for(deploy, lambda: deploy.calls[-1].status is not None, what="the delayed request to finish")
    assert deploy.calls[-1].status == 503
    assert (await reconcile(http, deploy, "k-lost"))[1] == {
        "status": "not_applied",
        "idempotency_key": "k-lost",
    }
    assert deploy.effects == []


async def test_apply_then_drop(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    service_faults(deploy).apply_then_drop_next()
    with pytest.raises(aiohttp.ClientConnectionError):
        await post_action(http, deploy.rollback_url, "k-drop")
    assert deploy.calls[-1].status is None and deploy.calls[-1].fault == "drop"
    status, body = await reconcile(http, deploy, "k-drop")
    assert status == 200 and body["status"] == "applied"
    assert deploy.current_version("payments") == "v811"
    status, _ = await post_action(http, deploy.rollback_url, "k-drop")
    assert status == 200 and deploy.calls[-1].replayed
    assert len(deploy.effects_for("k-drop")) == 1
    deploy.assert_at_most_once_per_key()


async def test_drop_without_apply(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    service_faults(deploy).drop_next()
    with pytest.raises(aiohttp.ClientConnectionError):
        await post_action(http, deploy.rollback_url, "k-drop0")
    assert (await reconcile(http, deploy, "k-drop0"))[1]["status"] == "not_applied"
    assert deploy.effects == []


async def test_reconcile_lookup_can_fail_too(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    await post_action(http, deploy.rollback_url, "k-1")
    service_faults(deploy).fail_next(500, on="read")
    assert (await reconcile(http, deploy, "k-1"))[0] == 500
    assert (await reconcile(http, deploy, "k-1"))[0] == 200


async def test_protocol_violations_are_refused_and_recorded(
    http: aiohttp.ClientSession, deploy: FakeDeployService
) -> None:
    async with http.post(deploy.rollback_url, json=action_body("k-1")) as resp:
        assert resp.status == 400
        assert (await resp.json())["reason"] == "missing Idempotency-Key header"
    async with http.post(deploy.rollback_url, json=action_body("k-1"), headers={"Idempotency-Key": "other"}) as resp:
        assert resp.status == 400
    body = action_body("k-2")
    del body["fence"]
    async with http.post(deploy.rollback_url, json=body, headers={"Idempotency-Key": "k-2"}) as resp:
        assert resp.status == 400
    assert len(deploy.protocol_errors) == 3
    assert deploy.effects == []


async def test_rollback_refusals_apply_nothing(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    status, raw = await post_action(http, deploy.rollback_url, "k-1", params={"service": "unknown"})
    assert status == 422 and "no deploys recorded" in json.loads(raw)["reason"]
    status, raw = await post_action(
        http, deploy.rollback_url, "k-2", params={"service": "payments", "to_version": "v1"}
    )
    assert status == 422
    deploy.record_deploy("search", "v1")
    status, raw = await post_action(http, deploy.rollback_url, "k-3", params={"service": "search"})
    assert status == 422 and "no earlier version" in json.loads(raw)["reason"]
    assert deploy.effects == []
    status, _ = await post_action(
        http, deploy.rollback_url, "k-4", params={"service": "payments", "to_version": "v811"}
    )
    assert status == 200


async def test_deploy_history_over_http(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    async with http.post(
        f"{deploy.base_url}/deploys", json={"service": "payments", "version": "v813", "author": "alice"}
    ) as resp:
        assert resp.status == 201
        created = await resp.json()
    async with http.get(f"{deploy.base_url}/deploys", params={"service": "payments"}) as resp:
        listing = (await resp.json())["deploys"]
    assert [d["version"] for d in listing] == ["v813", "v812", "v811"]  # newest first
    assert listing[0] == created
    async with http.post(f"{deploy.base_url}/deploys", json={"service": "payments"}) as resp:
        assert resp.status == 400


async def test_generic_action_path(http: aiohttp.ClientSession, deploy: FakeDeployService) -> None:
    status, raw = await post_action(http, f"{deploy.base_url}/restart", "k-g", params={"service": "payments", "n": 2})
    effect = json.loads(raw)
    assert status == 200 and effect["status"] == "applied" and effect["params"] == {"service": "payments", "n": 2}
    assert deploy.effects[0].kind == "rollback"  # the action name from the request


async def test_stale_fence_is_refused_when_checked(http: aiohttp.ClientSession) -> None:
    async with FakeDeployService(check_fence=True, token="t0k") as svc:
        svc.record_deploy("payments", "v1")
        svc.record_deploy("payments", "v2")
        svc.record_deploy("payments", "v3")
        auth = {"Authorization": "Bearer t0k"}
        async with http.post(svc.rollback_url, json=action_body("k-1"), headers={"Idempotency-Key": "k-1"}) as resp:
            assert resp.status == 401
        for key, fence, expected in (("k-5", 5, 200), ("k-4", 4, 409), ("k-6", 6, 200)):
            async with http.post(
                svc.rollback_url, json=action_body(key, fence=fence), headers={"Idempotency-Key": key, **auth}
            ) as resp:
                assert resp.status == expected, key
        assert [e.idempotency_key for e in svc.effects] == ["k-5", "k-6"]


async def test_stop_cuts_a_pending_delay_short(http: aiohttp.ClientSession) -> None:
    svc = FakeDeployService()
    await svc.start()
    svc.record_deploy("payments", "v1")
    svc.record_deploy("payments", "v2")
    service_faults(svc).delay_next(30.0)
    with pytest.raises(TimeoutError):
        await post_action(http, svc.rollback_url, "k-1", timeout=0.05)
    await wait_for(svc, lambda: len(svc.calls) == 1)
    await svc.stop()  # returns promptly (shutdown_timeout) without applying the pending effect
    assert svc.effects == []


# ------------------------------------------------------------------------------------------------ statuspage


def sp_headers(key: str = "sp-key", **extra: str) -> dict[str, str]:
    return {"Authorization": f"OAuth {key}", **extra}


async def test_statuspage_create_update_get_list(http: aiohttp.ClientSession, statuspage: FakeStatuspage) -> None:
    url = f"{statuspage.base_url}/v1/pages/pg1/incidents"
    incident = {
        "name": "Elevated 5xx on payments",
        "status": "investigating",
        "body": "We are investigating elevated errors.",
        "impact_override": "major",
        "components": {"cmp-payments": "partial_outage"},
    }
    async with http.post(url, json={"incident": incident}, headers=sp_headers()) as resp:
        assert resp.status == 201
        created = await resp.json()
    assert created["id"] and len(created["id"]) == 12
    assert created["status"] == "investigating" and created["impact"] == "major"
    assert created["incident_updates"][0]["body"] == "We are investigating elevated errors."
    assert created["components"] == [{"id": "cmp-payments", "name": "cmp-payments", "status": "partial_outage"}]

    async with http.patch(
        f"{url}/{created['id']}",
        json={"incident": {"status": "resolved", "body": "Rolled back; error rates are normal."}},
        headers=sp_headers(),
    ) as resp:
        assert resp.status == 200
        updated = await resp.json()
    assert updated["status"] == "resolved" and updated["resolved_at"]
    assert [u["status"] for u in updated["incident_updates"]] == ["resolved", "investigating"]  # newest first
    assert updated["components"][0]["status"] == "operational"

    async with http.get(f"{url}/{created['id']}", headers=sp_headers()) as resp:
        assert resp.status == 200 and (await resp.json()) == updated
    async with http.get(url, headers=sp_headers()) as resp:
        assert [i["id"] for i in await resp.json()] == [created["id"]]
    async with http.get(f"{url}/nosuchincident", headers=sp_headers()) as resp:
        assert resp.status == 404
    assert [e.kind for e in statuspage.effects] == ["incident.create", "incident.update"]


async def test_statuspage_requires_oauth_header(http: aiohttp.ClientSession, statuspage: FakeStatuspage) -> None:
    url = f"{statuspage.base_url}/v1/pages/pg1/incidents"
    body = {"incident": {"name": "x"}}
    for headers in ({}, {"Authorization": "Bearer sp-key"}, sp_headers("wrong")):
        async with http.post(url, json=body, headers=headers) as resp:
            assert resp.status == 401, headers
    async with http.get(url) as resp:
        assert resp.status == 401
    async with http.post(f"{statuspage.base_url}/v1/pages/other/incidents", json=body, headers=sp_headers()) as resp:
        assert resp.status == 404
    assert statuspage.incidents == [] and statuspage.effects == []


async def test_statuspage_validation_and_idempotency(http: aiohttp.ClientSession, statuspage: FakeStatuspage) -> None:
    url = f"{statuspage.base_url}/v1/pages/pg1/incidents"
    async with http.post(url, json={"incident": {"name": " "}}, headers=sp_headers()) as resp:
        assert resp.status == 422
    async with http.post(url, json={"name": "unwrapped"}, headers=sp_headers()) as resp:
        assert resp.status == 400
    async with http.post(url, json={"incident": {"name": "x", "status": "on-fire"}}, headers=sp_headers()) as resp:
        assert resp.status == 422

    body = {"incident": {"name": "Payments degraded", "body": "Investigating"}}
    headers = sp_headers(**{"Idempotency-Key": "decklog-incident-1"})
    async with http.post(url, json=body, headers=headers) as resp:
        first = await resp.read()
    async with http.post(url, json=body, headers=headers) as resp:
        assert resp.status == 201 and await resp.read() == first
    assert len(statuspage.incidents) == 1
    statuspage.assert_at_most_once_per_key()


async def test_statuspage_fault_injection(http: aiohttp.ClientSession, statuspage: FakeStatuspage) -> None:
    url = f"{statuspage.base_url}/v1/pages/pg1/incidents"
    service_faults(statuspage).fail_next(500)
    async with http.post(url, json={"incident": {"name": "x"}}, headers=sp_headers()) as resp:
        assert resp.status == 500
    assert statuspage.incidents == []
    service_faults(statuspage).refuse_next(429, "rate limited")
    async with http.post(url, json={"incident": {"name": "x"}}, headers=sp_headers()) as resp:
        assert resp.status == 429
    service_faults(statuspage).apply_then_drop_next()
    with pytest.raises(aiohttp.ClientConnectionError):
        async with http.post(url, json={"incident": {"name": "x"}}, headers=sp_headers()) as resp:
            await resp.read()
    assert len(statuspage.incidents) == 1
    service_faults(statuspage).fail_next(503, on="read")
    async with http.get(url, headers=sp_headers()) as resp:
        assert resp.status == 503
    assert statuspage.pending_faults == 0
