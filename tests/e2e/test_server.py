"""The server's own surface: health, metrics, JSON errors, the one Slack error handler, reactions on suggestions,
and the Dockerfile's promises."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from decklog.adapters.slack.runner import CommandRunner
from decklog.bot.server import DecklogServer
from decklog.core.entries import Actor, NewEntry
from decklog.core.store.ports import AlertReceipt
from decklog.core.store.sqlite.alert_inbox import SqliteAlertInbox
from tests.conftest import ServerFactory, eventually

ROOT = Path(__file__).resolve().parents[2]


async def get(server: DecklogServer, path: str, method: str = "GET") -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as http, http.request(method, server.url + path) as r:
        return r.status, await r.text(), dict(r.headers)


async def test_healthz_reports_its_checks(server: DecklogServer) -> None:
    status, body, _ = await get(server, "/healthz")
    assert status == 200
    health = json.loads(body)
    assert health["status"] == "ok" and health["slack"] == "sandbox"
    assert health["checks"] == {"data_dir": "writable", "index": "writable", "dispatcher": "alive"}


async def test_healthz_is_503_when_the_dispatcher_is_gone(server: DecklogServer) -> None:
    await server.runtime.dispatcher.stop()
    status, body, _ = await get(server, "/healthz")
    assert status == 503 and json.loads(body)["checks"]["dispatcher"] == "stopped"


async def test_metrics_are_prometheus_text(server: DecklogServer) -> None:
    await server.sandbox.run_command("U0ALICE", "C0GENERAL", "declare Metrics check")
    await eventually(lambda: server.parts.slack_out.sender.stats.posts >= 1, what="the header posted")
    status, text, headers = await get(server, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    for name in (
        "decklog_http_requests_total",
        "decklog_slack_acks_total",
        "decklog_slack_ack_seconds",
        "decklog_appends_total",
        "decklog_outbox_pending",
        "decklog_outbox_parked",
        "decklog_sender_latency_seconds",
        "decklog_slack_posts_total",
        "decklog_slack_work_in_flight",
        "decklog_turns_waiting",
        "decklog_alert_inbox_pending",
    ):
        assert f"# TYPE {name} " in text, name
    assert 'decklog_slack_acks_total{status="200"}' in text
    appends = next(line for line in text.splitlines() if line.startswith("decklog_appends_total "))
    assert float(appends.split()[1]) >= 1


async def test_the_alert_inbox_gauge_counts_notifications_stored_and_not_routed(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """Without the receivers part nothing routes the inbox: what is stored there (here by another connection to the
    same file, as a replica's would be) waits, and the gauge says how many."""
    data = tmp_path / "data"
    server = await make_server(data_dir=data, parts={"api"})

    async def gauge() -> float:
        _, text, _ = await get(server, "/metrics")
        line = next(x for x in text.splitlines() if x.startswith("decklog_alert_inbox_pending "))
        return float(line.split()[1])

    assert await gauge() == 0
    other = await SqliteAlertInbox.open(data)
    try:
        for i in range(3):
            await other.put(receipt=f"r-{i}", source="alertmanager", body=b'{"alerts": []}', accepted=1)
        assert await gauge() == 3
        await other.finish([AlertReceipt("r-0", "alertmanager", 1, 0.0, outcomes=[{"dropped": "test"}])])
        assert await gauge() == 2
    finally:
        await other.close()


async def test_work_in_flight_counts_acked_requests_until_their_work_is_done(server: DecklogServer) -> None:
    """Held slots make the next request's work wait: it is acknowledged, counted, and done once a slot frees."""
    deps = server.parts.slack.deps
    for _ in range(4):
        await deps.work_slots.acquire()
    try:
        await server.sandbox.run_command("U0ALICE", "C0GENERAL", "declare Waiting for a slot")
        await eventually(lambda: deps.work_in_flight == 1, what="the declaration's work counted while it waits")
        assert server.parts.slack_out.sender.stats.posts == 0
    finally:
        for _ in range(4):
            deps.work_slots.release()
    await eventually(lambda: deps.work_in_flight == 0, what="the work done")
    await eventually(lambda: server.parts.slack_out.sender.stats.posts >= 1, what="the header posted")


async def test_unknown_routes_and_methods_get_json_errors(server: DecklogServer) -> None:
    status, body, _ = await get(server, "/nope")
    assert status == 404 and "error" in json.loads(body)
    status, body, _ = await get(server, "/healthz", method="POST")
    assert status == 405 and "error" in json.loads(body)


async def test_an_unexpected_error_is_logged_and_the_person_sees_a_reference(
    make_server: ServerFactory, monkeypatch: Any, caplog: Any
) -> None:
    async def broken(self: CommandRunner, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(CommandRunner, "run", broken)
    server = await make_server()
    await server.sandbox.run_command("U0ALICE", "C0GENERAL", "list")
    reply = await eventually(
        lambda: [r for r in server.sandbox.server.responses if "ref `" in r.body.get("text", "")],
        what="an ephemeral reply with a reference",
    )
    ref = reply[0].body["text"].split("ref `")[1].split("`")[0]
    assert reply[0].body.get("response_type") == "ephemeral" and "disk on fire" not in reply[0].body["text"]
    assert any(ref in record.getMessage() for record in caplog.records)


async def test_check_mark_and_cross_reactions_answer_a_suggestion(server: DecklogServer) -> None:
    fake = server.sandbox
    await fake.run_command("U0ALICE", "C0GENERAL", "declare Reaction feedback")
    scope = "incident/reaction-feedback"

    async def thread() -> Any:
        from decklog.core.errors import NotFound

        try:
            return (await server.runtime.store.get_state(scope)).thread
        except NotFound:  # the declaration is still on its way
            return None

    where = await eventually(thread, what="the thread")
    agent = Actor.agent("rules")
    for sid in ("s-keep", "s-drop"):
        await server.runtime.store.append(
            scope, [NewEntry.make("suggestion", agent, {"suggestion_id": sid, "text": f"try {sid}"})]
        )

    def posted(sid: str) -> Any:
        return next((m for m in fake.workspace.thread("C0GENERAL", where.ts) if f"try {sid}" in m.text), None)

    keep = await eventually(lambda: posted("s-keep"))
    drop = await eventually(lambda: posted("s-drop"))
    await fake.add_reaction("U0BOB", "C0GENERAL", keep.ts, "white_check_mark")
    await fake.add_reaction("U0BOB", "C0GENERAL", drop.ts, "x")

    async def verdicts() -> dict[str, str]:
        found = await server.runtime.store.read(scope, kinds=["suggestion_feedback"])
        return {e.payload.suggestion_id: e.payload.verdict for e in found}  # type: ignore[attr-defined]

    assert await eventually(lambda: _both(verdicts)) == {"s-keep": "accepted", "s-drop": "dismissed"}


async def _both(verdicts: Any) -> Any:
    found = await verdicts()
    return found if len(found) == 2 else None


def test_the_dockerfile_runs_serve_as_a_non_root_user_with_a_data_volume_and_a_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "USER decklog" in text and "useradd" in text
    assert 'VOLUME ["/data"]' in text and "DECKLOG_DATA_DIR=/data" in text
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert 'ENTRYPOINT ["decklog", "serve"]' in text


def test_the_dockerfile_is_multi_stage_and_installs_decklog_from_a_wheel() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    froms = [line for line in lines if line.startswith("FROM ")]
    assert len(froms) == 2 and froms[0].endswith(" AS build") and " AS " not in froms[1]
    final = lines[lines.index(froms[1]) :]
    run = "\n".join(final)
    assert "COPY --from=build /wheels /wheels" in final
    assert "pip install --no-index --find-links /wheels decklog" in run
    assert not [line for line in lines if "pip install" in line and (" -e " in line or "--editable" in line)]
    # the final stage has no source tree: only the installed package (package data found by importlib.resources)
    assert not [line for line in final if line.startswith("COPY ") and "--from=build" not in line]
    user = final.index("USER decklog")
    assert user < final.index('ENTRYPOINT ["decklog", "serve"]')
    assert "DECKLOG_HOST=0.0.0.0" in run
    assert not [line for line in lines if "DECKLOG_SANDBOX_PUBLIC" in line and not line.startswith("#")]  # no opt-in
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "data", ".git", "tests"} <= set(ignored)


def test_the_image_has_every_file_it_copies() -> None:
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            for name in line.split()[1:-1]:
                assert (ROOT / name).exists(), name


async def test_stopping_finishes_acknowledged_slack_work_first(make_server: ServerFactory, tmp_path: Path) -> None:
    """Slack does not resend what was acked: a stopping server lets queued work finish before closing the log."""
    data_dir = tmp_path / "kept"
    server = await make_server(data_dir=data_dir)
    deps = server.parts.slack.deps
    for _ in range(4):
        await deps.work_slots.acquire()
    await server.sandbox.run_command("U0ALICE", "C0GENERAL", "declare Acked before the stop")
    await eventually(lambda: deps.work_in_flight == 1, what="the work queued behind the held slots")
    stopping = asyncio.create_task(server.stop())
    await eventually(lambda: server._stopped, what="the stop under way")
    for _ in range(4):
        deps.work_slots.release()
    await asyncio.wait_for(stopping, 20)
    assert deps.work_in_flight == 0
    again = await make_server(data_dir=data_dir)
    assert [str(s) for s in await again.runtime.store.scope_ids()] == ["incident/acked-before-the-stop"]
