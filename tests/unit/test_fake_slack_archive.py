"""The fake Slack's ``conversations.archive``, driven by the real AsyncWebClient: the answers Slack documents
(docs.slack.dev/reference/methods/conversations.archive — ``{"ok": true}``, ``already_archived``,
``cant_archive_general``, ``not_in_channel``, ``channel_not_found``, ``method_not_supported_for_channel_type``),
and an archived channel refusing posts and edits with ``is_archived`` as chat.postMessage documents."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.local.slack import FakeSlackServer
from tests.fakes.slack_calls import record_calls, slack_calls

BOT_TOKEN = "xoxb-test"


@pytest.fixture
async def server() -> AsyncIterator[FakeSlackServer]:
    async with FakeSlackServer() as fake:
        record_calls(fake)
        yield fake


@pytest.fixture
def client(server: FakeSlackServer) -> AsyncWebClient:
    return AsyncWebClient(token=BOT_TOKEN, base_url=server.base_url)


async def _error(call: object) -> str:
    with pytest.raises(SlackApiError) as caught:
        await call  # type: ignore[misc]
    assert caught.value.response.status_code == 200 and caught.value.response["ok"] is False
    return str(caught.value.response["error"])


async def test_archive_answers_ok_then_already_archived_and_the_channel_is_read_only(
    server: FakeSlackServer, client: AsyncWebClient
) -> None:
    created = await client.conversations_create(name="inc-search-down")
    channel = created["channel"]["id"]
    posted = await client.chat_postMessage(channel=channel, text="before")
    seen: list[str] = []
    server.workspace.add_listener(lambda change: seen.append(change.kind))
    resp = await client.conversations_archive(channel=channel)
    assert resp.data == {"ok": True}
    info = await client.conversations_info(channel=channel)
    assert info["channel"]["is_archived"] is True
    assert await _error(client.conversations_archive(channel=channel)) == "already_archived"
    assert await _error(client.chat_postMessage(channel=channel, text="after")) == "is_archived"
    assert await _error(client.chat_update(channel=channel, ts=posted["ts"], text="edited")) == "is_archived"
    assert len(slack_calls(server).calls_to("conversations.archive", ok=True)) == 1
    assert len(slack_calls(server).calls_to("conversations.archive", ok=False)) == 1
    assert seen.count("channel_archived") == 1


async def test_archive_refusals(server: FakeSlackServer, client: AsyncWebClient) -> None:
    assert await _error(client.conversations_archive(channel="C0GENERAL")) == "cant_archive_general"
    assert await _error(client.conversations_archive(channel="C0NOSUCH")) == "channel_not_found"
    others = server.workspace.directory.create_channel("ops-room", creator="U0ALICE")
    assert await _error(client.conversations_archive(channel=others.id)) == "not_in_channel"
    dm = await client.conversations_open(users="U0ALICE")
    assert (
        await _error(client.conversations_archive(channel=dm["channel"]["id"]))
        == "method_not_supported_for_channel_type"
    )
    assert not any(c.is_archived for c in server.workspace.directory.channels())


async def test_an_archived_channel_survives_the_workspace_round_trip(
    server: FakeSlackServer, client: AsyncWebClient
) -> None:
    created = await client.conversations_create(name="inc-db-down")
    await client.conversations_archive(channel=created["channel"]["id"])
    data = server.workspace.to_dict()
    server.workspace.load_dict(data)
    assert server.workspace.channel(created["channel"]["id"]).is_archived
