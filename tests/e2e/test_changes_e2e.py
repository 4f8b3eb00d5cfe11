"""The change receivers end to end: GitHub and generic deploys (tests/fixtures/changes) over loopback HTTP to
``decklog serve``: change scopes, retries, signatures, and change ↔ incident links in both orders."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.changes import CHANGE_SOURCES
from decklog.bot.server import DecklogServer
from decklog.core.entries import Actor
from tests.conftest import ServerFactory, eventually
from tests.e2e.test_alerts_e2e import TOKEN, alerts_server, entries, generic, post, replies, thread_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "changes"
ALERT_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"
CHANGE_FIXTURES = sorted((p.parent.name, p.name) for p in FIXTURES.glob("*/*.json"))


def fixture(source: str, name: str) -> bytes:
    return (FIXTURES / source / name).read_bytes()


def github_event(name: str) -> str:
    stem = name.removesuffix(".json").removeprefix("payments_")
    return "deployment_status" if stem.startswith("deployment_status") else stem.split("_")[0]


def github_signature(body: bytes, secret: str = TOKEN) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@pytest.fixture
async def server(make_server: ServerFactory) -> DecklogServer:
    return await alerts_server(make_server)


async def change_entries(server: DecklogServer, scope: str, kind: str | None = None) -> list[Any]:
    return await entries(server, scope, kind)


async def firing_payments_alert(server: DecklogServer) -> str:
    body = (ALERT_FIXTURES / "alertmanager" / "payments_5xx_firing.json").read_bytes()
    status, answer = await post(server, "/alerts/alertmanager", body)
    assert status == 202
    scope: str = answer["scopes"][0]
    return scope


async def linked(server: DecklogServer, scope: str, other: str) -> bool:
    return other in (await server.runtime.store.get_state(scope)).linked


# -- every sample --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "name"), CHANGE_FIXTURES)
async def test_every_change_sample_is_accepted(server: DecklogServer, source: str, name: str) -> None:
    body = fixture(source, name)
    headers = {"X-GitHub-Event": github_event(name)} if source == "github" else {}
    expected = CHANGE_SOURCES[source].parse_request(json.loads(body), headers)
    status, answer = await post(server, f"/changes/{source}", body, headers=headers)
    assert status == (202 if expected else 200), answer
    assert [c["change_id"] for c in answer["changes"]] == [s.change_id for s in expected]
    assert all(c["outcome"] == "new" and c["scope"].startswith("change/") for c in answer["changes"])
    for signal, change in zip(expected, answer["changes"], strict=True):
        state = await server.runtime.store.get_state(change["scope"])
        assert state.kind == "change" and state.services == (signal.service,)


# -- change scopes -----------------------------------------------------------------------------------------------


async def test_a_deploy_becomes_a_change_scope_and_a_retry_appends_nothing(server: DecklogServer) -> None:
    status, started = await post(server, "/changes/generic", fixture("generic", "payments_deploy_started.json"))
    assert status == 202 and started["changes"][0]["outcome"] == "new"
    scope = started["changes"][0]["scope"]
    assert scope == "change/r2026-09-19-4"
    status, done = await post(server, "/changes/generic", fixture("generic", "payments_deploy.json"))
    assert status == 202 and done["changes"][0] == {**done["changes"][0], "scope": scope, "outcome": "updated"}
    status, retry = await post(server, "/changes/generic", fixture("generic", "payments_deploy.json"))
    assert status == 200 and retry["changes"][0]["outcome"] == "duplicate"
    log = await change_entries(server, scope)
    assert [e.kind for e in log] == ["declared", "observation", "observation"]
    declared = log[0].payload
    assert declared.title == "payments r2026-09-19-4 (v2026.09.19-4) by maria" and declared.via == "change"
    deploy = log[2].payload
    assert deploy.data["status"] == "succeeded" and deploy.data["version"] == "v2026.09.19-4"
    assert deploy.data["paths"][0] == "config/payments/timeouts.yaml"  # configuration first
    assert {"payments/psp/client.py", "payments/psp/tokenise.py"} <= set(deploy.data["paths"])
    assert deploy.data["commits"][1]["paths"] == ["config/payments/timeouts.yaml"]
    assert deploy.raw["json"]["id"] == "r2026-09-19-4"
    assert (await server.runtime.store.verify(scope)).ok


async def test_github_signed_deliveries_need_no_bearer_and_a_bad_signature_is_refused(server: DecklogServer) -> None:
    body = fixture("github", "payments_push.json")
    headers = {"X-GitHub-Event": "push", "X-Hub-Signature-256": github_signature(body, "not the secret")}
    status, answer = await post(server, "/changes/github", body, token=None, headers=headers)
    assert status == 401 and "X-Hub-Signature-256" in answer["error"]
    status, answer = await post(server, "/changes/github", body, token=None, headers={"X-GitHub-Event": "push"})
    assert status == 401
    assert [s for s in await server.runtime.store.scope_ids()] == []
    headers["X-Hub-Signature-256"] = github_signature(body)
    status, answer = await post(server, "/changes/github", body, token=None, headers=headers)
    assert status == 202 and answer["changes"][0]["scope"] == "change/gh-push-9f2c1e4b7a0d"
    (push,) = await change_entries(server, "change/gh-push-9f2c1e4b7a0d", "observation")
    assert push.payload.data["repository"] == "acme/payments" and push.payload.data["ref"] == "refs/heads/main"


async def test_github_without_an_event_header_is_a_400_naming_it(server: DecklogServer) -> None:
    status, answer = await post(server, "/changes/github", fixture("github", "payments_push.json"))
    assert status == 400 and "X-GitHub-Event" in answer["error"]


async def test_odd_change_ids_still_make_valid_stable_scope_ids(server: DecklogServer) -> None:
    body = {"id": "release 7 / hotfix:ü", "service": "payments", "version": "7"}
    _, first = await post(server, "/changes/generic", body)
    _, again = await post(server, "/changes/generic", {**body, "status": "failed"})
    assert first["changes"][0]["scope"] == again["changes"][0]["scope"]
    assert first["changes"][0]["scope"].startswith("change/release-7-hotfix-")


# -- linking, both orders ----------------------------------------------------------------------------------------


async def test_a_change_then_an_alert_links_them_and_the_thread_shows_the_change(server: DecklogServer) -> None:
    await post(server, "/changes/generic", fixture("generic", "payments_deploy.json"))
    incident = await firing_payments_alert(server)
    await eventually(lambda: linked(server, incident, "change/r2026-09-19-4"), what="the incident linked")
    await eventually(lambda: linked(server, "change/r2026-09-19-4", incident), what="the change linked")
    links = {e.payload.scope: e.payload.relation for e in await entries(server, incident, "scope_linked")}
    assert links == {"change/r2026-09-19-4": "suspected_cause"}
    back = await entries(server, "change/r2026-09-19-4", "scope_linked")
    assert [(e.payload.scope, e.payload.relation) for e in back] == [(incident, "suspected_effect")]
    evidence = await eventually(lambda: _evidence(server, incident), what="the change as evidence")
    assert evidence.payload.text == (
        "Recent change on payments: r2026-09-19-4 by maria (v2026.09.19-4) 2 min before the alert — touched "
        "config/payments/timeouts.yaml, payments/psp/client.py, payments/psp/tokenise.py"
    )
    assert evidence.refs and evidence.payload.data["change"] == "change/r2026-09-19-4"
    ts = await thread_of(server, incident)
    await eventually(
        lambda: [m for m in replies(server, ts) if "Recent change on payments" in m.text], what="it in the thread"
    )


async def test_an_alert_then_a_change_links_them_when_the_change_arrives(server: DecklogServer) -> None:
    incident = await firing_payments_alert(server)
    status, answer = await post(
        server,
        "/changes/github",
        fixture("github", "payments_deployment_status_success.json"),
        headers={"X-GitHub-Event": "deployment_status"},
    )
    assert status == 202 and answer["changes"][0]["linked"] == [incident]
    assert await linked(server, incident, "change/gh-deploy-1892004417")
    evidence = await eventually(lambda: _evidence(server, incident), what="the change as evidence")
    assert evidence.payload.text.startswith("Recent change on payments: gh-deploy-1892004417 by maria-acme")
    assert "2 min before the alert" in evidence.payload.text
    # a later deploy of the same service (after the alert started) is linked as related, not as a suspect
    status, later = await post(
        server, "/changes/generic", {"id": "r2026-09-19-5", "service": "payments", "at": "2026-09-19T14:20:00Z"}
    )
    assert later["changes"][0]["linked"] == [incident]
    relations = {e.payload.scope: e.payload.relation for e in await entries(server, incident, "scope_linked")}
    assert relations["change/r2026-09-19-5"] == "related"


async def test_changes_elsewhere_or_long_before_are_not_linked(server: DecklogServer) -> None:
    await post(server, "/changes/generic", {"id": "ledger-1", "service": "ledger", "at": "2026-09-19T14:00:00Z"})
    await post(server, "/changes/generic", {"id": "old-1", "service": "payments", "at": "2026-09-19T07:00:00Z"})
    incident = await firing_payments_alert(server)
    await post(server, "/alerts/generic", generic("payments-latency"))  # more activity: still nothing to link
    state = await server.runtime.store.get_state(incident)
    assert not [s for s in state.linked if s.startswith("change/")]


async def test_an_incident_declared_by_a_person_is_linked_to_recent_changes_too(server: DecklogServer) -> None:
    await post(server, "/changes/generic", {"id": "r-now", "service": "checkout", "author": "lee"})
    declared = await server.runtime.service.declare(
        title="Checkout is slow", services=["checkout"], actor=Actor.human("U0ALICE", "alice"), via="slack"
    )
    scope = declared.state.scope
    await eventually(lambda: linked(server, scope, "change/r-now"), what="the link")
    evidence = await eventually(lambda: _evidence(server, scope), what="the evidence")
    assert evidence.payload.text.startswith("Recent change on checkout: r-now by lee")


async def _evidence(server: DecklogServer, scope: str) -> Any:
    found = [e for e in await entries(server, scope, "observation") if e.payload.source == "change"]
    return found[0] if found else None
