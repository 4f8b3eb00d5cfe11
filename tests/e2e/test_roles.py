"""Roles: a person declaring in Slack becomes the commander (unless configured otherwise);
``@decklog handover <role> @user`` moves a role and shows the new holder the catch-up; the header shows who holds
what."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.slack import grammar, subcommands
from decklog.adapters.slack.render.header import header
from decklog.bot.server import DecklogServer
from decklog.core.entries import Actor
from decklog.core.service import ScopeService
from decklog.core.store.memory.log_store import MemoryLogStore
from decklog.core.store.sqlite.index import SqliteIndex
from tests.conftest import ServerFactory, eventually
from tests.e2e.test_slack_e2e import ALICE, BOB, CAROL, GENERAL, declare
from tests.fakes.slack_calls import slack_calls

ALICE_ACTOR = Actor.human(ALICE, "alice")


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[tuple[ScopeService, ScopeService]]:
    executor = ThreadPoolExecutor(2)
    index = SqliteIndex(tmp_path / "index.db", executor)
    await index.open()
    store = MemoryLogStore()
    yield ScopeService(store, index), ScopeService(store, index, declarer_role="")
    await index.close()
    executor.shutdown()


async def test_the_slack_declarer_is_commander_unless_configured_otherwise(
    services: tuple[ScopeService, ScopeService],
) -> None:
    default, none = services
    first = await default.declare(title="Payments down", actor=ALICE_ACTOR, via="slack")
    assert [e.kind for e in first.entries] == ["declared", "role_assigned"]
    assert first.state.roles["commander"].user_id == ALICE
    off = await none.declare(title="Search down", actor=ALICE_ACTOR, via="slack")
    assert off.state.roles == {}
    by_alert = await default.declare(title="DB down", actor=Actor.system("alertmanager"), via="alert")
    assert by_alert.state.roles == {}  # nobody declared it: no commander to name
    by_cli = await default.declare(title="Cache down", actor=ALICE_ACTOR, via="cli")
    assert by_cli.state.roles == {}  # only Slack declarations name their declarer


def test_handover_grammar() -> None:
    cmd = subcommands.parse("handover commander <@U0BOB|bob>")
    assert cmd.name == "handover" and cmd.args == {"role": "commander", "user_id": "U0BOB", "user_name": "bob"}
    for bad in ("handover", "handover commander", "handover commander bob", "handover a b c"):
        with pytest.raises(grammar.UsageError):
            subcommands.parse(bad)


async def test_header_shows_who_holds_what(services: tuple[ScopeService, ScopeService]) -> None:
    default, _ = services
    r = await default.declare(title="Payments down", actor=ALICE_ACTOR, via="slack")
    r = await default.assign_role(r.state.scope, "comms", "U0BOB", ALICE_ACTOR, user_name="bob")
    text = str(header(r.state).blocks)
    assert "commander: <@U0ALICE>" in text and "comms: <@U0BOB>" in text


@pytest.fixture
async def server(make_server: ServerFactory) -> DecklogServer:
    return await make_server()


def ephemerals_to(server: DecklogServer, user: str) -> list[Any]:
    return [c for c in slack_calls(server.sandbox).calls_to("chat.postEphemeral") if c.args.get("user") == user]


async def test_handover_moves_the_role_and_catches_the_new_holder_up(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, state = await declare(server)
    assert state.roles["commander"].user_id == ALICE  # the declarer
    ts = state.thread.ts
    await fake.post_message(ALICE, GENERAL, "the LB is shedding 5xx on payments", thread_ts=ts)
    await fake.post_message(ALICE, GENERAL, "@decklog handover commander @carol", thread_ts=ts)

    async def moved() -> bool:
        held = (await server.runtime.store.get_state(scope)).roles.get("commander")
        return held is not None and held.user_id == CAROL

    await eventually(moved, what="the commander role to move to carol")
    note = await eventually(lambda: ephemerals_to(server, CAROL), what="carol's catch-up")
    assert "You are now commander" in note[0].args["text"] and scope in note[0].args["text"]
    assert note[0].args.get("thread_ts") == ts
    told = await eventually(lambda: ephemerals_to(server, ALICE), what="alice's answer")
    assert any("is now commander" in c.args["text"] for c in told)

    await eventually(
        lambda: any(
            "commander: <@U0CAROL>" in str(c.args.get("blocks")) for c in slack_calls(fake).calls_to("chat.update")
        ),
        what="the header to show the new commander",
    )
    entries = await server.runtime.store.read(scope)
    assert [e.payload.user_id for e in entries if e.kind == "role_assigned"] == [ALICE, CAROL]

    before = len(ephemerals_to(server, BOB))
    await fake.post_message(ALICE, GENERAL, "@decklog handover commander @carol", thread_ts=ts)
    await eventually(
        lambda: any("already holds" in c.args["text"] for c in ephemerals_to(server, ALICE)), what="already"
    )
    assert len(ephemerals_to(server, BOB)) == before
