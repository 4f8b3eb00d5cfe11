"""Exporting reports: the CLI (a subprocess, twice → the same bytes, one entry), the API serving the same bytes as
the CLI, and the Slack upload through the fake workspace (files upload v2 into the thread, never twice)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.adapters.slack.export import export_to_slack
from decklog.adapters.slack.ids import Action
from decklog.bot.runtime import OUTBOX_TOPICS
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.core.entries import Actor, NewEntry
from decklog.core.errors import InvalidInput
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually, test_config
from tests.e2e.test_api import quiet_servers
from tests.fakes.polling import wait_for_call
from tests.fakes.slack_calls import slack_calls
from tests.fakes.slack_faults import slack_faults

DECKLOG = Path(sys.executable).parent / "decklog"
ALICE, BOB = "U0ALICE", "U0BOB"
GENERAL = "C0GENERAL"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[DecklogServer]:
    async with quiet_servers(tmp_path) as make:
        yield await make()


def decklog(data: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_"))}
    env.update(DECKLOG_DATA_DIR=str(data), DECKLOG_ACTOR="oncall")
    return subprocess.run([str(DECKLOG), *args], cwd=str(cwd or data.parent), env=env, capture_output=True, timeout=60)


async def entries_of(data: Path, scope: str) -> list[Any]:
    store = SqliteLogStore(data, topics=OUTBOX_TOPICS)
    try:
        return await store.read(scope)
    finally:
        await store.close()


@pytest.fixture
async def scope(tmp_path: Path) -> str:
    """A scope written in-process the way the CLI writes it (every outbox topic), to keep subprocesses few."""
    store = SqliteLogStore(tmp_path / "data", topics=OUTBOX_TOPICS)
    oncall = Actor(type="human", id="cli:oncall", name="oncall")
    sid = "incident/payments-5xx"
    try:
        await store.append(
            sid,
            [NewEntry.make("declared", oncall, {"title": "Payments 5xx", "severity": 2, "services": ["payments"]})],
            create=True,
        )
        await store.append(sid, [NewEntry.make("message", oncall, {"text": "502s from the load balancer"})])
        await store.append(sid, [NewEntry.make("decision", oncall, {"text": "roll back r2026-09-19-4"})])
    finally:
        await store.close()
    return sid


# -- the CLI -------------------------------------------------------------------------------------------------------


async def test_cli_export_twice_gives_identical_bytes_and_one_entry(tmp_path: Path, scope: str) -> None:
    data = tmp_path / "data"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bodies: dict[str, bytes] = {}
    for fmt in ("md", "json", "html"):
        target = tmp_path / f"report.{fmt}"
        first = decklog(data, "export", scope, "--format", fmt, "--output", str(target), cwd=elsewhere)
        assert first.returncode == 0, first.stderr
        body = bodies[fmt] = target.read_bytes()
        assert first.stdout.decode().strip() == f"{target} sha256:{hashlib.sha256(body).hexdigest()}"
        second = decklog(data, "export", scope, "--format", fmt, "--output", str(target))
        assert second.returncode == 0 and target.read_bytes() == body
    stdout = decklog(data, "export", scope, "--format", "md")
    assert stdout.returncode == 0 and stdout.stdout == bodies["md"]  # to stdout: the same bytes again
    assert json.loads(bodies["json"])["summary"]["title"] == "Payments 5xx"
    assert bodies["html"].startswith(b"<!DOCTYPE html>")

    exported = [e.payload.model_dump() for e in await entries_of(data, scope) if e.kind == "report_exported"]
    expected = [
        {
            "format": fmt,
            "sha256": hashlib.sha256(bodies[fmt]).hexdigest(),
            "bytes": len(bodies[fmt]),
            "destination": str((tmp_path / f"report.{fmt}").resolve()),
            "file_id": "",
        }
        for fmt in ("md", "json", "html")
    ]
    assert exported[:3] == expected  # the same bytes to the same place are recorded once
    assert [e["destination"] for e in exported[3:]] == ["stdout"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("--format", "pdf"), 2),
        (("--format", "md", "--bogus"), 2),
    ],
)
async def test_cli_export_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, scope: str, args: tuple[str, ...], code: int
) -> None:
    data = tmp_path / "data"
    before = await entries_of(data, scope)
    target = tmp_path / "never.md"
    out = decklog(data, "export", scope, *args, "--output", str(target))
    assert out.returncode == code
    assert len(out.stderr.decode().strip().splitlines()) == 1 and b"Traceback" not in out.stderr
    assert out.stdout == b"" and not target.exists()
    assert await entries_of(data, scope) == before


def test_cli_export_of_an_unknown_scope_fails_cleanly(tmp_path: Path, scope: str) -> None:
    out = decklog(tmp_path / "data", "export", "incident/nope", "--format", "md")
    assert out.returncode == 1 and out.stderr.decode().count("\n") == 1 and b"no such scope" in out.stderr


# -- the API serves what the CLI writes --------------------------------------------------------------------------


async def test_api_and_cli_give_the_same_bytes(tmp_path: Path, scope: str) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data, host="127.0.0.1", port=0)
    server = DecklogServer(settings, config=test_config(), parts={"api", "reports"})
    await server.start()
    try:
        # the sandbox's Slack sender opens the scope's thread (one more entry); then the log is still
        await eventually(lambda: _threaded(server, scope), what="the header's thread")
        await server.runtime.dispatcher.idle()
        async with aiohttp.ClientSession() as http:
            for fmt in ("md", "json", "html"):
                async with http.get(f"{server.url}/api/scopes/{scope}/report.{fmt}") as resp:
                    served = await resp.read()
                    digest = resp.headers["X-Decklog-Report-Sha256"]
                target = tmp_path / f"cli.{fmt}"
                out = decklog(data, "export", scope, "--format", fmt, "--output", str(target))
                assert out.returncode == 0, out.stderr
                assert target.read_bytes() == served and hashlib.sha256(served).hexdigest() == digest
    finally:
        await server.stop()


async def _threaded(server: DecklogServer, scope: str) -> bool:
    return (await server.runtime.store.get_state(scope)).thread is not None


# -- Slack -------------------------------------------------------------------------------------------------------


async def declare(server: DecklogServer) -> tuple[str, Any]:
    fake: FakeSlack = server.sandbox
    await fake.run_command(ALICE, GENERAL, "declare Payments 5xx elevated sev2")
    scope = await eventually(lambda: _first_scope(server), what="a declared scope")
    state = await eventually(lambda: _thread(server, scope), what="the header's thread")
    return scope, state


async def _first_scope(server: DecklogServer) -> str | None:
    ids = [s for s in await server.runtime.store.scope_ids() if s.kind == "incident"]
    return str(ids[0]) if ids else None


async def _thread(server: DecklogServer, scope: str) -> Any:
    from decklog.core.errors import NotFound

    try:
        state = await server.runtime.store.get_state(scope)
    except NotFound:
        return None
    return state if state.thread else None


def completes(fake: FakeSlack) -> list[Any]:
    return slack_calls(fake).calls_to("files.completeUploadExternal", ok=True)


async def exports(server: DecklogServer, scope: str) -> list[Any]:
    return [e for e in await server.runtime.store.read(scope) if e.kind == "report_exported"]


def uploaded_text(fake: FakeSlack, call: Any) -> bytes:
    file_id = (
        json.loads(call.args["files"])[0]["id"] if isinstance(call.args["files"], str) else call.args["files"][0]["id"]
    )
    found = fake.server.workspace.files.find(file_id)
    assert found is not None and found.content is not None
    return bytes(found.content)


async def test_slack_export_uploads_into_the_thread_once_per_digest(server: DecklogServer) -> None:
    fake: FakeSlack = server.sandbox
    scope, state = await declare(server)
    await server.runtime.dispatcher.idle()
    expected_md = await _api_bytes(server, scope, "md")

    await fake.run_command(ALICE, GENERAL, f"export md {scope}")
    call = await wait_for_call(fake.server, "files.completeUploadExternal")
    assert call.args["channel_id"] == state.thread.channel and call.args["thread_ts"] == state.thread.ts
    digest = hashlib.sha256(expected_md).hexdigest()
    assert digest in call.args["initial_comment"]
    assert uploaded_text(fake, call) == expected_md
    shared = await eventually(
        lambda: [m for m in fake.server.workspace.thread(state.thread.channel, state.thread.ts) if m.files],
        what="the file in the thread",
    )
    assert digest in shared[0].text
    await eventually(lambda: any(digest in json.dumps(r.body) for r in fake.server.responses), what="the digest reply")

    memo = await eventually(lambda: _uploaded(server, scope, digest), what="the upload's memo")
    await server.runtime.dispatcher.idle()
    (request,) = await exports(server, scope)  # one export, one entry: the upload appends nothing (decision 141)
    assert (request.actor.id, request.payload.destination, request.payload.file_id) == (ALICE, "slack", "")
    assert request.payload.sha256 == digest
    assert (memo["file_id"], memo["seq"]) == (shared[0].files[0]["id"], request.seq)

    # the same bytes again, from the slash command and the header's button: no second upload, no new entry
    await fake.run_command(ALICE, GENERAL, f"export md {scope}")
    await fake.click_button(BOB, GENERAL, state.thread.ts, Action.EXPORT)
    await eventually(
        lambda: sum("already in the thread" in json.dumps(r.body) for r in fake.server.responses) >= 2,
        what="two 'already there' replies",
    )
    await server.runtime.dispatcher.idle()
    assert len(completes(fake)) == 1
    assert len(await exports(server, scope)) == 1

    # another format is other bytes: uploaded
    await fake.run_command(ALICE, GENERAL, f"export html {scope}")
    await eventually(lambda: len(completes(fake)) == 2, what="the html upload")
    html = uploaded_text(fake, completes(fake)[-1])
    assert html.startswith(b"<!DOCTYPE html>")


async def test_one_export_is_one_line_in_the_timeline(server: DecklogServer) -> None:
    """The upload into the thread appends no second ``report_exported``; the timeline (the REST API's,
    the CLI's) shows one line per export, the one the person asked for."""
    fake: FakeSlack = server.sandbox
    scope, state = await declare(server)
    await server.runtime.dispatcher.idle()
    await fake.click_button(BOB, GENERAL, state.thread.ts, Action.EXPORT)
    await wait_for_call(fake.server, "files.completeUploadExternal")
    (request,) = await eventually(lambda: exports(server, scope), what="the export's entry")
    await eventually(lambda: _uploaded(server, scope, request.payload.sha256), what="the upload")
    await server.runtime.dispatcher.idle()
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/api/scopes/{scope}/timeline") as resp:
        entries = (await resp.json())["entries"]
    lines = [e["text"] for e in entries if "Report exported" in e["text"]]
    expected = f"Report exported (md, sha256 {request.payload.sha256[:12]}) to the Slack thread"
    assert lines == [expected], [e["text"] for e in entries]
    assert [e["actor"]["id"] for e in entries if e["kind"] == "report_exported"] == [BOB]

    out = decklog(server.settings.data_dir, "timeline", scope)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().count("Report exported") == 1, out.stdout.decode()


async def test_mention_export_in_the_thread_uploads_each_digest_once(server: DecklogServer) -> None:
    """``@decklog export`` is itself a message of the thread (an entry), so it may well export new bytes; whatever
    the interleaving, every digest requested for Slack is uploaded exactly once."""
    fake: FakeSlack = server.sandbox
    scope, state = await declare(server)

    def replies() -> int:
        return sum("sha256" in c.args.get("text", "") for c in slack_calls(fake).calls_to("chat.postEphemeral"))

    for n in range(3):
        await fake.post_message(BOB, GENERAL, "@decklog export md", thread_ts=state.thread.ts)
        await eventually(lambda n=n: replies() > n, what="the mention's reply")  # type: ignore[misc]

    async def settled() -> bool:
        await server.runtime.dispatcher.idle()
        requests = {e.payload.sha256 for e in await exports(server, scope)}
        return bool(requests) and all([await _uploaded(server, scope, sha) for sha in requests])

    await eventually(settled, timeout=10, what="one upload per requested digest")
    digests = [c.args["initial_comment"] for c in completes(fake)]
    assert len(digests) == len(set(digests)) == len({e.payload.sha256 for e in await exports(server, scope)})


async def _uploaded(server: DecklogServer, scope: str, sha256: str) -> dict[str, Any] | None:
    """The Slack sender's memo of an upload once it is done (the file id and the request's seq)."""
    memo = await server.parts.slack_out.sender.memo_get(scope, f"upload:{sha256}")
    return memo if memo and memo.get("file_id") else None


def _ephemeral(fake: FakeSlack, text: str) -> bool:
    return any(text in c.args.get("text", "") for c in slack_calls(fake).calls_to("chat.postEphemeral"))


async def _api_bytes(server: DecklogServer, scope: str, fmt: str) -> bytes:
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/api/scopes/{scope}/report.{fmt}") as resp:
        assert resp.status == 200
        return await resp.read()


async def test_a_lost_upload_response_is_reconciled_not_repeated(server: DecklogServer) -> None:
    fake: FakeSlack = server.sandbox
    scope, state = await declare(server)
    await server.runtime.dispatcher.idle()
    slack_faults(fake.server).apply_then_drop("files.completeUploadExternal")  # shared, but decklog never hears back
    await fake.run_command(ALICE, GENERAL, f"export md {scope}")
    (request,) = await eventually(lambda: exports(server, scope), what="the export's entry")
    memo = await eventually(
        lambda: _uploaded(server, scope, request.payload.sha256), timeout=20, what="the reconciled upload"
    )
    shared = [m for m in fake.server.workspace.thread(state.thread.channel, state.thread.ts) if m.files]
    assert len(shared) == 1 and memo["file_id"] == shared[0].files[0]["id"]
    assert len(await exports(server, scope)) == 1
    assert len(slack_calls(fake).calls_to("files.completeUploadExternal")) == 1
    assert server.parts.slack_out.sender.stats.reconciled == 1  # found in the thread by its digest, not uploaded again


async def test_export_to_slack_without_a_thread_records_nothing(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path, topics=("index", "slack"))
    alice = Actor.human(ALICE, "alice")
    try:
        await store.append("incident/quiet", [NewEntry.make("declared", alice, {"title": "Quiet"})], create=True)
        reply = await export_to_slack(store, "incident/quiet", "md", alice)
        assert "no Slack thread" in reply and "decklog export incident/quiet" in reply
        with pytest.raises(InvalidInput, match="format"):
            await export_to_slack(store, "incident/quiet", "pdf", alice)
        assert [e.kind for e in await store.read("incident/quiet")] == ["declared"]
    finally:
        await store.close()
