"""Persist, then ack: every Slack request is in the inbox (on disk) before Slack hears 200 or its envelope is acked;
duplicates are processed once; bad requests are refused and not stored; a SIGKILL loses nothing acknowledged."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.adapters.slack.ids import Action
from decklog.bot.server import DecklogServer
from decklog.core.store.ports import InboxItem
from decklog.core.store.sqlite.inbox import SqliteInbox
from tests.conftest import ServerFactory, eventually
from tests.reliability.test_slack_reliability import _headers, _serve

ALICE, BOB, GENERAL = "U0ALICE", "U0BOB", "C0GENERAL"


def stored(data_dir: Path) -> list[tuple[str, bool]]:
    """The inbox as a separate connection reads it from disk: (key, done) in arrival order."""
    path = data_dir / "inbox.db"
    if not path.exists():
        return []
    db = sqlite3.connect(path)
    try:
        return [(k, d is not None) for k, d in db.execute("select key, done_at from inbox order by id")]
    finally:
        db.close()


class Gate:
    """The intake's test hook: holds every stored request before it is processed, until opened."""

    def __init__(self, server: DecklogServer) -> None:
        self.held: list[InboxItem] = []
        self.open = asyncio.Event()
        server.parts.slack.intake.before_process = self.wait

    async def wait(self, item: InboxItem) -> None:
        self.held.append(item)
        await self.open.wait()


async def _scope_thread(server: DecklogServer, scope: str) -> Any:
    from decklog.core.errors import NotFound

    try:
        state = await server.runtime.store.get_state(scope)
    except NotFound:
        return None
    return state if state.thread else None


async def _kinds(server: DecklogServer, scope: str) -> list[str]:
    return [e.kind for e in await server.runtime.store.read(scope)]


def _new_key(data_dir: Path, before: list[tuple[str, bool]]) -> tuple[str, bool]:
    rows = stored(data_dir)
    assert len(rows) == len(before) + 1, (before, rows)
    return rows[-1]


async def test_every_kind_of_request_is_stored_before_its_ack(make_server: ServerFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = await make_server(data_dir=data_dir)
    fake = server.sandbox
    await fake.run_command(ALICE, GENERAL, "declare")  # opens the modal (processed: the gate is not set yet)
    modal = await eventually(lambda: fake.workspace.modals(ALICE), what="the declare modal")
    await fake.run_command(ALICE, GENERAL, "declare Inbox first sev3")
    scope = "incident/inbox-first"
    state = await eventually(lambda: _scope_thread(server, scope), what="the thread")
    note = await fake.post_message(BOB, GENERAL, "queue depth 40k", thread_ts=state.thread.ts)
    await eventually(lambda: _has(server, scope, "message"))
    await eventually(lambda: all(done for _k, done in stored(data_dir)), what="the setup processed")

    gate = Gate(server)
    sent: list[tuple[str, Any]] = [
        ("command", lambda: fake.run_command(ALICE, GENERAL, f"sev 2 {scope}")),
        ("message", lambda: fake.post_message(BOB, GENERAL, "rolling back", thread_ts=state.thread.ts)),
        ("reaction", lambda: fake.add_reaction(ALICE, GENERAL, note.ts, "pushpin")),
        ("button", lambda: fake.click_button(ALICE, GENERAL, state.thread.ts, Action.RESOLVE)),
        ("view", lambda: fake.submit_view(ALICE, modal[-1].id, {"title": "Declared in the modal"})),
    ]
    prefixes = {"command": "cmd:", "message": "ev:", "reaction": "ev:", "button": "int:", "view": "view:"}
    for kind, send in sent:
        before = stored(data_dir)
        out = await send()
        assert out.status == 200, kind
        key, done = _new_key(data_dir, before)  # on disk when the 200 arrived, and not processed (held)
        assert key.startswith(prefixes[kind]) and not done, (kind, key)
        await eventually(lambda k=key: k in [i.key for i in gate.held], what=f"the {kind} held")
    assert "evidence" not in await _kinds(server, scope)  # nothing was processed before the gate opened
    assert (await server.runtime.store.get_state(scope)).status != "resolved"
    gate.open.set()
    await eventually(lambda: all(done for _k, done in stored(data_dir)), what="all of them processed")
    found = await _kinds(server, scope)
    assert "evidence" in found and found.count("message") == 2
    assert (await server.runtime.store.get_state(scope)).status == "resolved"
    await eventually(lambda: _scope_thread(server, "incident/declared-in-the-modal"), what="the modal's incident")


async def _has(server: DecklogServer, scope: str, kind: str) -> bool:
    return kind in await _kinds(server, scope)


async def test_an_invalid_modal_is_answered_in_the_ack_and_not_stored(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    server = await make_server(data_dir=data_dir)
    fake = server.sandbox
    await fake.run_command(ALICE, GENERAL, "declare")
    modal = await eventually(lambda: fake.workspace.modals(ALICE), what="the declare modal")
    await eventually(lambda: all(done for _k, done in stored(data_dir)))
    before = stored(data_dir)
    out = await fake.submit_view(ALICE, modal[-1].id, {"title": "   "})
    assert out.status == 200 and out.result == "errors"
    assert json.loads(out.responses[0].body)["response_action"] == "errors"
    assert stored(data_dir) == before


async def test_a_socket_mode_envelope_is_stored_before_it_is_acked(make_server: ServerFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with FakeSlack(bot_token="xoxb-socket", app_token="xapp-socket") as fake:
        server = await make_server(
            data_dir=data_dir,
            socket_mode=True,
            slack_bot_token="xoxb-socket",
            slack_app_token="xapp-socket",
            slack_api_url=fake.base_url,
        )
        await fake.server.wait_socket_connected()
        await fake.use_socket_mode()
        gate = Gate(server)
        out = await fake.run_command(ALICE, GENERAL, "declare Socket inbox sev3")
        assert out.status == 200  # the envelope was acked
        (key, done), *_ = stored(data_dir)
        assert key.startswith("cmd:") and not done
        await eventually(lambda: gate.held, what="the envelope held before processing")
        assert not await server.runtime.store.scope_ids()
        gate.open.set()
        await eventually(lambda: _scope_thread(server, "incident/socket-inbox"), what="the declared thread")
        await eventually(lambda: stored(data_dir) == [(key, True)], what="the envelope done")


async def test_a_retry_while_processing_and_after_is_processed_once(make_server: ServerFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = await make_server(data_dir=data_dir)
    fake = server.sandbox
    await fake.run_command(ALICE, GENERAL, "declare Retried event")
    scope = "incident/retried-event"
    state = await eventually(lambda: _scope_thread(server, scope), what="the thread")
    gate = Gate(server)
    event = {
        "type": "message",
        "channel": GENERAL,
        "user": BOB,
        "text": "is it DNS?",
        "ts": "1799999999.000200",
        "thread_ts": state.thread.ts,
        "channel_type": "channel",
        "event_ts": "1799999999.000200",
    }
    first = await fake.driver.event(event, event_id="Ev0INBOX")
    await eventually(lambda: gate.held, what="the first delivery processing")
    during = await fake.driver.event(event, event_id="Ev0INBOX", retry_num=1, retry_reason="http_timeout")
    assert first.status == 200 and during.status == 200
    assert [k for k, _d in stored(data_dir)].count("ev:Ev0INBOX") == 1
    gate.open.set()
    await eventually(lambda: ("ev:Ev0INBOX", True) in stored(data_dir), what="the event done")
    after = await fake.driver.event(event, event_id="Ev0INBOX", retry_num=2, retry_reason="http_timeout")
    assert after.status == 200
    assert [i.key for i in gate.held].count("ev:Ev0INBOX") == 1  # processed once
    assert server.parts.slack.inbox.stats.duplicates == 2
    assert (await _kinds(server, scope)).count("message") == 1


async def test_bad_signatures_are_401_and_malformed_bodies_400_and_nothing_is_stored(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    server = await make_server(data_dir=data_dir)
    driver = server.sandbox.driver
    bad = await driver.signed_with(signature="v0=" + "0" * 64).slash_command("declare Forged", ALICE, GENERAL)
    stale = await driver.stale().slash_command("declare Stale", ALICE, GENERAL)
    assert bad.status == 401 and stale.status == 401 and "signature" in bad.json()["error"]
    for body, content_type, reason in (
        (b"{not json", "application/json", "not valid JSON"),
        (b"[1, 2]", "application/json", "not an object"),
        (json.dumps({"type": "event_callback", "event": {}}).encode(), "application/json", "event_id"),
        (b"payload=%7Bbroken", "application/x-www-form-urlencoded", "payload field is not valid JSON"),
        (b"text=hello", "application/x-www-form-urlencoded", "not a Slack request"),
        (b"command=%2Fincident&text=list", "application/x-www-form-urlencoded", "trigger_id"),
    ):
        out = await driver.post(body, content_type)
        assert out.status == 400 and reason in out.json()["error"], (body, out.status, out.body)
    assert stored(data_dir) == []
    assert not await server.runtime.store.scope_ids()
    assert (await driver.url_verification("chal-9")).json() == {"challenge": "chal-9"}
    assert stored(data_dir) == []


async def test_a_failing_request_is_retried_then_given_up_and_parked(
    make_server: ServerFactory, tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    from decklog.adapters.slack.runner import CommandRunner

    calls: list[str] = []

    async def broken(self: CommandRunner, cmd: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(cmd.name)
        raise RuntimeError("poison")

    monkeypatch.setattr(CommandRunner, "run", broken)
    data_dir = tmp_path / "data"
    server = await make_server(data_dir=data_dir)
    server.parts.slack.intake.retry_delays = (0.0,)
    await server.sandbox.run_command(ALICE, GENERAL, "list")
    await eventually(lambda: _parked(data_dir), what="given up, parked")
    assert [d for _k, d in stored(data_dir)] == [False]  # not done: parked, where `decklog doctor` shows it
    assert calls == ["list"] * server.parts.slack.intake.max_attempts
    assert "RuntimeError: poison" in _parked(data_dir)[0]
    replies = [r for r in server.sandbox.server.responses if "ref `" in r.body.get("text", "")]
    assert len(replies) == 1  # the person hears about it once, on the last attempt


def _parked(data_dir: Path) -> list[str]:
    db = sqlite3.connect(data_dir / "inbox.db")
    try:
        return [e for (e,) in db.execute("select error from inbox where parked_at is not null")]
    finally:
        db.close()


async def test_pending_requests_are_replayed_at_boot_oldest_first(tmp_path: Path) -> None:
    inbox = await SqliteInbox.open(tmp_path)
    puts = await asyncio.gather(
        *(inbox.put(key=f"k{i % 10}", source="http", body={"i": i}, meta={}) for i in range(30))
    )
    assert sum(puts) == 10 and inbox.stats.persisted == 10 and inbox.stats.duplicates == 20
    assert inbox.stats.fsyncs < 10  # concurrent puts shared commits
    await inbox.done(key="k3")
    await inbox.close()
    again = await SqliteInbox.open(tmp_path)
    assert [i.key for i in await again.pending()] == [f"k{i}" for i in range(10) if i != 3]
    assert not await again.put(key="k3", source="http", body={}, meta={})  # done keys still refuse retries
    assert await again.prune(older_than_s=-1) == 1
    assert await again.put(key="k3", source="http", body={}, meta={})  # forgotten after the retention
    await again.close()


@pytest.mark.slow
async def test_sigkill_right_after_20_acked_declares_loses_none(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with FakeSlack(bot_token="xoxb-kill") as fake:
        proc, url = await asyncio.to_thread(_serve, data_dir, fake.base_url)
        try:
            fake.use_http(f"{url}/slack/events", "kill-secret")
            outs = await asyncio.gather(
                *(fake.run_command(ALICE, GENERAL, f"declare Killed number {i} sev3") for i in range(20))
            )
            assert [o.status for o in outs] == [200] * 20
        finally:
            proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait)
        assert len(stored(data_dir)) == 20  # all acked, all on disk
        proc2, url2 = await asyncio.to_thread(_serve, data_dir, fake.base_url)
        try:
            fake.use_http(f"{url2}/slack/events", "kill-secret")
            await eventually(lambda: all(d for _k, d in stored(data_dir)), timeout=30, what="the inbox replayed")
            await eventually(lambda: len(_declared(data_dir)) == 20, timeout=30, what="20 incidents")
            await eventually(lambda: len(_headers(fake, GENERAL)) == 20, timeout=30, what="20 headers")
            assert set(_declared(data_dir)) == {f"incident~killed-number-{i}" for i in range(20)}
            assert sorted(_declared(data_dir).values()) == [1] * 20  # one declaration each
            titles = sorted(m.text for m in _headers(fake, GENERAL))
            assert len(set(titles)) == 20
        finally:
            proc2.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc2.wait)


def _declared(data_dir: Path) -> dict[str, int]:
    """Scope file stem → its number of ``declared`` entries, for every scope file that has one."""
    found: dict[str, int] = {}
    for path in (data_dir / "scopes").glob("incident~*.db"):
        db = sqlite3.connect(path)
        try:
            n = db.execute("select count(*) from entries where kind = 'declared'").fetchone()[0]
        except sqlite3.Error:
            n = 0
        finally:
            db.close()
        if n:
            found[path.stem] = n
    return found


async def test_work_unfinished_at_stop_stays_in_the_inbox_and_is_replayed(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    server = await make_server(data_dir=data_dir)
    gate = Gate(server)
    out = await server.sandbox.run_command(ALICE, GENERAL, "declare Held at the stop")
    assert out.status == 200
    await eventually(lambda: gate.held, what="the declaration held")
    await server.stop()  # the gate never opens: the work is cancelled after the grace
    assert [done for _k, done in stored(data_dir)] == [False]
    again = await make_server(data_dir=data_dir)
    await eventually(lambda: _scope_thread(again, "incident/held-at-the-stop"), timeout=10, what="replayed")
    # finished: done, or (its ephemeral answer's response_url died with the first sandbox, so answering fails)
    # parked with that error after its attempts — either way no longer pending, never replayed again
    await eventually(
        lambda: [done for _k, done in stored(data_dir)] == [True] or _parked(data_dir), timeout=10, what="finished"
    )


async def test_a_threads_messages_are_recorded_in_slack_order_while_other_threads_go_on(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """The first of two replies in one thread is held before processing (as a slow users.info lookup would hold it):
    the second waits for it, a reply in another incident's thread does not, and the log keeps Slack's order."""
    data_dir = tmp_path / "data"
    server = await make_server(data_dir=data_dir)
    fake = server.sandbox
    threads = {}
    for name in ("Lane one", "Lane two"):
        await fake.run_command(ALICE, GENERAL, f"declare {name} sev3")
        scope = "incident/" + name.lower().replace(" ", "-")
        threads[scope] = (await eventually(lambda s=scope: _scope_thread(server, s), what=name)).thread.ts
    one, two = threads
    await eventually(lambda: all(done for _k, done in stored(data_dir)), what="the setup processed")

    release = asyncio.Event()
    held: list[str] = []

    async def hold_the_first(item: InboxItem) -> None:
        if item.body.get("event", {}).get("text") == "first":
            held.append(item.key)
            await release.wait()

    server.parts.slack.intake.before_process = hold_the_first
    await fake.post_message(BOB, GENERAL, "first", thread_ts=threads[one])
    await eventually(lambda: held, what="the first reply held")
    await fake.post_message(ALICE, GENERAL, "second", thread_ts=threads[one])
    await fake.post_message(BOB, GENERAL, "elsewhere", thread_ts=threads[two])
    await eventually(lambda: _texts(server, two), what="the other thread's reply")
    assert await _texts(server, one) == []  # "second" waits for "first", though it was acked and stored
    release.set()
    assert await eventually(lambda: _texts(server, one, 2), what="both replies") == ["first", "second"]


async def _texts(server: DecklogServer, scope: str, count: int = 1) -> list[str]:
    texts = [e.payload.text for e in await server.runtime.store.read(scope, kinds=("message",))]  # type: ignore[attr-defined]
    return texts if len(texts) >= count else []


async def test_a_hung_request_holds_its_thread_only_for_the_lane_wait(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """A request whose work never finishes must not stop the rest of its thread for ever (``LANE_WAIT_S``)."""
    server = await make_server(data_dir=tmp_path / "data")
    fake = server.sandbox
    await fake.run_command(ALICE, GENERAL, "declare Hung lane sev3")
    scope = "incident/hung-lane"
    ts = (await eventually(lambda: _scope_thread(server, scope), what="the thread")).thread.ts
    never = asyncio.Event()

    async def hang_the_first(item: InboxItem) -> None:
        if item.body.get("event", {}).get("text") == "stuck":
            await never.wait()

    intake = server.parts.slack.intake
    intake.before_process, intake.lane_wait_s = hang_the_first, 0.2
    await fake.post_message(BOB, GENERAL, "stuck", thread_ts=ts)
    await fake.post_message(ALICE, GENERAL, "goes on", thread_ts=ts)
    assert await eventually(lambda: _texts(server, scope), what="the later reply") == ["goes on"]
    never.set()
    assert await eventually(lambda: _texts(server, scope, 2), what="both") == ["goes on", "stuck"]
