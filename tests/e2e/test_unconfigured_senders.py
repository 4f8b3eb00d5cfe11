"""A sender that is not configured gets no rows (bot/topics.py), and ``decklog doctor`` lists only real work.

Without a PagerDuty key, a tracker or ``[[webhooks]]``, ``decklog serve`` writes no ``paging``, ``trackers`` or
``webhooks`` rows, so a resolved incident leaves nothing pending. A ``decklog`` command cannot know the server's
configuration and still writes rows for every topic: ``doctor`` counts those in one line per topic instead of
listing every incident, and the server marks them done (core/outbox/unconfigured.py). With the sender configured,
its rows are written as before.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from decklog.bot.config import load_config
from decklog.bot.settings import Settings, example_config_path
from decklog.bot.topics import server_topic_kinds, unconfigured_topics
from decklog.core.entries import Actor
from tests.conftest import ServerFactory, eventually

ROOT = Path(__file__).resolve().parents[2]
ALICE = Actor.human("U0ALICE", "alice")
CONFIG = example_config_path()


def cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_"))}
    env.update({"DECKLOG_DATA_DIR": str(data), "DECKLOG_CONFIG": str(CONFIG), "PYTHONPATH": str(ROOT)})
    done = subprocess.run(
        [sys.executable, "-m", "decklog.bot.cli", *args],
        cwd=str(data.parent),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def topics_with_rows(data: Path, scope: str) -> set[str]:
    path = data / "scopes" / (scope.replace("/", "~") + ".db")
    with closing(sqlite3.connect(path)) as db:
        return {r[0] for r in db.execute("SELECT DISTINCT topic FROM outbox")}


def pending_lines(doctor: str) -> list[str]:
    return [line for line in doctor.splitlines() if " pending " in line and not line.startswith("inbox")]


async def test_the_server_writes_no_rows_for_unconfigured_senders_and_doctor_lists_nothing(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    server = await make_server(data_dir=data, config=load_config(CONFIG))
    service = server.runtime.service
    resolved = str((await service.declare(title="Checkout errors", actor=ALICE, severity=2)).state.scope)
    await service.record(resolved, "message", {"text": "rolling back", "channel": "C0GENERAL", "ts": "1.1"}, ALICE)
    await service.set_status(resolved, "resolved", ALICE, summary="rolled back")
    still_open = str((await service.declare(title="Search slow", actor=ALICE, severity=3)).state.scope)
    await service.set_status(still_open, "identified", ALICE)
    await server.runtime.dispatcher.idle(timeout=60)
    for scope in (resolved, still_open):
        assert (await server.runtime.store.outbox_summary(scope)).pending == {}
    await server.stop()
    # an open incident keeps its delivered rows: none for a sender that is not configured was ever written
    written = topics_with_rows(data, still_open)
    assert {"index", "slack", "changes"} <= written and not written & {"paging", "trackers", "webhooks"}, written
    doctor = cli(data, "doctor").stdout
    assert pending_lines(doctor) == [] and "2 scopes; 0 pending, 0 parked outbox rows" in doctor, doctor
    assert "paging" not in doctor and "webhooks" not in doctor


async def test_rows_a_command_wrote_for_an_unconfigured_sender_are_counted_once_and_done_by_the_server(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    scope = cli(data, "declare", "--title", "Resolved by a command").stdout.splitlines()[0]
    cli(data, "append", scope, "status_changed", "--json", '{"status": "resolved", "previous": "investigating"}')
    assert "paging" in topics_with_rows(data, scope)  # a command writes rows for every topic
    doctor = cli(data, "doctor").stdout
    assert pending_lines(doctor) and not any(" paging " in line for line in pending_lines(doctor)), doctor
    assert "paging: 1 rows in 1 scopes for a sender that is not configured" in doctor, doctor
    server = await make_server(data_dir=data, config=load_config(CONFIG))

    async def paging_done() -> bool:
        return "paging" not in (await server.runtime.store.outbox_summary(scope)).pending

    await eventually(paging_done, timeout=30, what="the server's boot sweep marks the paging row done")
    await server.runtime.dispatcher.idle(timeout=60)
    await server.stop()
    assert "paging:" not in cli(data, "doctor").stdout


def test_a_configured_sender_gets_its_rows() -> None:
    config = load_config(CONFIG)
    nothing = unconfigured_topics(Settings.model_validate({}), config)
    assert set(nothing) == {"paging", "trackers", "webhooks"}
    assert server_topic_kinds(nothing)["paging"] == () and server_topic_kinds({})["paging"] == ("status_changed",)
    paged = Settings.model_validate({"DECKLOG_PAGERDUTY_ROUTING_KEY": "R0UTINGKEY0123456789012345678901"})
    assert "paging" not in unconfigured_topics(paged, config)
    github = Settings.model_validate({"DECKLOG_GITHUB_REPO": "acme/ops", "DECKLOG_GITHUB_TOKEN": "t"})
    assert "trackers" not in unconfigured_topics(github, config)
    hooked = config.model_copy(update={"webhooks": (object(),)})
    assert "webhooks" not in unconfigured_topics(Settings.model_validate({}), hooked)
