"""The fake Slack workspace, driven by the real clients: AsyncWebClient, Bolt over HTTP and over Socket Mode.

These tests pin what decklog's other tests rely on: the Web API speaks Slack's wire formats and errors, faults
are programmable, inbound requests are signed like Slack's, and people-level actions reach a real Bolt app in
both delivery modes. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.local.slack import (
    FakeSlack,
    FakeSlackServer,
    FakeSlackWorkspace,
    SlackDriver,
    workspace_snapshot,
)
from decklog.adapters.local.slack.pacing import ChannelPacer
from tests.fakes.polling import wait_for, wait_for_call
from tests.fakes.slack_calls import record_calls, slack_calls
from tests.fakes.slack_faults import slack_faults

SECRET = "s3cret-signing"
BOT_TOKEN = "xoxb-test"
APP_TOKEN = "xapp-test"


@pytest.fixture
async def server() -> AsyncIterator[FakeSlackServer]:
    async with FakeSlackServer() as fake:
        record_calls(fake)
        yield fake


@pytest.fixture
def client(server: FakeSlackServer) -> AsyncWebClient:
    return AsyncWebClient(token=BOT_TOKEN, base_url=server.base_url)


# -- the workspace -------------------------------------------------------------------------------------------


def test_workspace_seeds_a_bot_distinct_from_people_and_mints_increasing_ts() -> None:
    ws = FakeSlackWorkspace(ts_start=1_700_000_000.0)
    assert ws.user("U0BOT").is_bot and ws.user("U0BOT").bot_id == "B0BOT" and ws.user("decklog").id == "U0BOT"
    assert [ws.user(n).id for n in ("alice", "bob", "carol")] == ["U0ALICE", "U0BOB", "U0CAROL"]
    assert ws.channel("#alerts").id == "C0ALERTS" and ws.channel("general").id == "C0GENERAL"
    first = ws.post_as_user("alice", "#alerts", "one")
    second = ws.post_as_user("bob", "#alerts", "two")
    assert first.ts == "1700000000.000100" and float(second.ts) > float(first.ts)
    assert FakeSlackWorkspace().clock.next() < FakeSlackWorkspace().clock.next()  # wall clock, still increasing


async def test_change_feed_streams_posts_and_edits_to_a_subscriber() -> None:
    ws = FakeSlackWorkspace()
    seen: list[str] = []
    ws.add_listener(lambda change: seen.append(change.kind))
    queue = ws.subscribe()
    message = ws.post_as_user("alice", "#alerts", "hello")
    ws.messages.update("C0ALERTS", message.ts, editor="U0ALICE", text="hello!")
    first, second = queue.get_nowait(), queue.get_nowait()
    assert (first.kind, first.ts, first.data["text"]) == ("message_posted", message.ts, "hello")
    assert (second.kind, second.data["text"], second.data["edited"]["user"]) == (
        "message_changed",
        "hello!",
        "U0ALICE",
    )
    assert seen == ["message_posted", "message_changed"]
    ws.unsubscribe(queue)


def test_snapshot_nests_threads_and_is_json() -> None:
    ws = FakeSlackWorkspace()
    parent = ws.post_as_user("alice", "#alerts", "disk full")
    ws.post_as_bot("#alerts", "on it", thread_ts=parent.ts)
    ws.messages.post_ephemeral("C0ALERTS", "U0BOB", text="only bob")
    picture = json.loads(json.dumps(workspace_snapshot(ws)))
    alerts = next(c for c in picture["channels"] if c["id"] == "C0ALERTS")
    assert [m["text"] for m in alerts["messages"]] == ["disk full"]
    assert [r["text"] for r in alerts["messages"][0]["replies"]] == ["on it"]
    assert picture["people"]["U0BOB"]["ephemerals"][0]["text"] == "only bob"


def test_channel_pacer_allows_a_burst_then_about_one_per_second() -> None:
    now = [100.0]
    pacer = ChannelPacer(burst=2, per_second=1.0, monotonic=lambda: now[0])
    assert [pacer.admit("C1"), pacer.admit("C1"), pacer.admit("C1")] == [None, None, 1]
    assert pacer.admit("C2") is None  # per channel
    now[0] += 1.0
    assert pacer.admit("C1") is None


# -- Web API through the real AsyncWebClient -----------------------------------------------------------------


async def test_auth_test_identifies_the_bot(client: AsyncWebClient) -> None:
    me = await client.auth_test()
    assert (me["user_id"], me["bot_id"], me["team_id"]) == ("U0BOT", "B0BOT", "T0DECKLOG")
    assert "chat:write" in me.headers["x-oauth-scopes"]


async def test_thread_reply_with_metadata_reads_back_through_replies(
    server: FakeSlackServer, client: AsyncWebClient
) -> None:
    parent = await client.chat_postMessage(channel="C0ALERTS", text="payments-5xx firing")
    metadata = {"event_type": "decklog_entry", "event_payload": {"scope": "incident/payments-5xx", "seq": 3}}
    reply = await client.chat_postMessage(
        channel="C0ALERTS",
        thread_ts=parent["ts"],
        text="triage started",
        metadata=metadata,
        team_id="T0DECKLOG",
    )
    assert reply["message"]["thread_ts"] == parent["ts"] and reply["message"]["bot_id"] == "B0BOT"

    thread = await client.conversations_replies(channel="C0ALERTS", ts=parent["ts"], include_all_metadata=True)
    head, answer = thread["messages"]
    assert (head["reply_count"], head["latest_reply"], head["reply_users"]) == (1, reply["ts"], ["U0BOT"])
    assert answer["metadata"] == metadata and answer["parent_user_id"] == "U0BOT"
    plain = await client.conversations_replies(channel="C0ALERTS", ts=reply["ts"])  # a reply's ts: same thread
    assert [m["ts"] for m in plain["messages"]] == [parent["ts"], reply["ts"]] and "metadata" not in plain["messages"][
        1
    ]

    history = await client.conversations_history(channel="C0ALERTS", include_all_metadata=True)
    assert [m["ts"] for m in history["messages"]] == [parent["ts"]]  # replies stay in the thread
    call = slack_calls(server).calls_to("chat.postMessage")[-1]
    assert call.ok and call.args["metadata"] == metadata and call.args["team_id"] == "T0DECKLOG"


async def test_history_pages_newest_first_with_cursor_and_window(client: AsyncWebClient) -> None:
    posted = [(await client.chat_postMessage(channel="C0GENERAL", text=f"m{i}"))["ts"] for i in range(5)]
    page1 = await client.conversations_history(channel="C0GENERAL", limit=2)
    assert [m["text"] for m in page1["messages"]] == ["m4", "m3"] and page1["has_more"]
    cursor = page1["response_metadata"]["next_cursor"]
    page2 = await client.conversations_history(channel="C0GENERAL", limit=2, cursor=cursor)
    assert [m["text"] for m in page2["messages"]] == ["m2", "m1"]
    window = await client.conversations_history(channel="C0GENERAL", oldest=posted[1], latest=posted[3])
    assert [m["text"] for m in window["messages"]] == ["m2"]
    inclusive = await client.conversations_history(
        channel="C0GENERAL", oldest=posted[1], latest=posted[3], inclusive=True
    )
    assert [m["text"] for m in inclusive["messages"]] == ["m3", "m2", "m1"]
    last = await client.conversations_history(channel="C0GENERAL", limit=10)
    assert not last["has_more"] and last["response_metadata"]["next_cursor"] == ""


async def test_chat_update_edits_in_place_and_keeps_omitted_blocks(
    server: FakeSlackServer, client: AsyncWebClient
) -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*SEV2* payments"}}]
    posted = await client.chat_postMessage(channel="C0ALERTS", text="SEV2 payments", blocks=blocks)
    updated = await client.chat_update(channel="C0ALERTS", ts=posted["ts"], text="SEV1 payments")
    message = server.workspace.message("C0ALERTS", posted["ts"])
    assert updated["ts"] == posted["ts"] and message.text == "SEV1 payments" and message.edited is not None
    assert message.blocks is not None and message.blocks[0]["text"]["text"] == "*SEV2* payments"
    assert message.blocks[0]["block_id"]  # Slack fills in block ids

    human = server.workspace.post_as_user("alice", "#alerts", "mine")
    with pytest.raises(SlackApiError) as not_ours:
        await client.chat_update(channel="C0ALERTS", ts=human.ts, text="hijack")
    assert not_ours.value.response["error"] == "cant_update_message"
    await client.chat_delete(channel="C0ALERTS", ts=posted["ts"])
    with pytest.raises(SlackApiError) as gone:
        await client.chat_update(channel="C0ALERTS", ts=posted["ts"], text="again")
    assert gone.value.response["error"] == "message_not_found"


async def test_reactions_add_get_remove(server: FakeSlackServer, client: AsyncWebClient) -> None:
    message = server.workspace.post_as_user("bob", "#alerts", "db is slow")
    await client.reactions_add(channel="C0ALERTS", timestamp=message.ts, name="fire")
    got = await client.reactions_get(channel="C0ALERTS", timestamp=message.ts)
    assert got["message"]["reactions"] == [{"name": "fire", "users": ["U0BOT"], "count": 1}]
    with pytest.raises(SlackApiError) as twice:
        await client.reactions_add(channel="C0ALERTS", timestamp=message.ts, name="fire")
    assert twice.value.response["error"] == "already_reacted"
    with pytest.raises(SlackApiError) as colons:
        await client.reactions_add(channel="C0ALERTS", timestamp=message.ts, name=":fire:")
    assert colons.value.response["error"] == "invalid_name"
    await client.reactions_remove(channel="C0ALERTS", timestamp=message.ts, name="fire")
    assert server.workspace.message("C0ALERTS", message.ts).reactions == {}


async def test_files_upload_v2_shares_into_a_thread(server: FakeSlackServer, client: AsyncWebClient) -> None:
    parent = await client.chat_postMessage(channel="C0ALERTS", text="incident")
    result = await client.files_upload_v2(
        channel="C0ALERTS",
        thread_ts=parent["ts"],
        content="# Report\nall good",
        filename="report.md",
        title="Post-incident report",
        initial_comment="report attached",
    )
    file = result["file"]
    assert file["title"] == "Post-incident report" and file["name"] == "report.md"
    assert [c.method for c in slack_calls(server).calls] == [
        "chat.postMessage",
        "files.getUploadURLExternal",
        "upload_url",
        "files.completeUploadExternal",
    ]
    shared = server.workspace.thread("C0ALERTS", parent["ts"])[1]
    assert shared.text == "report attached" and shared.files[0]["id"] == file["id"]
    info = await client.files_info(file=file["id"])
    assert info["file"]["shares"]["public"]["C0ALERTS"][0]["thread_ts"] == parent["ts"]
    async with aiohttp.ClientSession() as http, http.get(info["file"]["url_private_download"]) as download:
        assert await download.text() == "# Report\nall good"


async def test_views_need_a_fresh_single_use_trigger(server: FakeSlackServer, client: AsyncWebClient) -> None:
    modal = {"type": "modal", "title": {"type": "plain_text", "text": "Declare"}, "blocks": []}
    trigger = server.workspace.issue_trigger("alice")
    opened = await client.views_open(trigger_id=trigger, view=modal)
    assert server.workspace.modals("alice")[0].id == opened["view"]["id"]
    for bad_trigger, error in ((trigger, "exchanged_trigger_id"), ("1.2.made-up", "invalid_trigger_id")):
        with pytest.raises(SlackApiError) as refused:
            await client.views_open(trigger_id=bad_trigger, view=modal)
        assert refused.value.response["error"] == error
    server.workspace.triggers.ttl = -1.0
    with pytest.raises(SlackApiError) as late:
        await client.views_open(trigger_id=server.workspace.issue_trigger("bob"), view=modal)
    assert late.value.response["error"] == "expired_trigger_id"

    updated = await client.views_update(view_id=opened["view"]["id"], view={**modal, "callback_id": "x"})
    with pytest.raises(SlackApiError) as stale:
        await client.views_update(view_id=opened["view"]["id"], view=modal, hash=opened["view"]["hash"])
    assert updated["view"]["callback_id"] == "x" and stale.value.response["error"] == "hash_conflict"
    home = {
        "type": "home",
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "No incidents"}}],
    }
    await client.views_publish(user_id="U0CAROL", view=home)
    carol_home = server.workspace.home("carol")
    assert carol_home is not None and carol_home.body["blocks"][0]["text"]["text"] == "No incidents"


@pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing")
@pytest.mark.parametrize(
    ("call", "error"),
    [
        ({"channel": "C0NOPE", "text": "x"}, "channel_not_found"),
        ({"channel": "C0ALERTS"}, "no_text"),
        ({"channel": "C0ALERTS", "text": "x", "thread_ts": "1.000001"}, "thread_not_found"),
        (
            {"channel": "C0ALERTS", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": ""}}]},
            "invalid_blocks",
        ),
        ({"channel": "C0ALERTS", "text": "x", "metadata": {"event_payload": {}}}, "invalid_metadata_format"),
    ],
)
async def test_post_message_errors_raise_slack_api_error(
    client: AsyncWebClient, call: dict[str, Any], error: str
) -> None:
    with pytest.raises(SlackApiError) as raised:
        await client.chat_postMessage(**call)
    assert raised.value.response.status_code == 200 and raised.value.response["error"] == error


async def test_membership_names_and_auth_errors(server: FakeSlackServer, client: AsyncWebClient) -> None:
    server.workspace.create_channel("war-room", creator="alice")
    with pytest.raises(SlackApiError) as outside:
        await client.chat_postMessage(channel="#war-room", text="hi")
    assert outside.value.response["error"] == "not_in_channel"
    await client.conversations_join(channel=server.workspace.channel("war-room").id)
    assert (await client.chat_postMessage(channel="#war-room", text="hi"))["ok"]
    created = await client.conversations_create(name="inc-payments-5xx")
    with pytest.raises(SlackApiError) as taken:
        await client.conversations_create(name="inc-payments-5xx")
    assert taken.value.response["error"] == "name_taken"
    await client.conversations_invite(channel=created["channel"]["id"], users="U0ALICE,U0BOB")
    assert server.workspace.channel("inc-payments-5xx").members == ["U0BOT", "U0ALICE", "U0BOB"]

    for token, error in (
        ("xoxb-other", None),
        ("xoxp-user", "invalid_auth"),
        (APP_TOKEN, "not_allowed_token_type"),
    ):
        other = AsyncWebClient(token=token, base_url=server.base_url)
        if error is None:
            assert (await other.auth_test())["ok"]
            continue
        with pytest.raises(SlackApiError) as refused:
            await other.auth_test()
        assert refused.value.response["error"] == error
    with pytest.raises(SlackApiError) as anonymous:
        await AsyncWebClient(base_url=server.base_url).auth_test()
    assert anonymous.value.response["error"] == "not_authed"
    with pytest.raises(SlackApiError) as bot_token_for_socket:
        await client.apps_connections_open(app_token=BOT_TOKEN)
    assert bot_token_for_socket.value.response["error"] == "not_allowed_token_type"


async def test_form_json_and_query_encodings_are_all_accepted(server: FakeSlackServer) -> None:
    headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
    async with aiohttp.ClientSession() as http:
        form = {
            "channel": "C0ALERTS",
            "text": "form",
            "metadata": json.dumps({"event_type": "t", "event_payload": {}}),
        }
        async with http.post(f"{server.base_url}chat.postMessage", data=form, headers=headers) as r:
            assert (await r.json())["ok"]
        async with http.post(
            f"{server.base_url}chat.postMessage",
            json={"channel": "C0ALERTS", "text": "json"},
            headers=headers,
        ) as r:
            assert (await r.json())["ok"]
        async with http.post(
            f"{server.base_url}chat.postMessage",
            data={"token": BOT_TOKEN, "channel": "C0ALERTS", "text": "token arg"},
        ) as r:
            assert (await r.json())["ok"]
        params = {"channel": "C0ALERTS", "include_all_metadata": "true"}
        async with http.get(f"{server.base_url}conversations.history", params=params, headers=headers) as r:
            body = await r.json()
        async with http.post(f"{server.base_url}no.such.method", headers=headers) as r:
            assert (await r.json())["error"] == "unknown_method"
    assert [m["text"] for m in body["messages"]] == ["token arg", "json", "form"]
    assert body["messages"][2]["metadata"] == {"event_type": "t", "event_payload": {}}


# -- faults --------------------------------------------------------------------------------------------------


async def test_429_raises_and_is_retried_by_the_rate_limit_handler(
    server: FakeSlackServer, client: AsyncWebClient
) -> None:
    slack_faults(server).ratelimit_next("chat.postMessage", retry_after=7)
    with pytest.raises(SlackApiError) as limited:
        await client.chat_postMessage(channel="C0ALERTS", text="x")
    response = limited.value.response
    assert (response.status_code, response["error"], response.headers["Retry-After"]) == (
        429,
        "ratelimited",
        "7",
    )
    assert server.workspace.history("C0ALERTS") == []

    slack_faults(server).ratelimit_next("chat.postMessage", retry_after=0)
    patient = AsyncWebClient(
        token=BOT_TOKEN,
        base_url=server.base_url,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=2)],
    )
    assert (await patient.chat_postMessage(channel="C0ALERTS", text="eventually"))["ok"]
    assert [c.status for c in slack_calls(server).calls_to("chat.postMessage")] == [429, 429, 200]


async def test_per_channel_pacing_limits_bursts(server: FakeSlackServer, client: AsyncWebClient) -> None:
    server.rate_limit_channels(burst=2, per_second=0.5)
    await client.chat_postMessage(channel="C0ALERTS", text="1")
    await client.chat_postMessage(channel="#alerts", text="2")
    with pytest.raises(SlackApiError) as paced:
        await client.chat_postMessage(channel="C0ALERTS", text="3")
    assert paced.value.response.status_code == 429 and paced.value.response.headers["Retry-After"] == "2"
    assert (await client.chat_postMessage(channel="C0GENERAL", text="other channel"))["ok"]
    server.rate_limit_channels(None)
    assert (await client.chat_postMessage(channel="C0ALERTS", text="3"))["ok"]


async def test_fail_next_answers_errors_without_effect(server: FakeSlackServer, client: AsyncWebClient) -> None:
    slack_faults(server).fail_next(
        "chat.postMessage", "fatal_error", status=500, count=2, where=lambda a: a["channel"] == "C0ALERTS"
    )
    for _ in range(2):
        with pytest.raises(SlackApiError) as failed:
            await client.chat_postMessage(channel="C0ALERTS", text="x")
        assert (failed.value.response.status_code, failed.value.response["error"]) == (500, "fatal_error")
    assert (await client.chat_postMessage(channel="C0GENERAL", text="y"))["ok"]  # `where` spares other channels
    assert (await client.chat_postMessage(channel="C0ALERTS", text="z"))["ok"]  # count exhausted
    assert [m.text for m in server.workspace.history("C0ALERTS")] == ["z"]
    assert [c.ok for c in slack_calls(server).calls_to("chat.postMessage")] == [False, False, True, True]


async def test_delayed_answer_times_out_the_client_but_the_effect_lands(
    server: FakeSlackServer,
) -> None:
    impatient = AsyncWebClient(token=BOT_TOKEN, base_url=server.base_url, timeout=1)
    slack_faults(server).delay_next("chat.postMessage", 1.3)
    with pytest.raises(asyncio.TimeoutError):
        await impatient.chat_postMessage(channel="C0ALERTS", text="slow")
    await wait_for(server, lambda: server.workspace.history("C0ALERTS"), what="the slow post to land")


async def test_apply_then_drop_loses_the_response_but_not_the_message(server: FakeSlackServer) -> None:
    no_retry = AsyncWebClient(token=BOT_TOKEN, base_url=server.base_url, retry_handlers=[])
    slack_faults(server).apply_then_drop("chat.postMessage")
    metadata = {"event_type": "decklog_entry", "event_payload": {"key": "incident/x#7"}}
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await no_retry.chat_postMessage(channel="C0ALERTS", text="uncertain", metadata=metadata)
    history = await no_retry.conversations_history(channel="C0ALERTS", include_all_metadata=True)
    assert [m["metadata"]["event_payload"]["key"] for m in history["messages"]] == ["incident/x#7"]
    assert slack_calls(server).calls_to("chat.postMessage")[0].dropped


async def test_default_client_retries_a_dropped_post_and_duplicates_it(server: FakeSlackServer) -> None:
    """The SDK's default retry handler resends after a lost connection; chat.postMessage is not idempotent."""
    default = AsyncWebClient(token=BOT_TOKEN, base_url=server.base_url)
    slack_faults(server).apply_then_drop("chat.postMessage")
    assert (await default.chat_postMessage(channel="C0ALERTS", text="twice"))["ok"]
    assert [m.text for m in server.workspace.history("C0ALERTS")] == ["twice", "twice"]


async def test_wait_for_times_out_with_recent_calls(server: FakeSlackServer, client: AsyncWebClient) -> None:
    await client.auth_test()
    with pytest.raises(AssertionError, match=r"(?s)timed out after 0.05s waiting for a call to chat.update.*auth.test"):
        await wait_for_call(server, "chat.update", timeout=0.05)


# -- Bolt, over HTTP and over Socket Mode --------------------------------------------------------------------


DECLARE_VIEW = {
    "type": "modal",
    "callback_id": "declare",
    "title": {"type": "plain_text", "text": "Declare incident"},
    "submit": {"type": "plain_text", "text": "Declare"},
    "blocks": [
        {
            "type": "input",
            "block_id": "title",
            "label": {"type": "plain_text", "text": "Title"},
            "element": {"type": "plain_text_input", "action_id": "title_input"},
        },
        {
            "type": "input",
            "block_id": "sev",
            "label": {"type": "plain_text", "text": "Severity"},
            "element": {
                "type": "static_select",
                "action_id": "sev_input",
                "options": [{"text": {"type": "plain_text", "text": f"SEV{n}"}, "value": f"sev{n}"} for n in (1, 2, 3)],
                "initial_option": {"text": {"type": "plain_text", "text": "SEV3"}, "value": "sev3"},
            },
        },
    ],
}


def build_app(base_url: str, heard: list[dict[str, Any]]) -> AsyncApp:
    """A small Bolt app exercising every kind of request the fake delivers."""
    app = AsyncApp(client=AsyncWebClient(token=BOT_TOKEN, base_url=base_url), signing_secret=SECRET)

    @app.command("/incident")
    async def incident(ack: Any, command: dict[str, Any], client: AsyncWebClient) -> None:
        if command["text"] == "declare":
            await ack()
            await client.views_open(trigger_id=command["trigger_id"], view=DECLARE_VIEW)
        elif command["text"] == "loud":
            await ack(response_type="in_channel", text="everyone sees this")
        else:
            await ack(f"echo: {command['text']}")

    @app.event("app_mention")
    async def mention(event: dict[str, Any], say: Any) -> None:
        buttons = {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": "ack_button",
                    "text": {"type": "plain_text", "text": "Ack"},
                    "value": "v1",
                },
                {
                    "type": "static_select",
                    "action_id": "sev_select",
                    "options": [{"text": {"type": "plain_text", "text": "SEV1"}, "value": "sev1"}],
                },
            ],
        }
        await say(text="on it", thread_ts=event["ts"], blocks=[buttons])

    @app.event("message")
    async def message(event: dict[str, Any], body: dict[str, Any], request: Any) -> None:
        retry_num = request.headers.get("x-slack-retry-num", [None])[0]
        heard.append({**event, "_event_id": body["event_id"], "_retry_num": retry_num})

    @app.event("reaction_added")
    async def reacted(event: dict[str, Any], client: AsyncWebClient) -> None:
        item = event["item"]
        await client.chat_postMessage(channel=item["channel"], thread_ts=item["ts"], text=f"saw {event['reaction']}")

    @app.action("ack_button")
    async def clicked(ack: Any, body: dict[str, Any], respond: Any) -> None:
        await ack()
        await respond(replace_original=True, text=f"acknowledged by <@{body['user']['id']}>")

    @app.action("sev_select")
    async def sev(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        value = body["actions"][0]["selected_option"]["value"]
        await client.chat_update(channel=body["channel"]["id"], ts=body["message"]["ts"], text=f"now {value}")

    @app.view("declare")
    async def declared(ack: Any, view: dict[str, Any], client: AsyncWebClient) -> None:
        values = view["state"]["values"]
        title = values["title"]["title_input"]["value"]
        if len(title) < 3:
            await ack(response_action="errors", errors={"title": "too short"})
            return
        await ack()
        sev_value = values["sev"]["sev_input"]["selected_option"]["value"]
        await client.chat_postMessage(channel="C0ALERTS", text=f"declared {title} ({sev_value})")

    @app.event("app_home_opened")
    async def home(event: dict[str, Any], client: AsyncWebClient) -> None:
        button = {"type": "button", "action_id": "approve", "text": {"type": "plain_text", "text": "Approve"}}
        await client.views_publish(
            user_id=event["user"],
            view={"type": "home", "blocks": [{"type": "actions", "elements": [button]}]},
        )

    @app.action("approve")
    async def approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await client.chat_postMessage(channel="C0GENERAL", text=f"approved by {body['user']['id']}")

    return app


async def serve_bolt_http(app: AsyncApp) -> tuple[web.AppRunner, str]:
    """Mounts the Bolt app in a plain aiohttp app, as decklog's server does, on a loopback port."""

    async def events(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    web_app = web.Application()
    web_app.router.add_post("/slack/events", events)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}/slack/events"


async def test_http_driver_signs_like_slack(server: FakeSlackServer) -> None:
    heard: list[dict[str, Any]] = []
    runner, events_url = await serve_bolt_http(build_app(server.base_url, heard))
    try:
        async with SlackDriver(events_url, SECRET, server=server) as driver:
            assert await driver.slash_command("ping", user="U0ALICE", channel="C0ALERTS") == (
                200,
                "echo: ping",
            )
            assert (
                await driver.signed_with(signature="v0=" + "0" * 64).slash_command("x", "U0ALICE", "C0ALERTS")
            ).status == 401
            assert (await driver.stale().slash_command("x", "U0ALICE", "C0ALERTS")).status == 401
            async with SlackDriver(events_url, "wrong-secret") as impostor:
                assert (await impostor.slash_command("x", "alice", "alerts")).status == 401
            assert (await driver.url_verification("chal-123")).json() == {"challenge": "chal-123"}

            event = {
                "type": "message",
                "channel": "C0ALERTS",
                "user": "U0BOB",
                "text": "hi",
                "ts": "1700000001.000100",
            }
            first = await driver.event(event, event_id="Ev0RETRY")
            retry = await driver.event(event, event_id="Ev0RETRY", retry_num=1, retry_reason="http_timeout")
            assert (first.status, retry.status) == (200, 200)
            await wait_for(server, lambda: len(heard) == 2, what="both deliveries of the retried event")

            message = server.workspace.post_as_bot(
                "C0ALERTS",
                "alert",
                blocks=[
                    {
                        "type": "actions",
                        "block_id": "b",
                        "elements": [
                            {
                                "type": "button",
                                "action_id": "ack_button",
                                "text": {"type": "plain_text", "text": "Ack"},
                                "value": "v",
                            }
                        ],
                    }
                ],
            )
            clicked = await driver.block_action(
                "U0ALICE", "C0ALERTS", message.ts, "ack_button", value="v", block_id="b"
            )
            assert clicked.status == 200
            await wait_for(server, lambda: server.responses, what="respond() through response_url")
            assert server.workspace.message("C0ALERTS", message.ts).text == "acknowledged by <@U0ALICE>"
            submitted = await driver.view_submission(
                "U0ALICE", "declare", {"title": {"title_input": {"type": "plain_text_input", "value": "ab"}}}
            )
            assert submitted.json() == {"response_action": "errors", "errors": {"title": "too short"}}
    finally:
        await runner.cleanup()


async def test_bolt_socket_mode_connects_acks_and_reconnects(server: FakeSlackServer) -> None:
    heard: list[dict[str, Any]] = []
    app = build_app(server.base_url, heard)
    handler = AsyncSocketModeHandler(app, app_token=APP_TOKEN)
    await handler.connect_async()
    try:
        await server.wait_socket_connected()
        command = SlackDriver("http://unused", SECRET, server=server).payloads.slash_command(
            server.workspace.user("alice"),
            server.workspace.channel("alerts"),
            command="/incident",
            text="ping",
            trigger_id=server.workspace.issue_trigger("alice"),
            response_url=server.response_url("C0ALERTS", "U0ALICE"),
        )
        ack = await server.socket_send("slash_commands", command)
        assert ack["payload"] == {"text": "echo: ping"} and server.socket.sent[-1]["accepts_response_payload"]
        assert slack_calls(server).calls_to("apps.connections.open")[0].ok

        await server.socket_disconnect()
        await wait_for(server, lambda: server.socket.connections_opened == 2 and server.socket.connections == 1)
        ack = await server.socket_send("slash_commands", {**command, "text": "again"})
        assert ack["payload"] == {"text": "echo: again"}
        with pytest.raises(AssertionError, match="no ack"):
            await server.socket_send(
                "events_api", {"type": "event_callback", "event": {"type": "nobody_listens"}}, timeout=0.3
            )
    finally:
        await handler.close_async()


# -- people in the workspace, told to the app in either delivery mode ----------------------------------------


@dataclass
class World:
    slack: FakeSlack
    heard: list[dict[str, Any]]


@pytest.fixture(params=["http", "socket"])
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    slack = FakeSlack(ack_timeout=2.0)
    base_url = await slack.start()
    heard: list[dict[str, Any]] = []
    app = build_app(base_url, heard)
    if request.param == "http":
        runner, events_url = await serve_bolt_http(app)
        slack.use_http(events_url, SECRET)
        try:
            yield World(slack, heard)
        finally:
            await runner.cleanup()
            await slack.stop()
    else:
        handler = AsyncSocketModeHandler(app, app_token=APP_TOKEN)
        await handler.connect_async()
        await slack.use_socket_mode()
        await slack.server.wait_socket_connected()
        try:
            yield World(slack, heard)
        finally:
            await handler.close_async()
            await slack.stop()


async def test_mention_gets_a_threaded_reply_whose_controls_work(world: World) -> None:
    slack, ws = world.slack, world.slack.workspace
    posted = await slack.post_message("alice", "#alerts", "@decklog payments are down")
    assert posted.message is not None and posted.message.text == "<@U0BOT> payments are down"
    assert [r.status for r in posted.responses] == [200, 200]  # message + app_mention
    thread = await wait_for(slack, lambda: ws.thread("#alerts", posted.ts)[1:], what="the bot's threaded reply")
    reply = thread[0]
    assert reply.bot_id == "B0BOT" and reply.text == "on it" and world.heard[0]["text"] == posted.message.text

    await slack.select_option("bob", "#alerts", reply.ts, "sev_select", "sev1")
    await wait_for(slack, lambda: ws.message("#alerts", reply.ts).text == "now sev1", what="chat.update from select")
    clicked = await slack.click_button("bob", "#alerts", reply.ts, "ack_button")
    assert clicked.status == 200
    await wait_for(slack, lambda: ws.message("#alerts", reply.ts).text == "acknowledged by <@U0BOB>")
    assert ws.message("#alerts", reply.ts).blocks == []  # replace_original replaces the whole message
    with pytest.raises(LookupError, match="no_such_button"):
        await slack.click_button("bob", "#alerts", reply.ts, "no_such_button")


async def test_reactions_edits_and_deletes_reach_the_app(world: World) -> None:
    slack, ws = world.slack, world.slack.workspace
    posted = await slack.post_message("carol", "#general", "checkout latency up")
    reacted = await slack.add_reaction("bob", "#general", posted.ts, ":pushpin:")
    assert reacted.status == 200 and ws.message("#general", posted.ts).reactions == {"pushpin": ["U0BOB"]}
    await wait_for(slack, lambda: [m.text for m in ws.thread("#general", posted.ts)[1:]] == ["saw pushpin"])

    await slack.edit_message("carol", "#general", posted.ts, "checkout latency way up")
    await slack.delete_message("carol", "#general", posted.ts)
    await wait_for(slack, lambda: len(world.heard) == 3, what="message, message_changed, message_deleted")
    changed, deleted = world.heard[1], world.heard[2]
    assert changed["subtype"] == "message_changed" and changed["message"]["text"] == "checkout latency way up"
    assert (
        changed["previous_message"]["text"] == "checkout latency up"
        and changed["message"]["edited"]["user"] == "U0CAROL"
    )
    assert deleted["subtype"] == "message_deleted" and deleted["deleted_ts"] == posted.ts
    with pytest.raises(PermissionError):
        await slack.edit_message("bob", "#general", ws.thread("#general", posted.ts)[1].ts, "not mine")


async def test_command_ack_modal_submission_and_home(world: World) -> None:
    slack, ws = world.slack, world.slack.workspace
    await slack.run_command("alice", "#alerts", "hello")
    assert [e.text for e in ws.ephemerals(user="alice")] == ["echo: hello"]
    await slack.run_command("alice", "#alerts", "loud")
    assert ws.history("#alerts")[-1].text == "everyone sees this"

    await slack.run_command("alice", "#alerts", "declare")
    modal = (await wait_for(slack, lambda: ws.modals("alice"), what="views.open with the command's trigger"))[0]
    rejected = await slack.submit_view("alice", modal.id, {"title": "db"})
    assert rejected.result == "errors" and modal.errors == {"title": "too short"} and ws.modals("alice")
    accepted = await slack.submit_view("alice", modal.id, {"title": "database down", "sev": "sev1"})
    assert accepted.result == "closed" and ws.modals("alice") == []
    await wait_for(slack, lambda: ws.history("#alerts")[-1].text == "declared database down (sev1)")
    await slack.run_command("bob", "#alerts", "declare")
    bobs = await wait_for(slack, lambda: ws.modals("bob"))
    with pytest.raises(ValueError, match="required input 'title'"):
        await slack.submit_view("bob", bobs[0].id, {})  # Slack's client would not let Bob submit an empty title

    await slack.open_home("carol")
    home = await wait_for(slack, lambda: ws.home("carol"), what="views.publish from app_home_opened")
    assert home is not None
    await slack.click_view_button("carol", home.id, "approve")
    await wait_for(slack, lambda: ws.history("#general") and ws.history("#general")[-1].text == "approved by U0CAROL")


async def test_the_app_does_not_hear_channels_its_bot_is_not_in(world: World) -> None:
    slack = world.slack
    slack.workspace.create_channel("private-chat", creator="alice", members=("bob",))
    posted = await slack.post_message("bob", "#private-chat", "@decklog are you here?")
    assert posted.responses == [] and posted.status is None
    assert [d.kind for d in slack.deliveries] == []


async def test_a_redelivered_event_keeps_its_event_id_and_says_it_is_a_retry(world: World) -> None:
    slack = world.slack
    await slack.post_message("bob", "#general", "is this thing on?")
    first = slack.deliveries[-1]
    assert (await slack.redeliver(first, retry_num=1, retry_reason="http_timeout")).status == 200
    await wait_for(slack, lambda: len(world.heard) == 2, what="the original delivery and Slack's retry")
    original, retry = world.heard
    assert original["_event_id"] == retry["_event_id"] == first.payload["event_id"]
    # Socket Mode envelopes carry retry_attempt 0 on a first delivery, and Bolt mirrors it as a header.
    assert original["_retry_num"] == (None if slack.delivery.mode == "http" else "0")
    assert retry["_retry_num"] == "1"


async def test_an_unreachable_app_does_not_break_the_workspace() -> None:
    async with FakeSlack() as slack:
        runner, events_url = await serve_bolt_http(AsyncApp(signing_secret=SECRET, token=BOT_TOKEN))
        await runner.cleanup()  # the app is down
        slack.use_http(events_url, SECRET)
        posted = await slack.post_message("alice", "#alerts", "anyone?")
        assert posted.status == 0 and "ClientConnectorError" in posted.responses[0].body
        assert [m.text for m in slack.workspace.history("#alerts")] == ["anyone?"]


async def test_socket_mode_spreads_envelopes_over_the_apps_connections_and_retries_on_another(
    server: FakeSlackServer,
) -> None:
    heard: list[dict[str, Any]] = []
    app = build_app(server.base_url, heard)
    handlers = [AsyncSocketModeHandler(app, app_token=APP_TOKEN) for _ in range(2)]  # two replicas of one app
    server.socket.spread = True
    try:
        for handler in handlers:
            await handler.connect_async()
        await wait_for(server, lambda: server.socket.connections == 2)
        command = SlackDriver("http://unused", SECRET, server=server).payloads.slash_command(
            server.workspace.user("alice"),
            server.workspace.channel("alerts"),
            command="/incident",
            text="ping",
            trigger_id=server.workspace.issue_trigger("alice"),
            response_url=server.response_url("C0ALERTS", "U0ALICE"),
        )
        for _ in range(4):
            assert (await server.socket_send("slash_commands", command))["payload"] == {"text": "echo: ping"}
        carriers = [server.socket.carried[e["envelope_id"]] for e in server.socket.sent]
        assert sorted(set(carriers)) == server.socket.connection_numbers() and len(set(carriers)) == 2
        assert all(a != b for a, b in itertools.pairwise(carriers))  # round-robin
        event = {
            "type": "event_callback",
            "event_id": "Ev0RETRY",
            "event": {
                "type": "app_mention",
                "user": "U0ALICE",
                "text": "<@U0BOT> hi",
                "channel": "C0ALERTS",
                "ts": "1.1",
            },
        }
        for attempt in range(3):  # each retry goes to the connection that did not carry the event last
            await server.socket_send(
                "events_api", event, retry_attempt=attempt, retry_reason="timeout" if attempt else None
            )
        last = [server.socket.carried[e["envelope_id"]] for e in server.socket.sent[-3:]]
        assert last[0] != last[1] != last[2]
    finally:
        for handler in handlers:
            await handler.close_async()
