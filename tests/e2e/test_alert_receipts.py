"""``POST /alerts/{source}`` answers ``202 {"accepted": N, "receipt": ID}`` once the raw notification is durable;
routing runs behind the answer, ``GET /api/alerts/receipts/{ID}`` gives each alert's outcome once routed, and
``?wait=SECONDS`` keeps the synchronous answer. Malformed bodies still get their 400 and store nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from decklog.bot.server import DecklogServer
from tests.conftest import ServerFactory, eventually

TOKEN = "receipts-token"
API_TOKEN = "receipts-api-token"


def alert(fingerprint: str, **fields: Any) -> dict[str, Any]:
    return {"title": f"{fingerprint} failing", "fingerprint": fingerprint, "service": "payments", **fields}


async def call(
    server: DecklogServer, method: str, path: str, body: Any = None, *, token: str | None = TOKEN
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, server.url + path, data=data, headers=headers) as r,
    ):
        text = await r.text()
        return r.status, json.loads(text) if text else None


async def routed(server: DecklogServer, receipt: str, token: str | None = TOKEN) -> dict[str, Any]:
    async def done() -> Any:
        status, body = await call(server, "GET", f"/api/alerts/receipts/{receipt}", token=token)
        assert status == 200, body
        return body if body["status"] == "routed" else None

    result: dict[str, Any] = await eventually(done, timeout=20, what=f"receipt {receipt} routed")
    return result


async def test_the_answer_is_a_receipt_and_the_receipt_gives_each_alerts_outcome_once_routed(
    make_server: ServerFactory,
) -> None:
    server = await make_server(alert_token=TOKEN)
    status, first = await call(server, "POST", "/alerts/generic", alert("fp-a", event_id="1"))
    assert status == 202 and first["accepted"] == 1 and set(first) == {"source", "accepted", "receipt"}
    receipt = await routed(server, first["receipt"])
    [outcome] = receipt["alerts"]
    assert outcome["outcome"] == "new" and outcome["fingerprint"] == "fp-a" and outcome["seq"] >= 2
    scope = outcome["scope"]
    assert receipt["scopes"] == [scope] and receipt["recorded"] == 1 and receipt["accepted"] == 1
    assert receipt["routed_at"] >= receipt["received_at"]
    entries = await server.runtime.store.read(scope)
    assert [e.seq for e in entries if e.kind == "observation"] == [outcome["seq"]]

    # a retry of the same notification is accepted and stored again; its receipt says why nothing was recorded
    status, retry = await call(server, "POST", "/alerts/generic", alert("fp-a", event_id="1"))
    assert status == 202 and retry["receipt"] != first["receipt"]
    [again] = (await routed(server, retry["receipt"]))["alerts"]
    assert again["outcome"] == "duplicate" and again["scope"] == scope and "already recorded" in again["reason"]

    # a resolve that no incident has is routed and dropped, with the reason
    status, lone = await call(server, "POST", "/alerts/generic", alert("fp-zzz", status="resolved"))
    assert status == 202
    [ignored] = (await routed(server, lone["receipt"]))["alerts"]
    assert ignored["outcome"] == "ignored" and ignored["scope"] is None and "opens none" in ignored["reason"]


async def test_wait_keeps_the_synchronous_answer(make_server: ServerFactory) -> None:
    server = await make_server(alert_token=TOKEN)
    status, answer = await call(server, "POST", "/alerts/generic?wait=10", alert("fp-w"))
    assert status == 202 and answer["recorded"] == 1 and answer["received"] == 1 and answer["accepted"] == 1
    [outcome] = answer["alerts"]
    assert outcome["outcome"] == "new" and answer["scopes"] == [outcome["scope"]] and answer["receipt"]
    status, repeat = await call(server, "POST", "/alerts/generic?wait=10", alert("fp-w", status="resolved"))
    assert status == 202 and repeat["alerts"][0]["outcome"] == "resolved"
    for bad in ("-1", "abc", "61", "nan"):
        status, refused = await call(server, "POST", f"/alerts/generic?wait={bad}", alert("fp-w"))
        assert status == 400 and refused["field"] == "wait", (bad, refused)


async def test_wait_zero_answers_at_once_and_a_short_wait_names_the_receipt(make_server: ServerFactory) -> None:
    server = await make_server(alert_token=TOKEN)
    status, answer = await call(server, "POST", "/alerts/generic?wait=0", alert("fp-0"))
    assert status == 202 and set(answer) == {"source", "accepted", "receipt"}
    await routed(server, answer["receipt"])


async def test_malformed_bodies_get_their_400_before_anything_is_stored(make_server: ServerFactory) -> None:
    server = await make_server(alert_token=TOKEN)
    part = server.parts.receivers
    assert part is not None
    for body in (b"{not json", b"[]", json.dumps({"fingerprint": "x"}).encode(), b""):
        status, answer = await call(server, "POST", "/alerts/generic", body)
        assert status == 400 and answer["error"], (body, answer)
    status, _ = await call(server, "POST", "/alerts/generic", alert("fp-x"), token="wrong")
    assert status == 401
    assert await part.intake.inbox.pending_count() == 0 and part.intake.inbox.stats.persisted == 0


async def test_receipts_are_read_with_the_alert_token_or_the_api_token(make_server: ServerFactory) -> None:
    server = await make_server(alert_token=TOKEN, api_token=API_TOKEN)
    _, answer = await call(server, "POST", "/alerts/generic", alert("fp-r"))
    receipt = answer["receipt"]
    assert (await routed(server, receipt, token=TOKEN))["alerts"][0]["outcome"] == "new"
    assert (await routed(server, receipt, token=API_TOKEN))["receipt"] == receipt
    status, _ = await call(server, "GET", f"/api/alerts/receipts/{receipt}", token=None)
    assert status == 401  # with an API token set, loopback alone is not enough
    status, _ = await call(server, "GET", f"/api/alerts/receipts/{receipt}", token="nope")
    assert status == 401
    status, missing = await call(server, "GET", "/api/alerts/receipts/0123abcd", token=TOKEN)
    assert status == 404 and missing["error"]


async def test_a_storm_of_notifications_is_routed_in_bulk_and_every_receipt_completes(
    make_server: ServerFactory,
) -> None:
    """200 notifications at once, 10 fingerprints on 2 services: after the first few open the incidents, the rest
    go to them in a few appends (many alerts per append), and each receipt has its alert's scope and seq."""
    server = await make_server(alert_token=TOKEN)
    bodies = [alert(f"fp-{k % 10}", service=f"svc-{k % 2}", event_id=f"ev-{k}") for k in range(200)]
    answers = await asyncio.gather(*(call(server, "POST", "/alerts/generic", b) for b in bodies))
    assert all(status == 202 for status, _ in answers)
    receipts = [await routed(server, a["receipt"]) for _, a in answers]
    outcomes = [r["alerts"][0] for r in receipts]
    assert all(o["scope"] and o["seq"] for o in outcomes)
    scopes = {o["scope"] for o in outcomes}
    assert len(scopes) == 2 and sum(o["outcome"] == "new" for o in outcomes) == 2
    store = server.runtime.store
    logged = {(s, e.seq) for s in scopes for e in await store.read(s, kinds=("observation",)) if e.payload.fingerprint}
    assert {(o["scope"], o["seq"]) for o in outcomes} == logged and len(logged) == 200


def group(n: int, *, bad: int | None = None) -> bytes:
    """An Alertmanager group of ``n`` alerts (over the size from which its shape is only checked cheaply before
    the answer); ``bad``: that alert's ``status`` is not a string."""
    alerts: list[dict[str, Any]] = [
        {
            "status": "firing",
            "labels": {"alertname": "ProbeFailure", "instance": f"https://host-{k}.example.org", "pad": "x" * 200},
            "annotations": {"summary": f"probe failing on host {k}"},
            "startsAt": "2026-09-19T14:06:30.000Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "fingerprint": f"{k:016x}",
        }
        for k in range(n)
    ]
    if bad is not None:
        alerts[bad]["status"] = 123
    body = {"version": "4", "groupKey": '{}:{alertname="ProbeFailure"}', "status": "firing", "receiver": "decklog"}
    body.update(groupLabels={"alertname": "ProbeFailure"}, truncatedAlerts=0, alerts=alerts)
    return json.dumps(body).encode()


async def test_a_big_group_is_answered_on_a_cheap_check_and_parsed_behind_the_answer(
    make_server: ServerFactory,
) -> None:
    server = await make_server(alert_token=TOKEN)
    body = group(1200)
    assert len(body) > 256 * 1024
    status, answer = await call(server, "POST", "/alerts/alertmanager", body)
    assert status == 202 and answer["accepted"] == 1200
    receipt = await routed(server, answer["receipt"])
    assert len(receipt["alerts"]) == 1200 and len(receipt["scopes"]) == 1 and receipt["recorded"] == 1200

    # a field error found behind the answer fails the receipt, naming the field; nothing of it is recorded
    status, answer = await call(server, "POST", "/alerts/alertmanager", group(1200, bad=7))
    assert status == 202

    async def failed() -> Any:
        _, body = await call(server, "GET", f"/api/alerts/receipts/{answer['receipt']}")
        return body if body["status"] == "failed" else None

    failure = await eventually(failed, timeout=20, what="the bad group's receipt failed")
    assert "alerts[7]" in failure["error"] and "status" in failure["error"], failure
    # malformed JSON of any size still gets its 400 before the answer
    status, refused = await call(server, "POST", "/alerts/alertmanager", body[:-2])
    assert status == 400 and "JSON" in refused["error"]
