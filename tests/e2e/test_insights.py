"""Insights: MTTA / MTTM / MTTR and counts over incidents, from the index's ``milestones``
rows (kept in step with each scope's state), on SQLite and PostgreSQL; the API and CLI shapes; bad input."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.bot.server import DecklogServer
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, NewEntry
from decklog.core.insights import compute, percentile, summary
from decklog.core.store.memory.log_store import MemoryLogStore
from decklog.core.store.ports import IndexPort
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.index import PostgresIndex
from decklog.core.store.sqlite.index import SqliteIndex
from tests.conftest import ServerFactory, eventually
from tests.e2e.test_api import get, quiet_servers
from tests.unit.test_cli import run

ALICE = Actor.human("U0ALICE", "alice")
ALERTS = Actor.system("alerts")
START = datetime(2026, 9, 19, 3, 12, tzinfo=UTC)
SHAPE = {"incidents", "open", "resolved", "mtta_seconds", "mttm_seconds", "mttr_seconds"}


@pytest.fixture(params=["sqlite", "postgresql"])
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[IndexPort]:
    executor = ThreadPoolExecutor(2)
    engine = None
    if request.param == "sqlite":
        idx: IndexPort = SqliteIndex(tmp_path / "index.db", executor)
    else:
        engine = pg.make_engine(request.getfixturevalue("pg_url"))
        idx = PostgresIndex(engine, executor)
    await idx.open()
    yield idx
    await idx.close()
    if engine is not None:
        engine.dispose()
    executor.shutdown()


def obs(fingerprint: str, status: str, *, source: str, service: str) -> NewEntry:
    payload = {
        "text": f"alert {fingerprint} {status}",
        "fingerprint": fingerprint,
        "alert_status": status,
        "source": source,
        "service": service,
    }
    return NewEntry.make("observation", ALERTS, payload)


def status(value: str, actor: Actor = ALICE) -> NewEntry:
    return NewEntry.make("status_changed", actor, {"status": value})


async def story(index: IndexPort) -> tuple[MemoryLogStore, ManualClock]:
    """Four incidents and a change; three declared in the last 30 days (times relative to each declaration):

    A  SEV1 payments, by alertmanager; alice writes at +120 s, mitigated +600 s, resolved +1200 s
    B  SEV2 search, declared by alice (acknowledged at once), still open
    C  SEV1 payments, by grafana; the source acknowledges at +60 s, resolved at +300 s (never "mitigated")
    D  declared 40 days before the others: outside a 30-day window
    """
    clock = ManualClock(START - timedelta(days=40))
    log = MemoryLogStore(clock=clock)

    async def at(scope: str, entries: list[NewEntry], offset: float, *, base: datetime) -> None:
        clock._now = base + timedelta(seconds=offset)
        await log.append(scope, entries, create=True)
        await index.apply(await log.get_state(scope), await log.read(scope))

    old = START - timedelta(days=40)
    await at("incident/old", [NewEntry.make("declared", ALICE, {"title": "Old one", "severity": 3})], 0, base=old)
    await at("incident/old", [status("resolved")], 30, base=old)

    a_declared = NewEntry.make("declared", ALERTS, {"title": "Payments 5xx", "severity": 1, "services": ["payments"]})
    await at(
        "incident/a", [a_declared, obs("fp-a", "firing", source="alertmanager", service="payments")], 0, base=START
    )
    await at("incident/a", [NewEntry.make("message", ALICE, {"text": "looking"})], 120, base=START)
    await at("incident/a", [status("mitigated")], 600, base=START)
    await at("incident/a", [status("resolved")], 1200, base=START)

    b = START + timedelta(hours=1)
    b_declared = NewEntry.make("declared", ALICE, {"title": "Search slow", "severity": 2, "services": ["search"]})
    await at("incident/b", [b_declared], 0, base=b)

    c = START + timedelta(hours=2)
    c_declared = NewEntry.make("declared", ALERTS, {"title": "Payments latency", "severity": 1})
    await at("incident/c", [c_declared, obs("fp-c", "firing", source="grafana", service="payments")], 0, base=c)
    await at("incident/c", [obs("fp-c", "acknowledged", source="grafana", service="payments")], 60, base=c)
    await at("incident/c", [status("resolved", ALERTS)], 300, base=c)

    change = NewEntry.make("declared", ALERTS, {"title": "r1", "severity": None})
    await at("change/r1", [change], 10, base=c)
    clock._now = c + timedelta(hours=1)
    return log, clock


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([0.0, 60.0, 120.0], 0.5) == 60.0
    assert percentile([0.0, 60.0, 120.0], 0.9) == pytest.approx(108.0)
    assert percentile([5.0], 0.9) == 5.0
    assert summary([]) is None
    assert summary([300.0, 600.0]) == {"p50": 450.0, "p90": 570.0, "mean": 450.0}


async def test_milestones_counts_and_breakdowns(index: IndexPort) -> None:
    _log, clock = await story(index)
    body = await compute(index, since_days=30, now=clock.now().timestamp())
    assert set(body) >= SHAPE
    assert (body["incidents"], body["open"], body["resolved"]) == (3, 1, 2)
    assert body["mtta_seconds"] == {"p50": 60.0, "p90": 108.0, "mean": 60.0}  # A 120, B 0, C 60
    assert body["mttm_seconds"] == {"p50": 450.0, "p90": 570.0, "mean": 450.0}  # A 600, C 300 (resolved)
    assert body["mttr_seconds"] == {"p50": 750.0, "p90": 1110.0, "mean": 750.0}  # A 1200, C 300
    assert set(body["by_severity"]) == {"SEV1", "SEV2"}
    sev1 = body["by_severity"]["SEV1"]
    assert set(sev1) == SHAPE and sev1["incidents"] == 2 and sev1["mttr_seconds"]["p50"] == 750.0
    assert body["by_severity"]["SEV2"]["mttr_seconds"] is None  # B is open: no data, null
    assert body["by_service"]["payments"]["incidents"] == 2  # C's service came from its alert
    assert body["by_service"]["search"]["mtta_seconds"] == {"p50": 0.0, "p90": 0.0, "mean": 0.0}
    assert set(body["by_source"]) == {"alertmanager", "grafana", "manual"}
    assert body["by_source"]["grafana"]["mtta_seconds"]["p50"] == 60.0

    everything = await compute(index, since_days=None, now=clock.now().timestamp())
    assert everything["incidents"] == 4  # the old one too; the change scope never


async def test_a_reopened_incident_is_open_again_and_has_no_resolution(index: IndexPort) -> None:
    log, clock = await story(index)
    clock.advance(seconds=10)
    await log.append("incident/a", [status("investigating")])
    await index.apply(await log.get_state("incident/a"), await log.read("incident/a"))
    body = await compute(index, since_days=30, now=clock.now().timestamp())
    assert (body["open"], body["resolved"]) == (2, 1)
    assert body["mttr_seconds"] == {"p50": 300.0, "p90": 300.0, "mean": 300.0}
    assert body["mttm_seconds"]["mean"] == 450.0  # mitigation stays a fact


async def test_rebuild_gives_the_same_numbers(index: IndexPort) -> None:
    log, clock = await story(index)
    now = clock.now().timestamp()
    before = await compute(index, since_days=30, now=now)
    items = [(await log.get_state(s), await log.read(s)) for s in ("incident/old", "incident/a", "incident/b")]
    items += [(await log.get_state(s), await log.read(s)) for s in ("incident/c", "change/r1")]
    await index.rebuild(items)
    assert await compute(index, since_days=30, now=now) == before


async def test_an_empty_window_has_nulls_not_zeros(index: IndexPort) -> None:
    body = await compute(index, since_days=7, now=START.timestamp())
    assert body["incidents"] == 0
    assert body["mtta_seconds"] is None and body["mttm_seconds"] is None and body["mttr_seconds"] is None
    assert body["by_severity"] == {} and body["by_service"] == {}


# -- the API and the CLI ------------------------------------------------------------------------------------------


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[DecklogServer]:
    async with quiet_servers(tmp_path) as make:
        yield await make()


async def seed(server: DecklogServer) -> None:
    svc = server.runtime.service
    await svc.declare(title="Payments 5xx", severity=1, actor=ALICE, services=["payments"])
    await svc.declare(title="Search slow", severity=3, actor=ALICE, scope="incident/search-slow")
    await svc.resolve("incident/search-slow", ALICE)

    async def indexed() -> Any:
        rows = await server.runtime.index.list_scopes()
        return len(rows) == 2 and any(r.status == "resolved" for r in rows)

    await eventually(indexed, what="the index to catch up")


async def test_api_insights_shape(server: DecklogServer) -> None:
    await seed(server)
    async with aiohttp.ClientSession() as http:
        status_, body, _ = await get(http, server, "/api/insights?since=7")
        assert status_ == 200, body
        assert SHAPE | {"by_severity", "by_service", "by_source"} <= set(body)
        assert (body["incidents"], body["open"], body["resolved"]) == (2, 1, 1)
        assert set(body["mttr_seconds"]) == {"p50", "p90", "mean"}
        assert all(isinstance(v, float) for v in body["mttr_seconds"].values())
        assert set(body["by_severity"]) == {"SEV1", "SEV3"}
        assert set(body["by_service"]["payments"]) == SHAPE
        status_, default, _ = await get(http, server, "/api/insights")
        assert status_ == 200 and default["since_days"] == 30 and default["incidents"] == 2


@pytest.mark.parametrize(
    "query",
    ["since=0", "since=-1", "since=abc", "since=1.5", "since=", "since=99999", "since=3651", "since=%00",
     "since=1&since=2", "days=3", "since=%EF%BC%91"],
)  # fmt: skip
async def test_api_insights_bad_input_is_400_with_a_reason(tmp_path: Path, query: str) -> None:
    async with quiet_servers(tmp_path) as make:
        server = await make()
        async with aiohttp.ClientSession() as http:
            status_, body, _ = await get(http, server, f"/api/insights?{query}")
    assert status_ == 400, body
    assert body["error"]


def test_cli_insights_json_and_text(tmp_path: Path) -> None:
    data = tmp_path / "data"
    empty = run(data, "insights", "--json")
    assert empty.returncode == 0, empty.stderr
    assert json.loads(empty.stdout)["mtta_seconds"] is None
    scope = run(data, "declare", "--title", "Payments 5xx", "--severity", "1").stdout.splitlines()[0]
    assert run(data, "append", scope, "status_changed", "--json", '{"status": "resolved"}').returncode == 0
    out = run(data, "insights", "--since", "7", "--json")
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert (body["incidents"], body["open"], body["resolved"]) == (1, 0, 1)
    assert body["mtta_seconds"] == {"p50": 0.0, "p90": 0.0, "mean": 0.0}  # a person declared it
    assert set(body["by_severity"]) == {"SEV1"}
    text = run(data, "insights")
    assert text.returncode == 0 and "1 incidents declared in the last 30 days" in text.stdout
    assert "MTTR" in text.stdout


@pytest.mark.parametrize("days", ["0", "abc", "-3", "4000"])
def test_cli_insights_bad_since_is_usage_error(tmp_path: Path, days: str) -> None:
    out = run(tmp_path / "data", "insights", "--since", days)
    assert out.returncode == 2
    assert "--since" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "data").exists()  # nothing written


def test_cli_insights_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    env = {"DECKLOG_DATABASE_URL": pg_url}
    scope = run(tmp_path / "d", "declare", "--title", "DB down", "--severity", "2", env=env).stdout.splitlines()[0]
    assert scope == "incident/db-down"
    out = run(tmp_path / "d", "insights", "--json", env=env)
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["incidents"] == 1 and body["open"] == 1 and set(body["by_severity"]) == {"SEV2"}


_ = ServerFactory
