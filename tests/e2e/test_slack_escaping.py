"""What people and alerts wrote never becomes a ping or a link in Slack.

Slack reads a message's top-level ``text`` (its notification and screen-reader text) as mrkdwn, like its blocks:
``<!channel>`` pings the channel, ``<@U0BOB>`` pings Bob, ``<https://evil.example|click>`` is a disguised link. A
declare, a decision, a resolve summary and an alert, each carrying those, go through the real doors (the sandbox's
signed Slack requests, the alert webhook); every text the fake Slack recorded (posts, updates, ephemeral and
``response_url`` answers) shows them escaped, and none carries them raw.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aiohttp

from decklog.adapters.local.slack import FakeSlack
from decklog.bot.server import DecklogServer
from tests.conftest import ServerFactory, eventually
from tests.fakes.slack_calls import slack_calls

HOSTILE = "<!channel> <@U0BOB> <https://evil.example|click>"
RAW = ("<!channel>", "<@U0BOB>", "<https://evil.example")
ESCAPED = "&lt;!channel&gt; &lt;@U0BOB&gt; &lt;https://evil.example|click&gt;"
ALICE, GENERAL, ALERTS = "U0ALICE", "C0GENERAL", "C0ALERTS"
TOKEN = "alert-t0ken"


def texts(value: Any) -> Iterator[str]:
    """Every string in a recorded call's arguments (text, blocks, attachments, views: all of it)."""
    if isinstance(value, str):
        if value[:1] in "[{":
            try:
                yield from texts(json.loads(value))
                return
            except ValueError:
                pass
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from texts(item)


def sent(fake: FakeSlack) -> list[tuple[str, str]]:
    """(method, string) for every string decklog sent to Slack: Web API calls and ``response_url`` answers."""
    out = [(call.method, s) for call in slack_calls(fake).calls for s in texts(call.args)]
    out += [("response_url", s) for r in fake.server.responses for s in texts(r.body)]
    return out


def raw_in(fake: FakeSlack) -> list[tuple[str, str]]:
    # plain_text objects (a header block, a select's options) are never read as mrkdwn: the raw title is right there
    plain = {s for call in slack_calls(fake).calls for s in _plain_texts(call.args)}
    return [(m, s) for m, s in sent(fake) if any(r in s for r in RAW) and s not in plain]


def _plain_texts(value: Any) -> Iterator[str]:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            value = json.loads(value)
        except ValueError:
            return
    if isinstance(value, dict):
        if value.get("type") == "plain_text" and isinstance(value.get("text"), str):
            yield value["text"]
        for item in value.values():
            yield from _plain_texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _plain_texts(item)


async def _scope(server: DecklogServer) -> str:
    rows = await server.runtime.index.list_scopes(kind="incident")
    return rows[0].id if rows else ""


async def test_a_hostile_title_decision_and_summary_are_escaped_wherever_they_go(server: DecklogServer) -> None:
    fake = server.sandbox
    assert fake is not None
    await fake.run_command(ALICE, GENERAL, f"declare {HOSTILE} sev2")
    scope = await eventually(lambda: _scope(server), what="the incident")
    thread = await eventually(lambda: _thread(server, scope), what="the header's thread")
    header = next(
        c for c in slack_calls(fake).calls if c.method == "chat.postMessage" and c.args.get("channel") == GENERAL
    )
    assert ESCAPED in header.args["text"], header.args["text"]

    await fake.post_message(ALICE, GENERAL, f"@decklog decision {HOSTILE}", thread_ts=thread)
    await fake.run_command(ALICE, GENERAL, f"status {scope}")
    await fake.run_command(ALICE, GENERAL, "list")
    await fake.run_command(ALICE, GENERAL, f"role {scope} <!channel> <@U0ALICE>")
    await fake.run_command(ALICE, GENERAL, f"resolve {scope} {HOSTILE}")

    def decision_posted() -> bool:
        return any(
            c.method == "chat.postMessage"
            and c.args.get("thread_ts") == thread
            and "Decision" in c.args.get("text", "")
            for c in slack_calls(fake).calls
        )

    await eventually(decision_posted, what="the decision posted in the thread")
    await eventually(lambda: len(fake.server.responses) >= 4, what="the ephemeral answers")
    await eventually(
        lambda: any(
            c.method == "chat.update" and "resolved" in c.args.get("text", "") for c in slack_calls(fake).calls
        ),
        what="the header updated to resolved",
    )
    assert raw_in(fake) == []
    assert sum(ESCAPED in s for _m, s in sent(fake)) >= 4


async def _thread(server: DecklogServer, scope: str) -> str:
    state = await server.runtime.store.get_state(scope)
    return state.thread.ts if state.thread is not None else ""


async def test_a_hostile_alert_is_escaped_in_its_header(make_server: ServerFactory) -> None:
    server = await make_server(alert_token=TOKEN)
    fake = server.sandbox
    assert fake is not None
    alert = {
        "title": f"payments {HOSTILE}",
        "summary": f"summary {HOSTILE}",
        "fingerprint": "hostile-1",
        "service": "payments",
        "severity": "critical",
        "status": "firing",
        "links": [{"url": "https://grafana.example.com/d/1", "title": f"dash {HOSTILE}"}],
    }
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{server.url}/alerts/generic", data=json.dumps(alert), headers=headers) as resp:
            assert resp.status == 202, await resp.text()
        resolved = {**alert, "status": "resolved"}
        async with http.post(f"{server.url}/alerts/generic", data=json.dumps(resolved), headers=headers) as resp:
            assert resp.status in (200, 202)

    def header() -> Any:
        return next(
            (c for c in slack_calls(fake).calls if c.method == "chat.postMessage" and c.args.get("channel") == ALERTS),
            None,
        )

    posted = await eventually(header, what="the alert's header in the alerts channel")
    assert "payments &lt;!channel&gt; &lt;@U0BOB&gt;" in posted.args["text"], posted.args["text"]
    await eventually(lambda: any(c.method == "chat.update" for c in slack_calls(fake).calls), what="the header updated")
    assert raw_in(fake) == []
