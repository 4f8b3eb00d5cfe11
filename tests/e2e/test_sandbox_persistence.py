"""The sandbox outlives a restart: its fake workspace and fake deploy service are kept under DATA_DIR/sandbox/, so
old incidents' threads are still there (and still work) when `make run` is started again on the same data."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.adapters.local.sandbox import SandboxPersistence
from decklog.adapters.local.sandbox.persistence import DEPLOYS_FILE, WORKSPACE_FILE, sandbox_dir
from decklog.adapters.local.services import FakeDeployService, FakeStatuspage
from decklog.adapters.local.slack import FakeSlack, FakeSlackWorkspace, Identity, Message, workspace_snapshot
from decklog.adapters.local.slack.ids import parse_ts
from decklog.bot.server import DecklogServer
from decklog.core.actions.executor import ExecutionRequest
from decklog.core.entries import Actor
from tests.conftest import ServerFactory, eventually
from tests.e2e.test_sandbox import as_the_page
from tests.fakes.slack_calls import slack_calls

ALERTS = "C0ALERTS"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        yield session


async def say(http: aiohttp.ClientSession, server: DecklogServer, path: str, body: Any) -> Any:
    async with http.post(server.url + path, json=body, headers=as_the_page(server)) as response:
        answer = await response.json()
        assert response.status == 200, answer
        return answer


def fake(server: DecklogServer) -> FakeSlack:
    assert isinstance(server.sandbox, FakeSlack)
    return server.sandbox


async def stop(server: DecklogServer) -> None:
    """Stop a server mid-test, as Ctrl-C stops `make run` (the make_server fixture then leaves it alone:
    DecklogServer.stop is not idempotent)."""
    await server.stop()

    async def already_stopped() -> None:
        return None

    setattr(server, "stop", already_stopped)  # noqa: B010


def keeper(server: DecklogServer) -> SandboxPersistence:
    world = server.parts.world
    assert world is not None and isinstance(world.keeper, SandboxPersistence)
    return world.keeper


def all_ts(ws: FakeSlackWorkspace) -> set[str]:
    """Every ts the workspace ever handed out that it still shows: messages, edits, ephemerals."""
    stamps = {m.ts for m in ws.messages.all()} | {e.ts for e in ws.messages.ephemerals()}
    return stamps | {str(m.edited["ts"]) for m in ws.messages.all() if m.edited}


async def declare(http: aiohttp.ClientSession, server: DecklogServer, title: str) -> tuple[Message, str]:
    """Declare through the page's composer; the header and the scope it routes to."""
    await say(
        http, server, "/sandbox/message", {"user": "alice", "channel": ALERTS, "text": f"/incident declare {title}"}
    )
    ws = fake(server).workspace
    header: Message = await eventually(
        lambda: next((m for m in ws.bot_messages(ALERTS) if title in m.text and not m.is_reply), None),
        timeout=8,
        what=f"the header of {title!r}",
    )
    scope = await eventually(lambda: server.runtime.index.route(header.channel, header.ts), what="the thread's route")
    return header, str(scope)


async def test_old_threads_still_work_after_a_restart(make_server: ServerFactory, tmp_path: Path, http: Any) -> None:
    data_dir = tmp_path / "data"
    first = await make_server(data_dir=data_dir)
    header, scope = await declare(http, first, "Payments 5xx")
    ws1 = fake(first).workspace
    reply = await say(
        http,
        first,
        "/sandbox/message",
        {"user": "bob", "channel": ALERTS, "thread_ts": header.ts, "text": "@decklog sev 2"},
    )
    await eventually(lambda: "SEV2" in ws1.message(ALERTS, header.ts).text, what="the header at SEV2")
    await say(http, first, "/sandbox/reaction", {"user": "carol", "channel": ALERTS, "ts": reply["ts"], "name": "eyes"})
    war_room = await say(http, first, "/sandbox/channel", {"user": "bob", "name": "war-room"})
    await say(http, first, "/sandbox/home", {"user": "alice"})
    await eventually(lambda: ws1.home("alice"), what="alice's App Home")
    await stop(first)

    # what was saved on stop is exactly the workspace the first server ended with
    saved = json.loads((sandbox_dir(data_dir) / WORKSPACE_FILE).read_text(encoding="utf-8"))
    assert workspace_snapshot(FakeSlackWorkspace.from_dict(saved)) == workspace_snapshot(ws1)
    old_thread = [(m.ts, m.text, m.user) for m in ws1.thread(ALERTS, header.ts)]
    old_stamps = all_ts(ws1)
    assert len(old_thread) >= 2

    second = await make_server(data_dir=data_dir)
    slack = fake(second)
    ws2 = slack.workspace
    assert [(m.ts, m.user) for m in ws2.thread(ALERTS, header.ts)][: len(old_thread)] == [
        (ts, user) for ts, _, user in old_thread
    ]
    assert ws2.message(ALERTS, reply["ts"]).text == "<@U0BOT> sev 2"
    assert ws2.message(ALERTS, reply["ts"]).reactions == {"eyes": ["U0CAROL"]}
    assert ws2.channel(war_room["channel"]).name == "war-room"
    assert ws2.home("alice") is not None and ws2.home("alice") == ws1.home("alice")
    scopes_before = {r.id for r in await second.runtime.index.list_scopes(open_only=False, limit=100)}

    # a new command in the OLD thread lands in the OLD scope, and the OLD header is updated in place
    mention = await say(
        http,
        second,
        "/sandbox/message",
        {"user": "bob", "channel": ALERTS, "thread_ts": header.ts, "text": "@decklog sev 1"},
    )
    assert mention["bot_status"] == 200

    async def at_sev1() -> bool:
        return (await second.runtime.service.state(scope)).severity == 1

    await eventually(at_sev1, what="the old scope at SEV1")
    await eventually(lambda: "SEV1" in ws2.message(ALERTS, header.ts).text, what="the old header at SEV1")
    assert any(c.args.get("ts") == header.ts for c in slack_calls(slack).calls_to("chat.update", ok=True))

    # something appended to the old scope is posted into the old thread
    agent = Actor.agent("rules", "rule-based reasoner")
    await second.runtime.service.record(scope, "hypothesis", {"text": "the 03:05 deploy broke payments"}, agent)
    posted = await eventually(
        lambda: next((m for m in ws2.thread(ALERTS, header.ts) if "03:05 deploy" in m.text), None),
        what="the hypothesis in the old thread",
    )
    assert posted.thread_ts == header.ts

    # no new scope, nothing failed, nothing parked
    assert {r.id for r in await second.runtime.index.list_scopes(open_only=False, limit=100)} == scopes_before
    assert slack_calls(slack).calls_to("chat.postMessage", ok=False) == []
    assert slack_calls(slack).calls_to("chat.update", ok=False) == []
    assert [e for e in await second.runtime.store.read(scope) if e.kind == "delivery_failed"] == []
    assert not (await second.runtime.store.outbox_summary(scope)).parked

    # new ts values come after every old one (and new ids are new)
    new_stamps = all_ts(ws2) - old_stamps
    assert {mention["ts"], posted.ts} <= new_stamps
    assert min(parse_ts(ts) for ts in new_stamps) > max(parse_ts(ts) for ts in old_stamps)
    another = await say(http, second, "/sandbox/channel", {"user": "bob", "name": "war-room-2"})
    assert another["channel"] != war_room["channel"]


async def test_the_deploy_service_keeps_its_history_and_effects(
    make_server: ServerFactory, tmp_path: Path, http: Any
) -> None:
    data_dir = tmp_path / "data"
    first = await make_server(data_dir=data_dir)
    deploy = first.parts.page.page.env.deploy
    sample = await say(http, first, "/sandbox/sample/deploy", {"user": "alice"})
    body = {
        "action": "rollback_deploy",
        "params": {"service": "payments"},
        "scope": "incident/payments-5xx",
        "run_id": "run-1",
        "fence": 1,
        "idempotency_key": "key-1",
    }
    async with http.post(deploy.base_url + "/rollback", json=body, headers={"Idempotency-Key": "key-1"}) as r:
        assert r.status == 200
        applied = await r.read()
    history = deploy.deploys()
    assert len(history) == 3  # baseline, the sample deploy, the rollback
    await stop(first)
    assert json.loads((sandbox_dir(data_dir) / DEPLOYS_FILE).read_text(encoding="utf-8"))["deploys"]

    second = await make_server(data_dir=data_dir)
    restored = second.parts.page.page.env.deploy
    assert restored.deploys() == history  # no second baseline
    assert [e.idempotency_key for e in restored.effects] == ["key-1"]
    async with http.get(f"{restored.base_url}/reconcile/key-1") as r:
        assert r.status == 200 and (await r.json())["status"] == "applied"
    async with http.post(restored.base_url + "/rollback", json=body, headers={"Idempotency-Key": "key-1"}) as r:
        assert r.status == 200 and await r.read() == applied  # a replay, byte for byte; nothing applied again
    restored.assert_at_most_once_per_key()
    again = await say(http, second, "/sandbox/sample/deploy", {"user": "bob"})
    new = again["response"]["deploy"] if "deploy" in again["response"] else again["response"]
    old = sample["response"]["deploy"] if "deploy" in sample["response"] else sample["response"]
    assert new["version"] not in {d["version"] for d in history}
    assert new["deployment_id"] not in {d["deployment_id"] for d in history} and old in history
    await eventually(
        lambda: any(
            "bob" in str(d)
            for d in json.loads((sandbox_dir(data_dir) / DEPLOYS_FILE).read_text())["deploys"]["payments"]
        ),
        what="the new deploy saved (debounced, while running)",
    )


async def test_a_corrupt_state_file_is_moved_aside_and_the_sandbox_starts_fresh(
    make_server: ServerFactory, tmp_path: Path, http: Any, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    folder = sandbox_dir(data_dir)
    folder.mkdir(parents=True)
    (folder / WORKSPACE_FILE).write_text('{"format": "decklog-fake-slack-workspace", "vers', encoding="utf-8")
    (folder / DEPLOYS_FILE).write_text(json.dumps({"format": "decklog-fake-deploy-service", "version": 99}))
    caplog.set_level(logging.WARNING, logger="decklog.sandbox")

    server = await make_server(data_dir=data_dir)
    header, _ = await declare(http, server, "Fresh start")  # the bot works
    assert fake(server).workspace.channel("general").id == "C0GENERAL"
    assert server.parts.page.page.env.deploy.current_version("payments")  # baseline seeded again

    for name, content in ((WORKSPACE_FILE, '"vers'), (DEPLOYS_FILE, '"version": 99')):
        (aside,) = folder.glob(f"{name}.broken-*")
        assert content in aside.read_text(encoding="utf-8")
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(str(folder / name) in w and str(aside) in w for w in warned), warned
    await eventually(lambda: (folder / WORKSPACE_FILE).exists(), what="a fresh workspace.json")

    await stop(server)
    saved = json.loads((folder / WORKSPACE_FILE).read_text(encoding="utf-8"))
    assert header.ts in {m["ts"] for m in saved["messages"]["channels"][ALERTS]}


async def test_saves_are_debounced_and_atomic(make_server: ServerFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = await make_server(data_dir=data_dir)
    ws, kept = fake(server).workspace, keeper(server)
    path = sandbox_dir(data_dir) / WORKSPACE_FILE
    before = kept.saves
    for i in range(30):
        ws.post_as_user("bob", "#general", f"note {i}")

    def saved_last() -> bool:
        return path.exists() and "note 29" in path.read_text(encoding="utf-8")

    await eventually(saved_last, what="the burst saved")
    assert kept.saves - before <= 2  # one save for the burst (two if a save window was just closing)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


def rich_workspace() -> FakeSlackWorkspace:
    ws = FakeSlackWorkspace()
    ws.add_user("dana", real_name="Dana Diaz")
    parent = ws.post_as_user("alice", "#alerts", "payments are down")
    ws.post_as_bot(
        "#alerts",
        "Hypothesis: a deploy",
        thread_ts=parent.ts,
        metadata={"event_type": "decklog_entry", "event_payload": {"entry_id": "e1"}},
        blocks=[{"type": "section", "block_id": "b1", "text": {"type": "mrkdwn", "text": "*hi*"}}],
    )
    ws.post_as_user("bob", "#alerts", "on it", thread_ts=parent.ts)
    ws.messages.post(
        "C0ALERTS", text="broadcast", user="U0CAROL", as_bot=False, thread_ts=parent.ts, reply_broadcast=True
    )
    ws.messages.add_reaction("C0ALERTS", parent.ts, "eyes", "U0BOB")
    ws.messages.add_reaction("C0ALERTS", parent.ts, "fire", "U0BOT")
    ws.messages.update("C0ALERTS", parent.ts, editor="U0ALICE", text="payments are down (edited)")
    gone = ws.post_as_user("carol", "#general", "typo")
    ws.messages.delete("C0GENERAL", gone.ts)
    room = ws.create_channel("war-room", creator="bob", members=("alice",))
    ws.post_as_user("alice", room.id, "in here")
    ws.directory.im_with("U0ALICE")
    ws.views.publish("U0ALICE", {"type": "home", "blocks": [{"type": "divider"}]})
    ws.views.open("U0BOB", {"type": "modal", "callback_id": "declare", "external_id": "x1", "blocks": []})
    ws.views.push("U0BOB", {"type": "modal", "callback_id": "more", "blocks": []})
    file = ws.files.reserve(filename="report.md", length=4, user="U0BOT")
    ws.files.receive(file.id, b"# R\xff")
    ws.files.complete(file.id, title="Report")
    ws.files.record_share(file, channel="C0ALERTS", ts=parent.ts, thread_ts=parent.ts)
    ws.files.reserve(filename="never.txt", length=1, user="U0BOT")
    ws.messages.post_ephemeral("C0ALERTS", "U0ALICE", text="only you", thread_ts=parent.ts)
    return ws


def test_the_workspace_round_trip_is_exact() -> None:
    ws = rich_workspace()
    data = ws.to_dict()
    copy = FakeSlackWorkspace.from_dict(json.loads(json.dumps(data)))  # through JSON, as on disk
    assert workspace_snapshot(copy) == workspace_snapshot(ws)
    assert copy.to_dict() == data
    assert copy.files.find(ws.files.all()[0].id).content == b"# R\xff"  # type: ignore[union-attr]
    assert [v.id for v in copy.modals("bob")] == [v.id for v in ws.modals("bob")]
    # the restored clock and id mint go on where the old ones stopped
    assert parse_ts(copy.clock.next()) > max(parse_ts(ts) for ts in all_ts(ws))
    assert copy.ids.mint("C") == ws.ids.mint("C")
    assert copy.create_channel("another").id not in {c.id for c in ws.directory.channels()}


def test_a_deterministic_clock_round_trips_too() -> None:
    ws = FakeSlackWorkspace(ts_start=1_700_000_000.0)
    ws.post_as_user("alice", "#alerts", "one")
    copy = FakeSlackWorkspace.from_dict(ws.to_dict())
    assert copy.post_as_user("alice", "#alerts", "two").ts == ws.post_as_user("alice", "#alerts", "two").ts


def test_load_dict_is_all_or_nothing_and_refuses_what_does_not_fit() -> None:
    source = rich_workspace().to_dict()
    target = FakeSlackWorkspace()
    target.post_as_user("alice", "#general", "mine")
    before = workspace_snapshot(target)
    broken = json.loads(json.dumps(source))
    broken["messages"]["channels"]["C0ALERTS"][-1]["reactions"] = {"eyes": "U0BOB"}  # not a list of users
    foreign = FakeSlackWorkspace(identity=Identity(team_id="T0OTHER")).to_dict()
    bad: Any
    for bad in (
        broken,
        foreign,
        {**source, "version": 2},
        {**source, "format": "something else"},
        {**source, "files": {"files": [{"id": "F1"}]}},
        [],
    ):
        with pytest.raises(ValueError):
            target.load_dict(bad)
        assert workspace_snapshot(target) == before
    target.load_dict(source)
    assert workspace_snapshot(target) == workspace_snapshot(FakeSlackWorkspace.from_dict(source))
    assert target.feed.history[-1].kind == "workspace_loaded"


def test_the_deploy_service_round_trip_is_exact() -> None:
    service = FakeDeployService()
    service.record_deploy("payments", "v1", author="ci", commit="abc", at="2026-01-01T00:00:00Z")
    service.record_deploy("search", "v7")
    copy = FakeDeployService.from_dict(json.loads(json.dumps(service.to_dict())))
    assert copy.to_dict() == service.to_dict() and copy.deploys() == service.deploys()
    at = "2026-01-02T00:00:00Z"
    assert copy.record_deploy("payments", "v2", at=at) == service.record_deploy("payments", "v2", at=at)
    with pytest.raises(ValueError):
        copy.load_dict({**service.to_dict(), "effects": [{"kind": "x"}]})
    assert copy.deploys() == service.deploys()  # unchanged by the refused state


async def test_the_sandbox_runs_a_status_page_the_statuspage_action_can_use(
    make_server: ServerFactory, http: Any
) -> None:
    from decklog.adapters.executors import build_executor
    from decklog.bot.actions import build_catalog

    server = await make_server()
    env = server.parts.page.page.env
    assert isinstance(env.statuspage, FakeStatuspage)
    url = server.settings.statuspage_api_url
    assert url is not None and url.endswith(f"/v1/pages/{env.statuspage.page_id}")
    assert env.statuspage.api_key in url  # the key rides in the URL's user part, as the executor reads it
    state = await (await http.get(server.url + "/sandbox/state")).json()
    assert state["sandbox"]["statuspage"]["used_by_actions"] is True
    assert env.statuspage.api_key not in json.dumps(state)  # the page never shows the key
    spec = build_catalog(server.settings, server.config).get("status_page_update")
    assert spec.available, spec.unavailable_reason
    executor = build_executor(spec.executor, http)
    request = ExecutionRequest(
        action="status_page_update",
        params={"status": "investigating", "message": "Payments are failing"},
        scope="incident/payments-5xx",
        run_id="run-1",
        fence=1,
        idempotency_key="sp-key-1",
    )
    outcome = await executor.execute(request)
    assert outcome.outcome == "applied", outcome
    assert [i["name"] for i in env.statuspage.incidents] == ["Incident payments-5xx"]


async def test_an_operator_status_page_is_left_alone(make_server: ServerFactory) -> None:
    server = await make_server(statuspage_api_url="https://KEY@status.example.com/v1/pages/p1")
    assert server.settings.statuspage_api_url == "https://KEY@status.example.com/v1/pages/p1"
    assert server.parts.page.page.env.statuspage is None


async def test_after_stop_a_late_change_is_written_through(tmp_path: Path) -> None:
    ws = FakeSlackWorkspace()
    kept = SandboxPersistence(tmp_path / "sandbox")
    kept.watch(ws)
    await kept.close()
    path = tmp_path / "sandbox" / WORKSPACE_FILE
    assert FakeSlackWorkspace.from_dict(json.loads(path.read_text())).to_dict() == ws.to_dict()
    ws.post_as_bot("#alerts", "delivered while the server was winding down")
    assert "winding down" in path.read_text()  # at once: nothing is left running to debounce
