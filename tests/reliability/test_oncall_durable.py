"""Escalation survives anything: real ``decklog serve`` processes, SIGKILLed between two levels of a page.

An incident a route selects pages level 1 (Alice, on call in ``primary``) by DM as it opens; every server is
SIGKILLed before level 2 is due; after the restart level 2 (Bob, ``secondary``) is paged once, not before its due
time — on SQLite with one server, and on PostgreSQL with two replicas that share the database (one page between
them: the job runs under a lease, each page is appended under its idempotency key, and one replica drains the
``oncall`` cursor). An acknowledgement then stops the escalation: no third page.

The test prints the incident's timeline (seconds from the declaration), the record the closing note quotes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.local.slack import FakeSlack
from tests.conftest import eventually
from tests.helpers import serve
from tests.helpers.log_view import read_log
from tests.helpers.pg_view import read_log_pg
from tests.helpers.serve import ALICE, APP_TOKEN, BOT_TOKEN, GENERAL, SIGNING_SECRET, start_serve

BOB = "U0BOB"
LEVEL_1_WAIT_S = (
    20  # long enough that the kill and the restart both land before level 2 falls due, even on a loaded machine
)

ONCALL_TOML = f"""
[oncall]
tick = "0.2s"

[[oncall.schedules]]
name = "primary"
[[oncall.schedules.layers]]
users = ["{ALICE}"]
rotation = "1w"
start = "2026-01-05T09:00:00Z"

[[oncall.schedules]]
name = "secondary"
[[oncall.schedules.layers]]
users = ["{BOB}"]
rotation = "1w"
start = "2026-01-05T09:00:00Z"

[[oncall.policies]]
name = "default"
[[oncall.policies.levels]]
targets = ["schedule:primary"]
after = "{LEVEL_1_WAIT_S}s"
[[oncall.policies.levels]]
targets = ["schedule:secondary"]
after = "{LEVEL_1_WAIT_S}s"

[[oncall.routes]]
policy = "default"
severity = [1, 2]
"""


def config_file(directory: Path) -> Path:
    path = directory / "decklog.oncall.toml"
    path.write_text(serve.test_config_file(directory).read_text() + ONCALL_TOML)
    return path


def page_dms(fake: FakeSlack, user: str) -> list[Any]:
    channel = fake.workspace.directory.im_with(user).id
    return [m for m in fake.workspace.messages.all(channel) if (m.metadata or {}).get("event_type") == "decklog_page"]


def incident_rows(log: dict[str, Any]) -> list[Any]:
    return [r for f in log.values() if f.scope.startswith("incident/") for r in f.rows]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_sigkill_between_two_levels_pages_level_two_once_at_its_time(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else ""
    env = {"DECKLOG_CONFIG": str(config_file(tmp_path)), **({"DECKLOG_DATABASE_URL": url} if url else {})}
    dirs = [tmp_path / f"replica{i}" for i in range(2 if url else 1)]
    timeline: list[tuple[float, str]] = []

    def log() -> dict[str, Any]:
        return read_log_pg(url) if url else read_log(dirs[0])

    def pages() -> list[dict[str, Any]]:
        return [r.payload for r in incident_rows(log()) if r.kind == "page"]

    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake:
        replicas = [await asyncio.to_thread(start_serve, d, fake.base_url, env=env) for d in dirs]
        try:
            fake.use_http(replicas[0].events_url, SIGNING_SECRET)
            t0 = time.time()
            assert (await fake.run_command(ALICE, GENERAL, "declare Checkout is down sev1")).status == 200
            timeline.append((0.0, "declared SEV1 'Checkout is down' (/incident declare)"))
            await eventually(lambda: page_dms(fake, ALICE), timeout=30, what="level 1's DM to Alice")
            timeline.append((time.time() - t0, "level 1: DM to Alice (primary) posted"))
        finally:
            for r in replicas:
                await asyncio.to_thread(r.kill)
        killed = time.time()
        timeline.append((killed - t0, f"SIGKILL of every server ({len(replicas)})"))
        [first] = pages()
        assert (first["level"], first["target"], first["method"]) == (0, ALICE, "slack")
        due_2 = _epoch(first["due_at"]) + LEVEL_1_WAIT_S
        assert killed < due_2, "the kill must land between the two levels"
        replicas = [await asyncio.to_thread(start_serve, d, fake.base_url, env=env) for d in dirs]
        timeline.append((time.time() - t0, f"restarted ({len(replicas)} server(s))"))
        try:
            fake.use_http(replicas[0].events_url, SIGNING_SECRET)
            await eventually(lambda: page_dms(fake, BOB), timeout=60, what="level 2's DM to Bob")
            seen = time.time()
            timeline.append((seen - t0, "level 2: DM to Bob (secondary) posted"))
            assert seen >= due_2  # never before its time
            scope = next(f.scope for f in log().values() if f.scope.startswith("incident/"))
            assert (await fake.run_command(BOB, GENERAL, f"ack {scope}")).status == 200
            await eventually(
                lambda: [r for r in incident_rows(log()) if r.kind == "acknowledged"], timeout=30, what="the ack"
            )
            timeline.append((time.time() - t0, "acknowledged by Bob (/incident ack)"))
            # past the time level 1 would repeat if nothing stopped it; the job ticks every 0.2 s meanwhile
            await eventually(lambda: time.time() > due_2 + LEVEL_1_WAIT_S + 1, timeout=LEVEL_1_WAIT_S + 5)
        finally:
            for r in replicas:
                await asyncio.to_thread(r.stop)
        got = pages()
        assert [(p["level"], p["target"]) for p in got] == [(0, ALICE), (1, BOB)]
        assert len({p["key"] for p in got}) == 2
        assert len(page_dms(fake, ALICE)) == 1 and len(page_dms(fake, BOB)) == 1
        second = got[1]
        timeline.append((_epoch(second["due_at"]) - t0, f"(level 2 due_at, from the log: {second['due_at']})"))
    print(f"\ntimeline ({backend}, {len(dirs)} server(s)), seconds from the declaration:")
    for at, what in sorted(timeline):
        print(f"  +{at:6.2f}s  {what}")


def _epoch(text: str) -> float:
    from decklog.core.clock import parse_iso

    return parse_iso(text).timestamp()
