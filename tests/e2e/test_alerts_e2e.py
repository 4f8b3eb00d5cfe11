"""The alert receivers end to end: real vendor payloads (tests/fixtures/alerts) POSTed over loopback HTTP to
``decklog serve`` with the fake Slack. Open, repeat, group, resolve, authentication, bad input, 413, rate-limit
summaries and racing first alerts. Effects are polled with deadlines; nothing sleeps for an effect."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from decklog.adapters.alerts import ALERT_SOURCES
from decklog.bot.server import DecklogServer
from decklog.core.alerts import SUMMARY_SOURCE
from decklog.core.entries import Entry
from decklog.core.errors import NotFound
from tests.conftest import ServerFactory, eventually, test_config
from tests.fakes.slack_calls import slack_calls

TOKEN = "s3cret-alert-token"
ALERTS_CHANNEL = "C0ALERTS"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"
ALERT_FIXTURES = sorted((p.parent.name, p.name) for p in FIXTURES.glob("*/*.json"))


def fixture(source: str, name: str) -> bytes:
    return (FIXTURES / source / name).read_bytes()


def generic(fingerprint: str = "payments-5xx", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"title": f"{fingerprint} is failing", "fingerprint": fingerprint, "service": "payments"}
    body.update(fields)
    return body


def synchronous(path: str) -> str:
    """An alert path with ``?wait=30``: these tests read each alert's outcome in the answer (the receipts and the
    202-before-routing answer have their own tests, tests/e2e/test_alert_receipts.py)."""
    if not path.startswith("/alerts/") or "wait=" in path:
        return path
    return path + ("&" if "?" in path else "?") + "wait=30"


async def post(
    server: DecklogServer,
    path: str,
    body: bytes | dict[str, Any] | list[Any],
    *,
    token: str | None = TOKEN,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    path = synchronous(path)
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession() as http, http.post(server.url + path, data=data, headers=sent) as response:
        text = await response.text()
        return response.status, (json.loads(text) if text else None)


async def alerts_server(make_server: ServerFactory, **alerts: Any) -> DecklogServer:
    server = await make_server(alert_token=TOKEN, config=test_config(alerts=alerts) if alerts else None)
    server.parts.receivers.receivers.summarizer.interval = 0.3
    return server


@pytest.fixture
async def server(make_server: ServerFactory) -> DecklogServer:
    return await alerts_server(make_server)


async def entries(server: DecklogServer, scope: str, kind: str | None = None) -> list[Entry]:
    return [e for e in await server.runtime.store.read(scope) if kind is None or e.kind == kind]


async def incidents(server: DecklogServer) -> list[str]:
    return sorted(str(s) for s in await server.runtime.store.scope_ids() if s.kind == "incident")


async def all_entries(server: DecklogServer) -> int:
    return sum([len(await server.runtime.store.read(s)) for s in await server.runtime.store.scope_ids()])


async def thread_of(server: DecklogServer, scope: str) -> str:
    async def linked() -> str | None:
        try:
            state = await server.runtime.store.get_state(scope)
        except NotFound:
            return None
        return state.thread.ts if state.thread else None

    ts: str = await eventually(linked, what=f"the header thread of {scope}")
    return ts


def posts(server: DecklogServer) -> list[Any]:
    return slack_calls(server.sandbox).calls_to("chat.postMessage")


def replies(server: DecklogServer, ts: str) -> list[Any]:
    return server.sandbox.workspace.thread(ALERTS_CHANNEL, ts)[1:]


def header_text(server: DecklogServer, ts: str) -> str:
    return json.dumps(server.sandbox.workspace.thread(ALERTS_CHANNEL, ts)[0].blocks)


async def summaries(server: DecklogServer, scope: str) -> list[Entry]:
    return [e for e in await entries(server, scope, "observation") if e.payload.source == SUMMARY_SOURCE]


def pd_signature(body: bytes, secret: str = TOKEN) -> str:
    return "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# -- every vendor's sample ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "name"), ALERT_FIXTURES)
async def test_every_vendor_sample_is_accepted_and_routed(server: DecklogServer, source: str, name: str) -> None:
    body = fixture(source, name)
    expected = ALERT_SOURCES[source].parse(json.loads(body))
    status, answer = await post(server, f"/alerts/{source}", body)
    assert status == (202 if any(s.status == "firing" for s in expected) else 200), answer
    assert answer["received"] == len(expected) and answer["source"] == source
    assert [a["fingerprint"] for a in answer["alerts"]] == [s.fingerprint for s in expected]
    firing = [alert for alert, signal in zip(answer["alerts"], expected, strict=True) if signal.status == "firing"]
    for alert, signal in zip(answer["alerts"], expected, strict=True):
        if signal.status != "firing":
            assert alert["outcome"] == "ignored"
    # one notification is one incident: its first alert opens it, the others of the notification join it
    assert [a["outcome"] for a in firing] == (["new"] + ["joined"] * (len(firing) - 1) if firing else [])
    assert len({a["scope"] for a in firing}) == min(1, len(firing))
    if not expected:
        assert "note" in answer and await incidents(server) == []


async def test_pagerduty_signed_with_the_token_needs_no_bearer(server: DecklogServer) -> None:
    body = fixture("pagerduty", "payments_5xx_triggered.json")
    status, answer = await post(
        server, "/alerts/pagerduty", body, token=None, headers={"X-PagerDuty-Signature": pd_signature(body)}
    )
    assert status == 202 and answer["alerts"][0]["outcome"] == "new" and answer["alerts"][0]["severity"] == 1


# -- open, repeat, group, resolve ------------------------------------------------------------------------------


async def test_an_alert_opens_an_incident_in_the_alerts_channel_with_only_its_header(server: DecklogServer) -> None:
    status, answer = await post(server, "/alerts/alertmanager", fixture("alertmanager", "payments_5xx_firing.json"))
    assert status == 202
    (alert,) = answer["alerts"]
    assert alert["outcome"] == "new" and alert["severity"] == 1 and answer["scopes"] == [alert["scope"]]
    scope = alert["scope"]
    ts = await thread_of(server, scope)
    header = posts(server)[0]
    assert header.args["channel"] == ALERTS_CHANNEL and "payments: elevated 5xx error rate" in header.args["text"]
    assert "SEV1" in header.args["text"]
    observation = (await entries(server, scope, "observation"))[0]
    assert observation.payload.raw["json"]["groupKey"].startswith("{}/{service=")  # the vendor payload, as evidence
    assert observation.payload.fingerprint == "78e60a486ed56dec" and observation.payload.service == "payments"
    assert (await server.runtime.store.get_state(scope)).services == ("payments",)
    await eventually(lambda: "1 firing of 1" in header_text(server, ts), what="the alert counter on the header")
    assert replies(server, ts) == []  # the alert is the header: no message of its own


async def test_a_vendor_retry_appends_nothing_and_real_repeats_count_on_the_header(server: DecklogServer) -> None:
    body = fixture("alertmanager", "payments_5xx_firing.json")
    _, first = await post(server, "/alerts/alertmanager", body)
    scope = first["scopes"][0]
    status, retry = await post(server, "/alerts/alertmanager", body)
    assert status == 200 and retry["alerts"][0]["outcome"] == "duplicate" and retry["recorded"] == 0
    firing = json.loads(body)
    for n in range(3):  # Alertmanager re-notifying after the alert re-fired: a new startsAt each time
        firing["alerts"][0]["startsAt"] = f"2026-09-19T14:{10 + n}:00Z"
        status, again = await post(server, "/alerts/alertmanager", firing)
        assert status == 202 and again["alerts"][0]["outcome"] == "repeat" and again["scopes"] == [scope]
    assert len([e for e in await entries(server, scope, "observation") if e.payload.fingerprint]) == 4
    state = await server.runtime.store.get_state(scope)
    assert state.alerts["78e60a486ed56dec"].count == 4 and state.alert_repeats == 3
    ts = await thread_of(server, scope)
    await eventually(lambda: "3 repeats" in header_text(server, ts), what="the repeat counter on the header")

    async def summarised_repeats() -> int:
        return sum(e.payload.data["summary"]["repeats"] for e in await summaries(server, scope))

    # the repeats are summarised (in one summary, or two if the summary ran between them), never a message each
    await eventually(lambda: _equals(summarised_repeats(), 3), what="every repeat summarised")
    made = await summaries(server, scope)
    assert 1 <= len(made) <= 2
    await eventually(lambda: len(replies(server, ts)) == len(made), what="one message per summary")


async def test_a_new_fingerprint_on_the_same_service_joins_its_open_incident(server: DecklogServer) -> None:
    _, first = await post(server, "/alerts/generic", fixture("generic", "payments_5xx_firing.json"))
    _, joined = await post(server, "/alerts/generic", generic("payments-latency", title="payments: p99 latency"))
    _, other = await post(server, "/alerts/generic", generic("ledger-down", service="ledger"))
    assert joined["alerts"][0]["outcome"] == "joined" and joined["scopes"] == first["scopes"]
    assert other["alerts"][0]["outcome"] == "new" and other["scopes"] != first["scopes"]
    state = await server.runtime.store.get_state(first["scopes"][0])
    assert set(state.alerts) == {"payments-5xx", "payments-latency"}


async def test_outside_the_grouping_window_a_new_fingerprint_opens_its_own_incident(
    make_server: ServerFactory,
) -> None:
    server = await alerts_server(make_server, grouping_window_minutes=0)
    _, first = await post(server, "/alerts/generic", generic("payments-5xx"))
    _, second = await post(server, "/alerts/generic", generic("payments-latency"))
    assert second["alerts"][0]["outcome"] == "new" and second["scopes"] != first["scopes"]


async def test_all_alerts_resolved_suggest_resolving_once_and_nothing_resolves_by_itself(
    server: DecklogServer,
) -> None:
    _, first = await post(server, "/alerts/alertmanager", fixture("alertmanager", "payments_5xx_firing.json"))
    scope = first["scopes"][0]
    ts = await thread_of(server, scope)
    status, resolved = await post(server, "/alerts/alertmanager", fixture("alertmanager", "payments_5xx_resolved.json"))
    assert status == 202 and resolved["alerts"][0] == {
        **resolved["alerts"][0],
        "outcome": "resolved",
        "suggested_resolve": True,
    }
    _, retry = await post(server, "/alerts/alertmanager", fixture("alertmanager", "payments_5xx_resolved.json"))
    assert retry["alerts"][0]["outcome"] == "duplicate"
    suggestions = await entries(server, scope, "suggestion")
    assert [s.payload.action for s in suggestions] == ["resolve"]
    await eventually(
        lambda: [m for m in replies(server, ts) if "Resolve the incident?" in m.text], what="the suggestion message"
    )
    await eventually(lambda: "0 firing of 1" in header_text(server, ts), what="the header's counter")
    await eventually(lambda: summaries(server, scope), what="the resolve summarised")
    state = await server.runtime.store.get_state(scope)
    assert state.status == "investigating"  # a suggestion, never a resolution
    assert [s for s in await entries(server, scope, "suggestion") if s.payload.action == "resolve"] == suggestions[:1]


# -- authentication ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "headers"),
    [
        (None, {}),
        ("wrong", {}),
        (None, {"Authorization": f"Basic {TOKEN}"}),
        (None, {"Authorization": f"token {TOKEN}"}),
        (None, {"X-PagerDuty-Signature": "v1=" + "0" * 64}),  # not PagerDuty: a signature header does not count
    ],
)
async def test_alerts_without_the_token_are_refused(
    server: DecklogServer, token: str | None, headers: dict[str, str]
) -> None:
    before = await all_entries(server)
    status, answer = await post(server, "/alerts/generic", generic(), token=token, headers=headers)
    assert status == 401 and "Bearer" in answer["error"]
    assert await all_entries(server) == before and await incidents(server) == []


async def test_pagerduty_with_a_bad_signature_is_refused_and_a_good_one_accepted(server: DecklogServer) -> None:
    body = fixture("pagerduty", "incident_triggered.json")
    for signature in ("v1=" + "0" * 64, pd_signature(body, "another secret"), pd_signature(body + b" ")):
        status, answer = await post(
            server, "/alerts/pagerduty", body, token=None, headers={"X-PagerDuty-Signature": signature}
        )
        assert status == 401 and "X-PagerDuty-Signature" in answer["error"]
    assert await incidents(server) == []
    rotated = f"v1={'f' * 64},{pd_signature(body)}"  # during a secret rotation PagerDuty sends both
    status, _ = await post(server, "/alerts/pagerduty", body, token=None, headers={"X-PagerDuty-Signature": rotated})
    assert status == 202 and len(await incidents(server)) == 1


async def test_without_a_configured_token_every_request_is_refused_with_how_to_fix_it(server: DecklogServer) -> None:
    receivers = server.parts.receivers
    assert receivers is not None
    receivers.receivers.secret = None
    status, answer = await post(server, "/alerts/generic", generic())
    assert status == 401 and "set" in answer["error"] and "DECKLOG_ALERT_TOKEN" in answer["error"]
    receivers.receivers.secret = SecretStr("from-a-feature")  # e.g. the sandbox's generated token
    status, _ = await post(server, "/alerts/generic", generic(), token="from-a-feature")
    assert status == 202


# -- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/alerts/generic", b"{not json", "malformed JSON"),
        ("/alerts/generic", b"", "empty"),
        ("/alerts/generic", b"\xff\xfe{}", "UTF-8"),
        ("/alerts/generic", b'{"title": "x", "fingerprint": NaN}', "NaN"),
        ("/alerts/generic", b"[1, 2]", "expected a JSON object"),
        ("/alerts/generic", b'{"fingerprint": "x"}', "title: is required"),
        ("/alerts/generic", b'{"title": "x", "fingerprint": "y", "labels": {"a": [1]}}', "labels.a: expected a string"),
        ("/alerts/alertmanager", b'{"alerts": [{"status": "firing", "labels": 7}]}', "alerts[0].labels"),
        ("/alerts/pagerduty", b'{"event": {"event_type": "incident.triggered"}}', "event.data: is required"),
        ("/alerts/datadog", b'{"title": "x"}', "alert_id"),
        ("/alerts/grafana", b'{"ruleName": "legacy"}', "alerts"),
        ("/alerts/generic", b"[" * 100_000, "JSON"),
    ],
)
async def test_malformed_payloads_get_a_400_naming_the_problem_and_append_nothing(
    server: DecklogServer, path: str, body: bytes, needle: str
) -> None:
    status, answer = await post(server, path, body)
    assert status == 400 and needle in answer["error"], answer
    assert await all_entries(server) == 0


async def test_unknown_sources_are_404(server: DecklogServer) -> None:
    status, answer = await post(server, "/alerts/nagios", generic())
    assert status == 404 and "nagios" in answer["error"] and "alertmanager" in answer["error"]
    status, answer = await post(server, "/changes/jenkins", {"service": "x"})
    assert status == 404 and "jenkins" in answer["error"]


async def test_payloads_over_the_limit_are_413_whether_declared_or_streamed(make_server: ServerFactory) -> None:
    server = await alerts_server(make_server, max_payload_bytes=2048)
    big = json.dumps(generic(summary="x" * 4000)).encode()
    status, answer = await post(server, "/alerts/generic", big)
    assert status == 413 and "2048" in answer["error"]

    async def chunks() -> Any:
        for _ in range(8):
            yield b" " * 512

    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(server.url + "/alerts/generic", data=chunks(), headers=headers) as response,
    ):
        assert response.status == 413 and "error" in await response.json()
    status, _ = await post(server, "/alerts/generic", generic(summary="x" * 1000))
    assert status == 202
    refused = [s for s in await incidents(server) if "notifications-refused" in s]  # the 413s, recorded once
    assert len(await incidents(server)) == 2 and len(refused) == 1


# -- storms: rate limit and summaries -----------------------------------------------------------------------------


async def test_beyond_the_rate_limit_every_alert_is_recorded_and_slack_gets_summaries(
    make_server: ServerFactory,
) -> None:
    server = await alerts_server(make_server, rate_limit_per_minute=5)
    sent = 0
    for n in range(60):
        body = generic(f"fp-{n % 20}", service=f"svc-{n % 10}", event_id=f"ev-{n}")
        status, _ = await post(server, "/alerts/generic", body)
        assert status == 202
        sent += 1
    scopes = await incidents(server)
    assert len(scopes) == 6  # five before the limit, then one storm incident
    observations = [await entries(server, s, "observation") for s in scopes]
    assert sum(len([e for e in obs if e.payload.fingerprint]) for obs in observations) == sent  # all recorded
    # Slack: a header per incident, then summaries — every alert after an incident's opening one is in one
    opening = 5  # the storm incident's header is about the storm: its first alert is summarised too

    async def summarised() -> int:
        counted = [sum(e.payload.data["summary"]["alerts"] for e in await summaries(server, s)) for s in scopes]
        return sum(counted) if sum(counted) == sent - opening else 0

    await eventually(summarised, timeout=10, what="every later alert in a summary")
    total_summaries = sum([len(await summaries(server, s)) for s in scopes])

    async def posted_kinds() -> list[str]:
        kinds = []
        for call in posts(server):
            meta = call.args["metadata"]["event_payload"]
            if meta["key"] == "header":
                kinds.append("header")
                continue
            (entry,) = await server.runtime.store.read_seqs(meta["scope"], [meta["seq"]])
            kinds.append("summary" if entry.payload.source == SUMMARY_SOURCE else f"{entry.kind}:{entry.payload}")
        return kinds

    async def slack_caught_up() -> list[str]:
        kinds = await posted_kinds()
        return kinds if kinds.count("summary") == total_summaries else []

    kinds = await eventually(slack_caught_up, what="the summaries in Slack")
    assert kinds.count("header") == len(scopes)
    assert not [k for k in kinds if "fingerprint='fp-" in k]  # no message for any alert
    for scope in scopes:  # at most one summary per interval per incident
        times = [e.at for e in await summaries(server, scope)]
        assert all((b - a).total_seconds() >= 0.25 for a, b in itertools.pairwise(times))
    storm = [s for s in scopes if (await server.runtime.store.get_state(s)).title.startswith("Alert storm")]
    assert len(storm) == 1


async def test_concurrent_first_alerts_with_one_fingerprint_open_exactly_one_incident(server: DecklogServer) -> None:
    bodies = [generic("payments-5xx", event_id=f"delivery-{n}") for n in range(25)]
    results = await asyncio.gather(*(post(server, "/alerts/generic", b) for b in bodies))
    assert all(status == 202 for status, _ in results)
    outcomes = sorted(answer["alerts"][0]["outcome"] for _, answer in results)
    assert outcomes == ["new"] + ["repeat"] * 24
    (scope,) = await incidents(server)
    assert len([e for e in await entries(server, scope, "observation") if e.payload.fingerprint]) == 25
    await thread_of(server, scope)
    assert len([p for p in posts(server) if p.args.get("thread_ts") is None]) == 1  # one header


async def _equals(value: Any, expected: Any) -> bool:
    return await value == expected


@pytest.mark.parametrize(
    ("path", "setting"), [("/alerts/datadog", "Encode as form"), ("/changes/github", "Content type")]
)
async def test_form_encoded_bodies_get_a_400_naming_the_setting(server: DecklogServer, path: str, setting: str) -> None:
    body = b"payload=%7B%22title%22%3A%22x%22%7D"
    status, answer = await post(
        server, path, body, headers={"Content-Type": "application/x-www-form-urlencoded", "X-GitHub-Event": "push"}
    )
    assert status == 400 and "form-encoded" in answer["error"] and setting in answer["error"], answer
    assert await all_entries(server) == 0
