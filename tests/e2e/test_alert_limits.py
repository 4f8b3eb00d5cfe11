"""The alert receiver's size limit over real HTTP: what is over it gets a 413 that names the limit and
what to change in the sender, and — when the sender showed the token — one entry in the alerts channel however
often it retries; what is under it is recorded whole, with a capped prefix of the body as evidence."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from decklog.bot.server import DecklogServer
from tests.conftest import ServerFactory, eventually, test_config
from tests.fakes.slack_calls import slack_calls
from tests.helpers.monitoring import kube_alert

TOKEN = "limits-token"
LIMIT = 64_000


async def limited(make_server: ServerFactory, limit: int = LIMIT) -> DecklogServer:
    config = test_config(alerts={"max_payload_bytes": limit})
    return await make_server(alert_token=TOKEN, config=config, first_turn_delay=3600, turn_debounce=3600)


def notification(n: int) -> bytes:
    """An Alertmanager webhook notification of ``n`` alerts as kube-prometheus labels them (~1 KB each)."""
    alerts = []
    for i in range(n):
        alert = kube_alert(i)
        alerts.append({**alert, "status": "firing", "endsAt": "0001-01-01T00:00:00Z", "fingerprint": f"{i:016x}"})
    body = {
        "version": "4",
        "groupKey": '{}:{alertname="KubePodCrashLooping"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "decklog",
        "groupLabels": {"alertname": "KubePodCrashLooping"},
        "commonLabels": {"alertname": "KubePodCrashLooping"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": alerts,
    }
    return json.dumps(body).encode()


async def post(server: DecklogServer, body: Any, *, token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(server.url + "/alerts/alertmanager?wait=60", data=body, headers=headers) as response,
    ):
        return response.status, await response.json()


async def incidents(server: DecklogServer) -> list[str]:
    store = server.runtime.store
    return sorted([str(s) for s in await store.scope_ids() if s.kind == "incident" and await store.exists(s)])


async def refusal_texts(server: DecklogServer) -> list[str]:
    out = []
    for scope in await incidents(server):
        for entry in await server.runtime.store.read(scope, kinds=("observation",)):
            if "refused" in entry.payload.data:
                out.append(entry.payload.text)
    return out


async def test_an_authenticated_notification_over_the_limit_gets_a_413_naming_it_and_is_recorded_once(
    make_server: ServerFactory,
) -> None:
    server = await limited(make_server)
    body = notification(100)  # ~105 KB
    for _ in range(4):  # Alertmanager's retries
        status, answer = await post(server, body)
        assert status == 413
        assert str(LIMIT) in answer["error"] and "max_payload_bytes" in answer["error"]
        assert "max_alerts" in answer["error"] and str(len(body)) in answer["error"]
    [text] = await refusal_texts(server)
    assert f"{len(body) / 1_000_000:.1f} MB" in text and "max_alerts" in text

    async def streamed() -> Any:  # no Content-Length: refused once reading passes the limit
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    status, answer = await post(server, streamed())
    assert status == 413 and str(LIMIT) in answer["error"]
    assert len(await refusal_texts(server)) == 1  # still one entry in this window

    def in_slack() -> bool:
        return any(
            "refused" in str(c.args.get("text")) for c in slack_calls(server.sandbox).calls_to("chat.postMessage")
        )

    await eventually(in_slack, what="the refusal's header in the alerts channel")


async def test_an_unauthenticated_body_over_the_limit_is_refused_and_records_nothing(
    make_server: ServerFactory,
) -> None:
    server = await limited(make_server)
    status, answer = await post(server, notification(100), token=None)
    assert status == 413 and str(LIMIT) in answer["error"]
    status, _ = await post(server, notification(100), token="wrong")
    assert status == 413
    assert await incidents(server) == []


async def test_a_notification_under_the_limit_is_recorded_whole_with_a_capped_prefix_as_evidence(
    make_server: ServerFactory,
) -> None:
    server = await limited(make_server, limit=4_000_000)
    body = notification(3_000)  # ~3 MB: over the old 1 MB limit
    status, answer = await post(server, body)
    assert status == 202 and answer["recorded"] == 3_000
    [scope] = answer["scopes"]
    assert len((await server.runtime.store.get_state(scope)).firing_alerts) == 3_000
    evidence = [e.payload.raw for e in await server.runtime.store.read(scope, kinds=("observation",)) if e.payload.raw]
    assert len(evidence) == 1 and evidence[0]["bytes"] == len(body)
    assert body.decode().startswith(evidence[0]["truncated"])
    assert len(evidence[0]["truncated"]) == server.config.alerts.raw_evidence_bytes
