"""The "Follow-up" button on each open obligation of the incident's header, end to end through the fake
Slack: a click appends one ``follow_up`` (its ``obligation_id``), the ``trackers`` outbox topic files it in the
loopback GitHub, a second click records nothing, and the report lists it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.listeners.actions import on_follow_up
from decklog.adapters.slack.request import ACTOR, KEY, Req
from decklog.bot.server import DecklogServer
from decklog.core.entries import Actor, FollowUp
from decklog.core.errors import NotFound
from decklog.core.reports import build_report
from decklog.core.reports.export import read_logs
from tests.conftest import ServerFactory, eventually, test_config
from tests.e2e.test_loop_e2e import ALICE, BOB, GENERAL, ephemerals
from tests.fakes.trackers import FakeGitHub

REPO = "acme/shop"


@pytest.fixture
async def github() -> AsyncIterator[FakeGitHub]:
    async with FakeGitHub(repos=(REPO,)) as gh:
        yield gh


async def declared(server: DecklogServer) -> tuple[str, str]:
    """``/incident declare`` in #general → (scope, the header's ts). (test_loop_e2e's helper reads the state as
    soon as the scope's file exists, which can be before its first entry is committed: NotFound.)"""
    assert (await fake(server).run_command(ALICE, GENERAL, "declare Checkout errors sev2")).status == 200
    scope = "incident/checkout-errors"

    async def thread() -> str | None:
        try:
            state = await server.runtime.store.get_state(scope)
        except NotFound:
            return None
        return state.thread.ts if state.thread else None

    ts: str = await eventually(thread, timeout=20, what="the header's thread")
    return scope, ts


def fake(server: DecklogServer) -> FakeSlack:
    assert server.sandbox is not None
    return server.sandbox


def follow_up_buttons(server: DecklogServer, channel: str, ts: str) -> list[dict[str, Any]]:
    header = fake(server).workspace.messages.get(channel, ts)
    accessories = [b.get("accessory") or {} for b in header.blocks or [] if b.get("type") == "section"]
    return [a for a in accessories if a.get("action_id") == Action.OBLIGATION_FOLLOW_UP]


async def test_the_follow_up_button_files_an_open_obligation_once(
    make_server: ServerFactory, github: FakeGitHub
) -> None:
    server = await make_server(github_token="ghp_test", github_repo=REPO, github_api_url=github.base_url)
    scope, ts = await declared(server)
    opened = {"obligation_id": "ob-1", "text": "Add a canary check for checkout config changes"}
    await server.runtime.service.record(scope, "obligation_opened", opened, Actor.human(BOB, "bob"))
    [button] = await eventually(
        lambda: follow_up_buttons(server, GENERAL, ts), timeout=20, what="the header's Follow-up button"
    )
    assert button["value"] == f"{scope}|ob-1" and button["text"]["text"] == "Follow-up"

    await fake(server).click_button(ALICE, GENERAL, ts, Action.OBLIGATION_FOLLOW_UP, button["value"])
    [made] = await eventually(
        lambda: server.runtime.store.read(scope, kinds=("follow_up",)), timeout=20, what="the follow_up entry"
    )
    assert isinstance(made.payload, FollowUp) and made.actor.id == ALICE
    assert (made.payload.text, made.payload.obligation_id) == (opened["text"], "ob-1")
    await eventually(lambda: len(github.issues[REPO]) == 1, timeout=20, what="the issue filed in GitHub")
    assert github.issues[REPO][0]["title"] == opened["text"]
    assert f"{server.url}/api/scopes/{scope}/report.html" in github.issues[REPO][0]["body"]  # the bound port
    await eventually(
        lambda: any("Follow-up #" in t for t in ephemerals(server, ALICE)), timeout=20, what="the confirmation"
    )

    # kept as a follow-up, the obligation is closed: the header drops its button; a client still
    # showing it may click again (called as Bolt would, after the middleware): the same follow-up, nothing new
    assert "ob-1" not in (await server.runtime.store.get_state(scope)).obligations
    await eventually(lambda: not follow_up_buttons(server, GENERAL, ts), timeout=20, what="the button gone")
    told: list[str] = []

    async def respond(**kwargs: Any) -> None:
        told.append(str(kwargs.get("text", "")))

    action = {"action_id": Action.OBLIGATION_FOLLOW_UP.value, "value": button["value"]}
    context = {ACTOR: Actor.human(ALICE, "alice"), KEY: "slack:action:again"}
    req = Req(body={"actions": [action]}, respond=respond, client=None, context=context)  # type: ignore[arg-type]
    await on_follow_up(server.parts.slack.deps, req)
    assert len(told) == 1 and "already has a follow-up" in told[0], told
    assert len(await server.runtime.store.read(scope, kinds=("follow_up",))) == 1

    await eventually(
        lambda: server.runtime.store.read(scope, kinds=("follow_up_synced",)), timeout=20, what="the sync entry"
    )
    report = build_report(*await read_logs(server.runtime.store, scope))
    [line] = report.tracker_follow_ups
    assert (line.state, line.obligation_id, line.url) == ("synced", "ob-1", github.issues[REPO][0]["html_url"])
    assert len(github.issues[REPO]) == 1


async def test_a_stale_click_on_a_closed_obligation_is_refused_with_a_reason(make_server: ServerFactory) -> None:
    """The header drops the button once the obligation closes; a client still showing it may click it: the handler
    (called as Bolt would, after the middleware) answers why and records nothing."""
    server = await make_server()
    scope, _ = await declared(server)
    bob = Actor.human(BOB, "bob")
    await server.runtime.service.record(scope, "obligation_opened", {"obligation_id": "ob-2", "text": "check"}, bob)
    await server.runtime.service.record(scope, "obligation_cancelled", {"obligation_id": "ob-2"}, bob)
    told: list[str] = []

    async def respond(**kwargs: Any) -> None:
        told.append(str(kwargs.get("text", "")))

    action = {"action_id": Action.OBLIGATION_FOLLOW_UP.value, "value": f"{scope}|ob-2"}
    context = {ACTOR: Actor.human(ALICE, "alice"), KEY: "slack:action:test"}
    req = Req(body={"actions": [action]}, respond=respond, client=None, context=context)  # type: ignore[arg-type]
    await on_follow_up(server.parts.slack.deps, req)
    assert told == [f"Obligation `ob-2` is no longer open in `{scope}`."]
    assert await server.runtime.store.read(scope, kinds=("follow_up",)) == []


async def test_behind_a_proxy_the_filed_issue_links_the_report_under_the_public_url(
    make_server: ServerFactory, github: FakeGitHub
) -> None:
    """``[reports] public_url``: the issue links where people reach decklog, not the address it listens on."""
    config = test_config(reports={"public_url": "https://decklog.example.com/"})
    server = await make_server(config=config, github_token="ghp_test", github_repo=REPO, github_api_url=github.base_url)
    scope, _ = await declared(server)
    await server.runtime.service.record(scope, "follow_up", {"text": "Alert on checkout 5xx"}, Actor.human(BOB, "bob"))
    await eventually(lambda: len(github.issues[REPO]) == 1, timeout=20, what="the issue filed in GitHub")
    body = github.issues[REPO][0]["body"]
    assert f"https://decklog.example.com/api/scopes/{scope}/report.html" in body and server.url not in body
