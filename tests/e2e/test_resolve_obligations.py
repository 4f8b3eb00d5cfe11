"""Resolving with obligations still open says so in the thread (a post the Slack sender makes
through the outbox) and lets people close each one (Done) or keep it as a follow-up (Follow-up): buttons on that
message, and ``@decklog done|follow-up <obligation>`` / ``obligations``. No obligation stays open with nobody told.

The case from the field: resolving right after an approved rollback left its "Verification needed" open for ever
(still open 25 minutes later, and in the report)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.local.services import FakeDeployService
from decklog.adapters.slack.ids import Action
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.core.entries import Actor, FollowUp
from decklog.core.reports import build_report
from decklog.core.reports.export import read_logs
from tests.conftest import eventually, test_config

ALICE, BOB = "U0ALICE", "U0BOB"
ALERTS = "C0ALERTS"


@pytest.fixture
async def deploy() -> AsyncIterator[FakeDeployService]:
    async with FakeDeployService() as fake:
        fake.record_deploy("payments", "r40")
        fake.record_deploy("payments", "r41")
        yield fake


@pytest.fixture
async def server(tmp_path: Path, deploy: FakeDeployService) -> AsyncIterator[DecklogServer]:
    settings = Settings(
        data_dir=tmp_path / "data", host="127.0.0.1", port=0, deploy_api_url=deploy.base_url, approvers=ALICE
    )
    srv = DecklogServer(settings, config=test_config(), parts={"actions"})
    await srv.start()
    yield srv
    await srv.stop()


async def _thread(server: DecklogServer, scope: str) -> Any:
    state = await server.runtime.store.get_state(scope)
    return state.thread if state.thread else None


def _buttons(message: Any) -> list[tuple[str, str]]:
    return [
        (el.get("action_id"), el.get("value"))
        for block in message.blocks or []
        if block.get("type") == "actions"
        for el in block.get("elements", [])
    ]


def _notices(server: DecklogServer, ts: str) -> list[Any]:
    assert server.sandbox is not None
    return [m for m in server.sandbox.workspace.thread(ALERTS, ts) if "still open" in json.dumps(m.blocks or [])]


async def _incident(server: DecklogServer, title: str) -> tuple[str, str]:
    rt = server.runtime
    declared = await rt.service.declare(
        title=title, severity=2, services=["payments"], channel=ALERTS, actor=Actor.human(ALICE, "alice")
    )
    scope = declared.state.scope
    thread = await eventually(lambda: _thread(server, scope), what="the incident's thread")
    return scope, thread.ts


async def test_resolving_right_after_an_approved_rollback_offers_to_close_its_verification(
    server: DecklogServer, deploy: FakeDeployService
) -> None:
    rt, fake = server.runtime, server.sandbox
    assert fake is not None
    scope, ts = await _incident(server, "Payments 5xx elevated")
    alert = {
        "text": "payments 5xx above 5%",
        "source": "alertmanager",
        "service": "payments",
        "fingerprint": "am-payments-5xx",
        "alert_status": "firing",
    }
    await rt.service.record(scope, "observation", alert, Actor.system("alertmanager"))
    change = await rt.service.declare(
        title="deploy r41 of payments", kind="change", scope="change/r41", services=["payments"], actor=Actor.system()
    )
    await rt.service.link(scope, change.state.scope, Actor.system("linker"), relation="suspected_cause")
    await rt.dispatcher.idle()  # the index knows the change scope (the safety conditions read it)
    line = await server.parts.actions.desk.propose(
        scope,
        action="rollback_deploy",
        params={"service": "payments", "change": "change/r41"},
        rationale="r41 went out before the 5xx",
        obligation_id=None,
        actor=Actor.human(BOB, "bob"),
    )
    pid = line.split()[1]
    await fake.post_message("alice", ALERTS, f"@decklog approve {pid}", thread_ts=ts)
    await eventually(lambda: deploy.effects, what="the rollback at the target")

    async def verification() -> list[Any]:
        return [o for o in (await rt.store.get_state(scope)).obligations.values() if o.purpose == "verification"]

    (ob,) = await eventually(verification, what="Verification needed")
    header = fake.workspace.message(ALERTS, ts)
    await fake.click_button("alice", ALERTS, header.ts, Action.RESOLVE)

    (notice,) = await eventually(lambda: _notices(server, ts), what="the resolve's notice in the thread")
    text = json.dumps(notice.blocks)
    assert ob.id in text and "Verification" in text
    assert (Action.OBLIGATION_DONE, f"{scope}|{ob.opened_seq}") in _buttons(notice)
    assert (Action.OBLIGATION_FOLLOW_UP, f"{scope}|{ob.id}") in _buttons(notice)

    await fake.click_button("alice", ALERTS, notice.ts, Action.OBLIGATION_DONE, f"{scope}|{ob.opened_seq}")

    async def closed() -> bool:
        return not (await rt.store.get_state(scope)).obligations

    await eventually(closed, what="the verification closed")
    report = build_report(*await read_logs(rt.store, scope))
    assert report.obligations == ()
    assert (await rt.store.verify(scope)).ok


async def test_each_open_obligation_is_closed_or_kept_as_a_follow_up_by_button_or_command(
    server: DecklogServer,
) -> None:
    rt, fake = server.runtime, server.sandbox
    assert fake is not None
    scope, ts = await _incident(server, "Ledger drift")
    bob = Actor.human(BOB, "bob")
    texts = {"ob-canary": "Add a canary for ledger", "ob-dash": "Fix the ledger dashboard", "ob-audit": "Audit"}
    for oid, text in texts.items():
        await rt.service.record(scope, "obligation_opened", {"obligation_id": oid, "text": text}, bob)
    await fake.post_message("bob", ALERTS, "@decklog resolve drift fixed", thread_ts=ts)
    (notice,) = await eventually(lambda: _notices(server, ts), what="the resolve's notice")
    assert all(oid in json.dumps(notice.blocks) for oid in texts)
    reminders = await rt.store.read(scope, kinds=["reminder"])
    assert [r.payload.obligations for r in reminders] == [tuple(texts)]  # type: ignore[attr-defined]

    await fake.click_button("bob", ALERTS, notice.ts, Action.OBLIGATION_FOLLOW_UP, f"{scope}|ob-canary")
    await fake.post_message("bob", ALERTS, "@decklog follow-up ob-dash", thread_ts=ts)
    await fake.post_message("bob", ALERTS, "@decklog done ob-audit", thread_ts=ts)

    async def still_open() -> list[str]:
        return list((await rt.store.get_state(scope)).obligations)

    await eventually(lambda: _none(still_open), what="every obligation closed")
    follow_ups = [e.payload for e in await rt.store.read(scope, kinds=["follow_up"])]
    assert sorted((f.obligation_id, f.text) for f in follow_ups if isinstance(f, FollowUp)) == [
        ("ob-canary", texts["ob-canary"]),
        ("ob-dash", texts["ob-dash"]),
    ]
    await fake.post_message("bob", ALERTS, "@decklog obligations", thread_ts=ts)
    await eventually(
        lambda: any("No open obligations" in e.text for e in fake.workspace.ephemerals(user=BOB)),
        what="`obligations` says none is open",
    )
    report = build_report(*await read_logs(rt.store, scope))
    assert report.obligations == () and {f.obligation_id for f in report.tracker_follow_ups} == {"ob-canary", "ob-dash"}


async def test_a_resolve_with_nothing_open_posts_no_notice(server: DecklogServer) -> None:
    rt, fake = server.runtime, server.sandbox
    assert fake is not None
    scope, ts = await _incident(server, "Quiet one")
    await fake.post_message("bob", ALERTS, "@decklog resolve", thread_ts=ts)

    async def resolved() -> bool:
        return (await rt.store.get_state(scope)).status == "resolved"

    await eventually(resolved, what="resolved")
    await rt.dispatcher.idle()
    assert _notices(server, ts) == [] and await rt.store.read(scope, kinds=["reminder"]) == []


async def _none(check: Any) -> bool:
    return not await check()
