"""End to end the way Slack would: signed requests into the real server, effects asserted on the fake Slack."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.adapters.slack.ids import Action
from decklog.bot.server import DecklogServer
from tests.conftest import ServerFactory, eventually
from tests.fakes.polling import wait_for_call
from tests.fakes.slack_calls import slack_calls

ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"
GENERAL, ALERTS = "C0GENERAL", "C0ALERTS"


def posts(fake: FakeSlack, **match: Any) -> list[Any]:
    return [
        c for c in slack_calls(fake).calls_to("chat.postMessage") if all(c.args.get(k) == v for k, v in match.items())
    ]


async def declare(
    server: DecklogServer, text: str = "declare Payments 5xx elevated sev2", channel: str = GENERAL
) -> Any:
    fake = server.sandbox
    out = await fake.run_command(ALICE, channel, text)
    assert out.status == 200
    scope = await eventually(lambda: _first_scope(server), what="a declared scope")
    state = await eventually(lambda: _thread(server, scope), what="the header's thread")
    return scope, state


async def _first_scope(server: DecklogServer) -> str | None:
    ids = await server.runtime.store.scope_ids()
    return str(ids[0]) if ids else None


async def _thread(server: DecklogServer, scope: str) -> Any:
    from decklog.core.errors import NotFound

    try:
        state = await server.runtime.store.get_state(scope)
    except NotFound:  # the file exists a moment before its first entry commits
        return None
    return state if state.thread else None


async def kinds(server: DecklogServer, scope: str) -> list[str]:
    return [e.kind for e in await server.runtime.store.read(scope)]


def header_updates(fake: FakeSlack, ts: str) -> list[Any]:
    return [c for c in slack_calls(fake).calls_to("chat.update") if c.args.get("ts") == ts]


async def test_declare_posts_a_header_and_routes_its_thread(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, state = await declare(server)
    assert scope == "incident/payments-5xx-elevated"
    header = slack_calls(fake).calls_to("chat.postMessage")[0]
    assert header.args["channel"] == GENERAL
    assert "Payments 5xx elevated" in header.args["text"]
    assert json.loads(json.dumps(header.args["metadata"]))["event_payload"]["scope"] == scope
    assert state.thread.channel == GENERAL and state.thread.ts
    assert await server.runtime.index.route(GENERAL, state.thread.ts) == scope
    # the person who declared is told, ephemerally
    await eventually(lambda: any("Declared" in r.body.get("text", "") for r in fake.server.responses))


async def test_thread_replies_edits_and_deletions_become_entries(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, state = await declare(server)
    reply = await fake.post_message(BOB, GENERAL, "I see 502s from the load balancer", thread_ts=state.thread.ts)
    await eventually(lambda: _has(server, scope, "message"), what="a message entry")
    await fake.edit_message(BOB, GENERAL, reply.ts, "I see 502s and 504s from the load balancer")
    await eventually(lambda: _has(server, scope, "message_edited"), what="an edit entry")
    await fake.delete_message(BOB, GENERAL, reply.ts)
    await eventually(lambda: _has(server, scope, "message_deleted"), what="a deletion entry")
    entries = await server.runtime.store.read(scope, kinds=["message", "message_edited"])
    assert entries[0].actor.id == BOB and entries[0].actor.name == "bob"
    assert entries[1].payload.previous_text == "I see 502s from the load balancer"  # type: ignore[attr-defined]
    # a top-level message in a channel that is not an incident's is not recorded
    await fake.post_message(BOB, ALERTS, "unrelated chatter")
    assert (await kinds(server, scope)).count("message") == 1


async def test_a_reply_before_the_thread_is_indexed_is_routed_by_the_headers_metadata(
    server: DecklogServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender indexes a header's thread after its post returned (on another replica, later still): a reply in
    that window is routed by the metadata of decklog's own header at the thread's root, not dropped."""
    from decklog.core.index.tables import routes

    fake = server.sandbox
    scope, state = await declare(server)
    index = server.runtime.index

    async def not_yet(key: str, scope: str) -> None:
        """The window, held open: a redelivery of the declaration (a retried chunk) would index the thread again."""

    monkeypatch.setattr(index, "add_route", not_yet)
    await index.file.write(lambda conn, _: conn.execute(routes.delete()))
    assert await server.runtime.index.route(GENERAL, state.thread.ts) is None
    await fake.post_message(BOB, GENERAL, "typed the moment the header appeared", thread_ts=state.thread.ts)
    await eventually(lambda: _has(server, scope, "message"), what="the early reply recorded")
    # a reply under a person's message (no decklog header at the root) is still not recorded
    other = await fake.post_message(CAROL, GENERAL, "lunch?")
    await fake.post_message(BOB, GENERAL, "sure", thread_ts=other.ts)
    await fake.post_message(BOB, GENERAL, "one more for the incident", thread_ts=state.thread.ts)
    await eventually(lambda: _count(server, scope, "message", 2), what="the second early reply recorded")
    texts = [e.payload.text for e in await server.runtime.store.read(scope, kinds=["message"])]  # type: ignore[attr-defined]
    assert texts == ["typed the moment the header appeared", "one more for the incident"]
    # and an @mention in that window acts on the incident instead of asking "Which incident?"
    await fake.post_message(BOB, GENERAL, "@decklog sev 1", thread_ts=state.thread.ts)
    await eventually(lambda: _severity(server, scope, 1), what="SEV1 from a mention in the unindexed thread")


async def _count(server: DecklogServer, scope: str, kind: str, n: int) -> bool:
    return (await kinds(server, scope)).count(kind) >= n


async def _has(server: DecklogServer, scope: str, kind: str) -> bool:
    return kind in await kinds(server, scope)


async def test_pushpin_adds_the_message_to_the_timeline_as_evidence(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, state = await declare(server)
    reply = await fake.post_message(BOB, GENERAL, "error rate 12% since 03:10", thread_ts=state.thread.ts)
    await eventually(lambda: _has(server, scope, "message"))
    await fake.add_reaction(CAROL, GENERAL, reply.ts, "pushpin")
    evidence = await eventually(lambda: server.runtime.store.read(scope, kinds=["evidence"]), what="evidence")
    assert evidence[0].payload.text == "error rate 12% since 03:10"  # type: ignore[attr-defined]
    assert evidence[0].actor.id == CAROL
    await fake.add_reaction(ALICE, GENERAL, reply.ts, "pushpin")  # pinning twice adds it once
    await fake.add_reaction(ALICE, GENERAL, reply.ts, "eyes")  # other reactions mean nothing
    await eventually(lambda: slack_calls(fake).calls_to("chat.postMessage"))
    assert len(await server.runtime.store.read(scope, kinds=["evidence"])) == 1


async def test_mention_in_the_thread_sets_severity_and_updates_the_header(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, state = await declare(server)
    await fake.post_message(BOB, GENERAL, "@decklog sev 1", thread_ts=state.thread.ts)
    await eventually(lambda: _severity(server, scope, 1), what="SEV1")
    update = await eventually(
        lambda: [c for c in header_updates(fake, state.thread.ts) if "SEV1" in c.args.get("text", "")],
        what="the header updated in place to SEV1",
    )
    assert update[-1].args["channel"] == GENERAL


async def _severity(server: DecklogServer, scope: str, sev: int) -> bool:
    return (await server.runtime.store.get_state(scope)).severity == sev


async def test_channel_command_with_a_scope_id_updates_the_header(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, state = await declare(server)
    out = await fake.run_command(CAROL, ALERTS, f"sev 1 {scope}")
    assert out.status == 200
    await eventually(lambda: _severity(server, scope, 1))
    await eventually(lambda: [c for c in header_updates(fake, state.thread.ts) if "SEV1" in c.args.get("text", "")])


async def test_command_without_a_scope_outside_an_incident_offers_a_picker(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, _state = await declare(server)
    await fake.run_command(CAROL, ALERTS, "sev 3")
    picker = await eventually(
        lambda: [r for r in fake.server.responses if "Which incident" in json.dumps(r.body)], what="a picker"
    )
    options = picker[0].body["blocks"][0]["accessory"]["options"]
    assert options[0]["value"] == f"{scope} sev 3"


async def test_resolve_from_the_header_button_and_the_thread(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, state = await declare(server)
    await fake.click_button(ALICE, GENERAL, state.thread.ts, Action.RESOLVE)
    await eventually(lambda: _status(server, scope, "resolved"))
    await eventually(lambda: [c for c in header_updates(fake, state.thread.ts) if "resolved" in c.args.get("text", "")])
    # resolving twice is refused, politely and ephemerally
    await fake.post_message(BOB, GENERAL, "@decklog resolve fixed by rollback", thread_ts=state.thread.ts)
    await eventually(
        lambda: [
            c for c in slack_calls(fake).calls_to("chat.postEphemeral") if "already resolved" in c.args.get("text", "")
        ]
    )


async def _status(server: DecklogServer, scope: str, status: str) -> bool:
    return (await server.runtime.store.get_state(scope)).status == status


async def test_header_severity_select_and_roles(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, state = await declare(server)
    await fake.select_option(ALICE, GENERAL, state.thread.ts, Action.SEVERITY, "1")
    await eventually(lambda: _severity(server, scope, 1))
    await fake.post_message(ALICE, GENERAL, "@decklog role commander @carol", thread_ts=state.thread.ts)
    await eventually(lambda: _role(server, scope, "commander", CAROL))


async def _role(server: DecklogServer, scope: str, role: str, user: str) -> bool:
    state = await server.runtime.store.get_state(scope)
    return role in state.roles and state.roles[role].user_id == user


async def test_unknown_subcommand_and_bad_arguments_get_usage(server: DecklogServer) -> None:
    fake = server.sandbox
    await fake.run_command(ALICE, GENERAL, "frobnicate now")
    await fake.run_command(ALICE, GENERAL, "sev 9 incident/nope")
    texts = await eventually(lambda: [json.dumps(r.body) for r in fake.server.responses if r.body] or None)
    await eventually(lambda: len([r for r in fake.server.responses if "Usage" in json.dumps(r.body)]) >= 2)
    assert any("unknown subcommand" in t for t in texts)


async def test_declare_without_a_title_opens_the_modal(server: DecklogServer) -> None:
    fake = server.sandbox
    await fake.run_command(ALICE, GENERAL, "declare")
    opened = await wait_for_call(fake.server, "views.open")
    view_id = None

    def modal() -> Any:
        nonlocal view_id
        modals = fake.workspace.modals(ALICE)
        return modals[-1] if modals else None

    view = await eventually(modal)
    view_id = view.id
    assert opened.args["view"]["callback_id"] == "incident_declare"
    await fake.submit_view(
        ALICE,
        view_id,
        {
            "title": {"title_input": {"type": "plain_text_input", "value": "Checkout latency"}},
            "severity": {"severity_input": {"type": "static_select", "selected_option": {"value": "2"}}},
        },
    )
    scope = await eventually(lambda: _first_scope(server))
    assert scope == "incident/checkout-latency"
    state = await eventually(lambda: _thread(server, scope))
    assert state.severity == 2 and state.thread.channel == GENERAL


async def test_dedicated_channel_is_created_and_the_declarer_invited(server: DecklogServer) -> None:
    fake = server.sandbox
    await fake.run_command(ALICE, GENERAL, "declare Search is down sev1 --channel")
    scope = await eventually(lambda: _first_scope(server))
    state = await eventually(lambda: _thread(server, scope))
    created = slack_calls(fake).calls_to("conversations.create")
    assert created and created[0].args["name"] == "inc-search-is-down"
    assert slack_calls(fake).calls_to("conversations.invite")[0].args["users"] == ALICE
    assert state.thread.dedicated_channel and state.thread.channel != GENERAL
    # a top-level message in the dedicated channel is part of the incident
    await fake.post_message(ALICE, state.thread.channel, "rolling back search-api")
    await eventually(lambda: _has(server, scope, "message"))
    # and the origin channel gets a pointer
    await eventually(lambda: posts(fake, channel=GENERAL))


async def test_slack_retry_with_the_same_event_id_appends_once(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, state = await declare(server)
    event = {
        "type": "message",
        "channel": GENERAL,
        "user": BOB,
        "text": "is it the deploy?",
        "ts": "1799999999.000100",
        "thread_ts": state.thread.ts,
        "channel_type": "channel",
        "event_ts": "1799999999.000100",
    }
    driver = fake.driver
    # the original and a retry that arrives while the first is still being processed, then a late retry
    first, second = await asyncio.gather(
        driver.event(event, event_id="Ev0RETRY"),
        driver.event(event, event_id="Ev0RETRY", retry_num=1, retry_reason="http_timeout"),
    )
    assert first.status == 200 and second.status == 200
    await eventually(lambda: _has(server, scope, "message"))
    third = await driver.event(event, event_id="Ev0RETRY", retry_num=2, retry_reason="http_timeout")
    assert third.status == 200
    # both retries were refused by the inbox (same key): acked, never processed a second time
    await eventually(lambda: server.parts.slack.inbox.stats.duplicates >= 2, what="both retries handled")
    assert server.parts.slack.counters.get("duplicate_requests", 0) >= 2
    assert (await kinds(server, scope)).count("message") == 1


async def test_bad_or_stale_signatures_are_refused_with_401(server: DecklogServer) -> None:
    fake = server.sandbox
    driver = fake.driver
    bad = await driver.signed_with(signature="v0=deadbeef").slash_command("list", ALICE, GENERAL)
    stale = await driver.stale(seconds=600).slash_command("list", ALICE, GENERAL)
    assert bad.status == 401 and stale.status == 401
    assert await server.runtime.store.scope_ids() == []


async def test_app_home_lists_open_incidents(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, _state = await declare(server)
    await eventually(lambda: server.runtime.index.list_scopes(open_only=True))
    await fake.open_home(BOB)
    published = await wait_for_call(fake.server, "views.publish")
    text = json.dumps(published.args["view"])
    assert scope in text and "Payments 5xx elevated" in text and "Pending approvals" in text


async def test_every_entry_reply_carries_the_entry_id_in_metadata(make_server: ServerFactory) -> None:
    server = await make_server()
    fake = server.sandbox
    scope, state = await declare(server)
    await server.runtime.service.record(scope, "hypothesis", {"text": "the 03:05 deploy broke payments"}, _agent())
    call = await wait_for_call(
        fake.server, "chat.postMessage", lambda args: "Hypothesis" in args.get("text", ""), timeout=5
    )
    entry = (await server.runtime.store.read(scope, kinds=["hypothesis"]))[0]
    assert call.args["thread_ts"] == state.thread.ts
    assert call.args["metadata"]["event_payload"]["entry_id"] == entry.id


def _agent() -> Any:
    from decklog.core.entries import Actor

    return Actor.agent("rules", "rule-based reasoner")
