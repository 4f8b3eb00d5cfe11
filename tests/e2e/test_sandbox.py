"""The local sandbox over real loopback HTTP: the page's routes, and that every input reaches the bot as a signed
Slack request (the browser itself is driven in test_sandbox_browser.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from decklog.adapters.local.sandbox import SandboxPage
from decklog.adapters.local.sandbox.samples import ALERT_PATH, CHANGE_PATH, installed
from decklog.adapters.local.services import FakeDeployService
from decklog.adapters.local.slack import FakeSlack
from decklog.adapters.slack.ids import Action, DeclareField
from decklog.bot.parts import Provides, Route
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.bot.wiring import Parts
from tests.conftest import ServerFactory, eventually, test_config

ALICE, BOB = "U0ALICE", "U0BOB"
ALERTS, GENERAL = "C0ALERTS", "C0GENERAL"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        yield session


def as_the_page(server: DecklogServer) -> dict[str, str]:
    """What the page's own fetch sends: its origin and this run's token (tests/e2e/test_sandbox_exposure.py checks
    that a POST without them is refused)."""
    assert server.parts.page is not None
    return {
        "Origin": server.url,
        "Sec-Fetch-Site": "same-origin",
        "X-Decklog-Sandbox-Token": server.parts.page.page.token,
    }


async def call(http: aiohttp.ClientSession, server: DecklogServer, path: str, body: Any) -> tuple[int, Any]:
    async with http.post(server.url + path, json=body, headers=as_the_page(server)) as response:
        return response.status, await response.json()


def page_of(server: DecklogServer) -> SandboxPage:
    assert server.parts.page is not None
    return server.parts.page.page


def fake(server: DecklogServer) -> FakeSlack:
    assert isinstance(server.sandbox, FakeSlack)
    return server.sandbox


async def declared_header(server: DecklogServer, title: str) -> Any:
    ws = fake(server).workspace

    def find() -> Any:
        return next((m for m in ws.bot_messages(ALERTS) if title in m.text and not m.is_reply), None)

    header = await eventually(find, timeout=8, what=f"the header of {title!r}")
    # a person cannot reply faster than the bot links the thread to its scope; a test can
    await eventually(lambda: server.runtime.index.route(header.channel, header.ts), what="the thread's route")
    return header


async def test_the_page_and_its_assets_are_served_from_the_package(server: DecklogServer, http: Any) -> None:
    async with http.get(server.url + "/") as response:
        assert response.status == 200
        assert response.content_type == "text/html"
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
        html = await response.text()
    assert '<script type="module" src="/sandbox/assets/sandbox.js">' in html
    assert f'<meta name="decklog-sandbox-token" content="{page_of(server).token}">' in html
    assert "{{TOKEN}}" not in html
    here = Path(__file__).resolve().parents[2] / "adapters" / "local" / "sandbox"
    for name, kind in (
        ("sandbox.js", "text/javascript"),
        ("mrkdwn.js", "text/javascript"),
        ("blocks.js", "text/javascript"),
        ("sandbox.css", "text/css"),
    ):
        async with http.get(f"{server.url}/sandbox/assets/{name}") as response:
            assert response.status == 200, name
            assert response.content_type == kind
            assert await response.text() == (here / name).read_text(encoding="utf-8")
    for name in ("page.py", "..%2Fpage.py", "index.html"):
        async with http.get(f"{server.url}/sandbox/assets/{name}") as response:
            assert response.status == 404, name
            assert "error" in await response.json()


async def test_state_is_the_workspace_snapshot_with_the_sandbox_around_it(server: DecklogServer, http: Any) -> None:
    async with http.get(server.url + "/sandbox/state") as response:
        state = await response.json()
    names = {c["name"] for c in state["channels"]}
    assert {"alerts", "general"} <= names
    assert {p["user"]["name"] for p in state["people"].values()} >= {"alice", "bob", "carol", "decklog"}
    assert state["bot"]["user_id"] == "U0BOT"
    assert isinstance(state["version"], int)
    deploy = state["sandbox"]["deploy"]
    assert deploy["service"] == "payments" and deploy["current"] and deploy["used_by_actions"]
    assert state["sandbox"]["alert_token"] == server.settings.alert_token.get_secret_value()  # type: ignore[union-attr]


async def test_sandbox_fills_unset_settings_with_loopback_fakes(server: DecklogServer) -> None:
    page = page_of(server)
    deploy = page.env.deploy
    assert server.settings.deploy_api_url == deploy.base_url
    assert server.settings.deploy_api_url.startswith("http://127.0.0.1:")
    assert page.env.deploy_url == deploy.base_url
    token = server.settings.alert_token
    assert token is not None and len(token.get_secret_value()) >= 24
    assert page.env.alert_token == token.get_secret_value()
    assert server.settings.approver_ids == ("U0ALICE", "U0BOB", "U0CAROL")
    # a baseline deploy exists, so that rolling back the sample deploy has somewhere to go
    assert len(deploy.deploys("payments")) == 1


async def test_operator_settings_are_never_replaced(make_server: ServerFactory, http: Any) -> None:
    server = await make_server(deploy_api_url="http://127.0.0.1:9/deploys", alert_token="s3cret-op", approvers="U0BOB")
    assert server.settings.deploy_api_url == "http://127.0.0.1:9/deploys"
    assert server.settings.alert_token is not None
    assert server.settings.alert_token.get_secret_value() == "s3cret-op"
    assert server.settings.approver_ids == ("U0BOB",)
    async with http.get(server.url + "/sandbox/state") as response:
        info = (await response.json())["sandbox"]
    assert info["alert_token"] is None  # an operator's token is never shown on the page
    assert info["deploy"]["used_by_actions"] is False


async def test_outside_sandbox_mode_the_local_world_is_not_built(tmp_path: Path) -> None:
    async with FakeSlack(bot_token="xoxb-real") as slack:
        settings = Settings(
            data_dir=tmp_path,
            host="127.0.0.1",
            port=0,
            slack_bot_token="xoxb-real",
            slack_signing_secret="real-secret",
            slack_api_url=slack.base_url,
        )
        async with DecklogServer(settings, config=test_config(), parts={"sandbox"}) as server:
            assert server.mode == "http" and server.sandbox is None
            assert server.parts.world is None and server.parts.page is None
            assert not [r for r in server.parts.routes if r.path == "/" or r.path.startswith("/sandbox")]
            assert server.settings.alert_token is None and server.settings.deploy_api_url is None


async def test_composer_slash_command_reaches_the_bot_as_a_signed_command(server: DecklogServer, http: Any) -> None:
    slack = fake(server)
    status, body = await call(
        http,
        server,
        "/sandbox/message",
        {"user": "alice", "channel": ALERTS, "text": "/incident declare Checkout latency sev2"},
    )
    assert status == 200 and body["ok"] and body["command"] is True
    assert body["bot_status"] == 200  # the bot verified Slack's signature and acked
    delivered = [d for d in slack.deliveries if d.kind == "slash_commands"]
    assert delivered[-1].payload["text"] == "declare Checkout latency sev2"
    assert delivered[-1].payload["user_id"] == ALICE
    header = await declared_header(server, "Checkout latency")
    assert "SEV2" in header.text
    # the bot really checks signatures: the same route refuses a forged one
    forged = await slack.driver.signed_with(signature="v0=" + "0" * 64).slash_command(
        "list", user=ALICE, channel=ALERTS
    )
    assert forged.status == 401


async def test_mentions_are_encoded_and_typed_text_escaped_as_slack_does(server: DecklogServer, http: Any) -> None:
    slack = fake(server)
    await call(
        http, server, "/sandbox/message", {"user": "alice", "channel": ALERTS, "text": "/incident declare DB down"}
    )
    header = await declared_header(server, "DB down")
    status, body = await call(
        http,
        server,
        "/sandbox/message",
        {"user": "bob", "channel": ALERTS, "thread_ts": header.ts, "text": "@decklog sev 1"},
    )
    assert status == 200 and body["bot_status"] == 200
    reply = slack.workspace.message(ALERTS, body["ts"])
    assert reply.text == "<@U0BOT> sev 1"
    assert reply.thread_ts == header.ts and reply.user == BOB
    kinds = [d.payload["event"]["type"] for d in slack.deliveries if d.kind == "events_api"]
    assert "app_mention" in kinds
    await eventually(lambda: "SEV1" in slack.workspace.message(ALERTS, header.ts).text, what="the header at SEV1")
    status, body = await call(
        http,
        server,
        "/sandbox/message",
        {"user": "bob", "channel": ALERTS, "thread_ts": header.ts, "text": "x <b>&amp;"},
    )
    assert slack.workspace.message(ALERTS, body["ts"]).text == "x &lt;b&gt;&amp;amp;"
    status, body = await call(
        http, server, "/sandbox/message", {"user": "bob", "channel": GENERAL, "text": "see #alerts and #nope"}
    )
    assert slack.workspace.message(GENERAL, body["ts"]).text == "see <#C0ALERTS|alerts> and #nope"


async def test_requests_the_page_should_not_send_are_refused_with_a_reason(server: DecklogServer, http: Any) -> None:
    cases: list[tuple[Any, str]] = [
        ({"user": "alice", "channel": ALERTS, "text": "/deploy now"}, "not a valid command"),
        ({"user": "mallory", "channel": ALERTS, "text": "hi"}, "user_not_found"),
        ({"user": "decklog", "channel": ALERTS, "text": "hi"}, "the bot cannot"),
        ({"user": "alice", "channel": "#nowhere", "text": "hi"}, "channel_not_found"),
        ({"user": "alice", "channel": ALERTS}, "text is required"),
        ({"user": "alice", "channel": ALERTS, "text": 3}, "text must be a string"),
        (["not", "an", "object"], "JSON object"),
    ]
    for body, reason in cases:
        status, answer = await call(http, server, "/sandbox/message", body)
        assert status == 400, body
        assert reason in answer["error"], (body, answer)
    async with http.post(
        server.url + "/sandbox/message",
        data=b"{nope",
        headers={"Content-Type": "application/json", **as_the_page(server)},
    ) as r:
        assert r.status == 400
    status, answer = await call(
        http, server, "/sandbox/action", {"user": "alice", "channel": ALERTS, "ts": "1.000001", "action_id": "x"}
    )
    assert status == 400 and "message_not_found" in answer["error"]
    status, answer = await call(
        http, server, "/sandbox/reaction", {"user": "alice", "channel": ALERTS, "ts": "1.1", "name": "<b>"}
    )
    assert status == 400 and "not an emoji name" in answer["error"]


async def test_header_controls_and_reactions_go_through_slack(server: DecklogServer, http: Any) -> None:
    slack = fake(server)
    await call(
        http, server, "/sandbox/message", {"user": "alice", "channel": ALERTS, "text": "/incident declare API slow"}
    )
    header = await declared_header(server, "API slow")
    status, body = await call(
        http,
        server,
        "/sandbox/action",
        {
            "user": "bob",
            "channel": ALERTS,
            "ts": header.ts,
            "action_id": Action.SEVERITY,
            "value": "3",
            "kind": "select",
        },
    )
    assert status == 200 and body["bot_status"] == 200
    action = [d for d in slack.deliveries if d.kind == "interactive"][-1].payload
    assert action["type"] == "block_actions" and action["user"]["id"] == BOB
    assert action["actions"][0]["selected_option"]["value"] == "3"
    await eventually(lambda: "SEV3" in slack.workspace.message(ALERTS, header.ts).text, what="the header at SEV3")
    status, body = await call(
        http, server, "/sandbox/reaction", {"user": "bob", "channel": ALERTS, "ts": header.ts, "name": ":eyes:"}
    )
    assert status == 200 and body["bot_status"] == 200
    assert slack.workspace.message(ALERTS, header.ts).reactions == {"eyes": [BOB]}
    event = [d for d in slack.deliveries if d.kind == "events_api"][-1].payload["event"]
    assert event["type"] == "reaction_added" and event["reaction"] == "eyes"
    status, _ = await call(
        http,
        server,
        "/sandbox/reaction",
        {"user": "bob", "channel": ALERTS, "ts": header.ts, "name": "eyes", "remove": True},
    )
    assert status == 200 and slack.workspace.message(ALERTS, header.ts).reactions == {}
    status, body = await call(
        http,
        server,
        "/sandbox/action",
        {
            "user": "alice",
            "channel": ALERTS,
            "ts": header.ts,
            "action_id": Action.RESOLVE,
            "value": "incident/api-slow",
        },
    )
    assert status == 200 and body["bot_status"] == 200
    await eventually(lambda: "resolved" in slack.workspace.message(ALERTS, header.ts).text, what="the header resolved")


async def test_the_declare_modal_opens_validates_and_submits(server: DecklogServer, http: Any) -> None:
    slack = fake(server)
    status, _ = await call(
        http, server, "/sandbox/message", {"user": "carol", "channel": GENERAL, "text": "/incident declare"}
    )
    assert status == 200
    modal = (await eventually(lambda: slack.workspace.modals("carol"), what="the declare modal"))[-1]
    # Slack's client does not submit a required input left empty
    status, answer = await call(
        http, server, "/sandbox/view/submit", {"user": "carol", "view_id": modal.id, "values": {}}
    )
    assert status == 400 and "required" in answer["error"]
    # the bot's own validation comes back as response_action errors, shown on the modal
    blank = {DeclareField.TITLE_BLOCK: {DeclareField.TITLE: "   "}}
    status, answer = await call(
        http, server, "/sandbox/view/submit", {"user": "carol", "view_id": modal.id, "values": blank}
    )
    assert status == 200 and answer["result"] == "errors"
    async with http.get(server.url + "/sandbox/state") as response:
        shown = (await response.json())["people"]["U0CAROL"]["modals"][-1]
    assert DeclareField.TITLE_BLOCK in shown["errors"]
    values = {
        DeclareField.TITLE_BLOCK: {DeclareField.TITLE: "Queue backlog"},
        DeclareField.SEVERITY_BLOCK: {DeclareField.SEVERITY: "2"},
        DeclareField.OPTIONS_BLOCK: {DeclareField.OPTIONS: []},
    }
    status, answer = await call(
        http, server, "/sandbox/view/submit", {"user": "carol", "view_id": modal.id, "values": values}
    )
    assert status == 200 and answer["result"] == "closed"
    assert slack.workspace.modals("carol") == []
    header = await eventually(
        lambda: next((m for m in slack.workspace.bot_messages(GENERAL) if "Queue backlog" in m.text), None),
        what="the declared header",
    )
    assert "SEV2" in header.text


async def test_a_modal_can_be_closed(server: DecklogServer, http: Any) -> None:
    slack = fake(server)
    await call(http, server, "/sandbox/message", {"user": "bob", "channel": GENERAL, "text": "/incident declare"})
    modal = (await eventually(lambda: slack.workspace.modals("bob")))[-1]
    status, _ = await call(http, server, "/sandbox/view/close", {"user": "bob", "view_id": modal.id})
    assert status == 200 and slack.workspace.modals("bob") == []
    status, _ = await call(http, server, "/sandbox/view/close", {"user": "alice", "view_id": modal.id})
    assert status == 400


async def test_app_home_opens_through_the_app_home_opened_event(server: DecklogServer, http: Any) -> None:
    slack = fake(server)
    status, body = await call(http, server, "/sandbox/home", {"user": "alice"})
    assert status == 200 and body["bot_status"] == 200
    home = await eventually(lambda: slack.workspace.home("alice"), what="the published Home tab")
    assert "Open incidents" in json.dumps(home.body)


async def test_live_events_announce_each_workspace_change(server: DecklogServer, http: Any) -> None:
    async with http.get(server.url + "/sandbox/events") as stream:
        assert stream.content_type == "text/event-stream"
        events = _sse(stream)
        first = await asyncio.wait_for(anext(events), 5)
        assert first[0] == "hello" and isinstance(first[1]["version"], int)
        await call(http, server, "/sandbox/message", {"user": "bob", "channel": GENERAL, "text": "anyone around?"})
        name, data = await asyncio.wait_for(anext(events), 5)
        assert name == "change" and data["kind"] == "message_posted" and data["channel"] == GENERAL
        assert data["version"] > first[1]["version"]


async def _sse(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    name = ""
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            yield name, json.loads(line[6:])


async def test_stopping_the_server_ends_live_streams_at_once(tmp_path: Path) -> None:
    server = DecklogServer(Settings(data_dir=tmp_path, host="127.0.0.1", port=0), config=test_config())
    await server.start()
    async with aiohttp.ClientSession() as http, http.get(server.url + "/sandbox/events") as stream:
        await stream.content.readline()
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(server.stop(), 10)
        assert asyncio.get_running_loop().time() - started < 5


async def test_files_the_bot_uploads_are_served_as_inert_data(server: DecklogServer, http: Any) -> None:
    await server.parts.slack_out.client.files_upload_v2(
        channel=ALERTS, content="# Report\n<script>x</script>", filename="report.md"
    )
    stored = await eventually(lambda: fake(server).workspace.files.all(), what="an uploaded file")
    async with http.get(f"{server.url}/sandbox/files/{stored[0].id}/report.md") as response:
        assert response.status == 200
        assert response.headers["Content-Security-Policy"] == "sandbox"
        assert await response.text() == "# Report\n<script>x</script>"
    async with http.get(f"{server.url}/sandbox/files/{stored[0].id}/other.md") as response:
        assert response.status == 404
    async with http.get(f"{server.url}/sandbox/files/F0NOPE/report.md") as response:
        assert response.status == 404


async def test_channels_can_be_created_with_decklog_invited(server: DecklogServer, http: Any) -> None:
    status, body = await call(http, server, "/sandbox/channel", {"user": "bob", "name": "#Payments-War-Room"})
    assert status == 200
    channel = fake(server).workspace.channel(body["channel"])
    assert channel.name == "payments-war-room" and {"U0BOB", "U0BOT"} <= set(channel.members)
    status, answer = await call(http, server, "/sandbox/channel", {"user": "bob", "name": "payments-war-room"})
    assert status == 400 and "name_taken" in answer["error"]


async def test_sample_deploy_is_recorded_and_announced(server: DecklogServer, http: Any) -> None:
    deploy: FakeDeployService = page_of(server).env.deploy
    before = deploy.current_version("payments")
    status, body = await call(http, server, "/sandbox/sample/deploy", {"user": "alice"})
    assert status == 200 and body["ok"], body
    after = deploy.current_version("payments")
    assert after != before and after is not None
    assert deploy.deploys("payments")[0]["author"] == "alice"
    if installed({r.path for r in server.parts.routes}, CHANGE_PATH):
        assert body["via"] == "/changes/generic" and 200 <= body["status"] < 300
    else:
        assert body["via"] == "deploy service" and "not installed" in body["note"]


async def test_sample_alert_opens_an_incident_through_the_receiver(server: DecklogServer, http: Any) -> None:
    status, body = await call(http, server, "/sandbox/sample/alert", {"status": "firing"})
    assert status == 200 and body["ok"], body
    if installed({r.path for r in server.parts.routes}, ALERT_PATH):
        assert body["via"] == "/alerts/alertmanager"
    else:
        assert body["via"] == "core" and "not installed" in body["note"]
    header = await declared_header(server, "payments: elevated 5xx error rate")
    assert "SEV1" in header.text
    status, body = await call(http, server, "/sandbox/sample/alert", {"status": "sideways"})
    assert status == 400


async def test_samples_go_to_the_receivers_with_the_token_in_their_real_formats(tmp_path: Path, http: Any) -> None:
    from decklog.adapters.alerts import ALERT_SOURCES
    from decklog.adapters.changes import CHANGE_SOURCES

    received: list[tuple[str, str, Any]] = []

    async def receive(request: web.Request) -> web.StreamResponse:
        received.append((request.path, request.headers.get("Authorization", ""), await request.json()))
        return web.json_response({"accepted": True}, status=202)

    def stub_receivers(parts: Parts) -> None:
        parts.provided.append(
            Provides(routes=[Route("POST", "/alerts/{source}", receive), Route("POST", "/changes/{source}", receive)])
        )

    settings = Settings(data_dir=tmp_path, host="127.0.0.1", port=0)
    async with DecklogServer(settings, config=test_config(), parts={"sandbox"}, on_built=stub_receivers) as server:
        token = server.settings.alert_token.get_secret_value()  # type: ignore[union-attr]
        status, deployed = await call(http, server, "/sandbox/sample/deploy", {"user": "carol"})
        assert status == 200 and deployed["via"] == "/changes/generic" and deployed["status"] == 202
        status, fired = await call(http, server, "/sandbox/sample/alert", {})
        assert status == 200 and fired["via"] == "/alerts/alertmanager" and fired["response"] == {"accepted": True}
        status, _ = await call(http, server, "/sandbox/sample/alert", {"status": "resolved"})
        assert status == 200
    assert [(path, auth) for path, auth, _ in received] == [
        ("/changes/generic", f"Bearer {token}"),
        ("/alerts/alertmanager", f"Bearer {token}"),
        ("/alerts/alertmanager", f"Bearer {token}"),
    ]
    (change,) = CHANGE_SOURCES["generic"].parse(received[0][2])
    assert change.service == "payments" and change.version == deployed["response"]["deploy"]["version"]
    assert change.author == "carol" and change.status == "succeeded" and change.commits
    (firing,) = ALERT_SOURCES["alertmanager"].parse(received[1][2])
    (resolved,) = ALERT_SOURCES["alertmanager"].parse(received[2][2])
    assert firing.status == "firing" and resolved.status == "resolved"
    assert firing.fingerprint == resolved.fingerprint and firing.service == "payments"
    assert firing.source_severity == "critical" and firing.started_at == resolved.started_at
