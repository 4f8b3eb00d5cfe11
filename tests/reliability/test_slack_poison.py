"""A poison Slack request (signed, stored, acknowledged, and failing every time it is processed)
is retried a bounded number of times, then parked with its error where ``decklog doctor`` shows it. It is never
replayed at boot, the server goes on with everything else, and ``decklog doctor --retry`` queues it again."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from decklog.bot.server import DecklogServer
from decklog.bot.wiring import Parts
from decklog.core.store.ports import InboxItem
from decklog.core.store.sqlite.inbox import SqliteInbox
from tests.conftest import ServerFactory, eventually
from tests.unit.test_cli import run

ALICE, BOB, GENERAL = "U0ALICE", "U0BOB", "C0GENERAL"


def rows(data_dir: Path) -> dict[str, tuple[bool, bool, int]]:
    """The inbox as another connection reads it: key → (done, parked, attempts)."""
    db = sqlite3.connect(data_dir / "inbox.db")
    try:
        found = db.execute("select key, done_at, parked_at, attempts from inbox order by id").fetchall()
        return {k: (d is not None, p is not None, int(a)) for k, d, p, a in found}
    finally:
        db.close()


class Seen:
    """The intake's test hook, set before the server starts (so boot replays are seen too)."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def install(self, parts: Parts) -> None:
        assert parts.slack is not None
        parts.slack.intake.retry_delays = (0.0,)
        parts.slack.intake.before_process = self.see

    async def see(self, item: InboxItem) -> None:
        self.keys.append(item.key)


async def _poison(server: DecklogServer, event_id: str) -> Any:
    """A signed message event whose ``team`` is a number: Bolt cannot even read the request."""
    driver = server.sandbox.driver
    event = {"type": "message", "channel": GENERAL, "user": BOB, "text": "hi", "ts": "1799999999.000100"}
    envelope = driver.payloads.event_callback(event, event_id=event_id)
    envelope["team"] = 5
    return await driver.send_event_callback(envelope)


async def test_a_poison_event_is_parked_shown_by_doctor_not_replayed_and_can_be_retried(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    seen = Seen()
    server = await make_server(data_dir=data, on_built=seen.install)
    out = await _poison(server, "Ev0POISON")
    assert out.status == 200  # stored, then acknowledged
    await eventually(lambda: rows(data).get("ev:Ev0POISON", (0, 0, 0))[1], what="the poison parked")
    max_attempts = server.parts.slack.intake.max_attempts
    assert seen.keys.count("ev:Ev0POISON") == 1  # processed once (its attempts in a row), never again
    assert rows(data)["ev:Ev0POISON"] == (False, True, max_attempts)
    # the server goes on: a normal command is processed after it
    await server.sandbox.run_command(ALICE, GENERAL, "declare After the poison sev3")
    await eventually(lambda: _declared(server, "incident/after-the-poison"), what="a later request processed")

    doctor = await asyncio.to_thread(run, data, "doctor")
    assert doctor.returncode == 0, doctor.stderr
    line = next((x for x in doctor.stdout.splitlines() if "ev:Ev0POISON" in x), "")
    assert "PARKED" in line and "event_callback/message" in line and "TypeError" in line, doctor.stdout
    assert f"after {max_attempts} attempts" in line
    assert "1 parked Slack requests" in doctor.stdout

    # a restart does not replay it
    await server.stop()
    seen.keys.clear()
    again = await make_server(data_dir=data, on_built=seen.install)
    assert await again.parts.slack.intake.replay() == 0
    await again.sandbox.run_command(ALICE, GENERAL, "declare After the restart sev3")
    await eventually(lambda: _declared(again, "incident/after-the-restart"), what="a request after the restart")
    assert "ev:Ev0POISON" not in seen.keys
    assert rows(data)["ev:Ev0POISON"][:2] == (False, True)

    # doctor --retry queues it again; the running server replays it (and, still poison, parks it again)
    retried = await asyncio.to_thread(run, data, "doctor", "--retry")
    assert retried.returncode == 0, retried.stderr
    assert "1 parked Slack requests queued again" in retried.stdout
    await eventually(lambda: "ev:Ev0POISON" in seen.keys, timeout=20, what="replayed")
    await eventually(lambda: rows(data)["ev:Ev0POISON"][1], what="parked again")


async def test_a_request_that_kept_stopping_the_process_is_parked_at_boot_without_running(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """Each attempt ended with the process (a request that kills it): the next start parks it instead."""
    data = tmp_path / "data"
    inbox = await SqliteInbox.open(data)
    body = {"type": "event_callback", "event_id": "Ev0KILLER", "event": {"type": "message", "channel": GENERAL}}
    assert await inbox.put(key="ev:Ev0KILLER", source="http", body=body, meta={})
    for _ in range(3):
        await inbox.attempt(key="ev:Ev0KILLER")
    await inbox.close()
    seen = Seen()
    server = await make_server(data_dir=data, on_built=seen.install)
    await eventually(lambda: rows(data)["ev:Ev0KILLER"][1], what="parked at boot")
    assert rows(data)["ev:Ev0KILLER"] == (False, True, 3)  # parked, not run a fourth time (it would be done)
    doctor = await asyncio.to_thread(run, data, "doctor")
    assert "the process stopped 3 times while processing it" in doctor.stdout, doctor.stdout
    assert server.parts.slack.intake.running == set()


async def _declared(server: DecklogServer, scope: str) -> bool:
    return scope in [str(s) for s in await server.runtime.store.scope_ids()]
