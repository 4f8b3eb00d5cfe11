"""The index contract (``IndexPort``), run on SQLite (index.db, FTS5) and PostgreSQL (tsvector + GIN).

Entries and states come from a real log (the in-memory backend); each test feeds them to the index the way
``IndexSender`` does (``apply``) and checks listing, routing, fingerprints, inbound dedup, subscriptions, search,
rebuild and counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.clock import ManualClock, iso
from core.entries import Actor, NewEntry
from core.errors import Conflict
from core.index import Index, fingerprints
from core.index_postgres import PostgresIndex
from core.insights import read_milestones
from core.store import MemoryLogStore
from core.store import postgres_schema as pg

ALICE = Actor.human("U0ALICE", "alice")
OpenIndex = Callable[[], Awaitable[Index]]


@pytest.fixture(params=["sqlite", "postgresql"])
async def open_index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenIndex]:
    """``open_index()`` → an index; every index it makes shares one storage (a second one is another replica)."""
    executor = ThreadPoolExecutor(4)
    made: list[Index] = []
    engines: list[Any] = []

    async def make() -> Index:
        if request.param == "sqlite":
            index: Index = Index(tmp_path / "index.db", executor)
        else:
            engine = pg.make_engine(request.getfixturevalue("pg_url"))
            engines.append(engine)
            index = PostgresIndex(engine, executor)
        await index.open()
        made.append(index)
        return index

    yield make
    for index in made:
        await index.close()
    for engine in engines:
        engine.dispose()
    executor.shutdown()


@pytest.fixture
async def index(open_index: OpenIndex) -> Index:
    return await open_index()


async def feed(index: Index, log: MemoryLogStore, scope: str) -> None:
    await index.apply(await log.get_state(scope), await log.read(scope))


async def declared(log: MemoryLogStore, scope: str, title: str, *, key: str | None = None, **extra: Any) -> None:
    payload = {"title": title, "severity": 2, **extra}
    await log.append(scope, [NewEntry.make("declared", ALICE, payload)], create=True, idempotency_key=key)


def msg(text: str, **extra: Any) -> NewEntry:
    return NewEntry.make("message", ALICE, {"text": text, **extra})


def obs(fingerprint: str, status: str = "firing", service: str = "api") -> NewEntry:
    payload = {"text": f"alert {fingerprint}", "fingerprint": fingerprint, "alert_status": status, "service": service}
    return NewEntry.make("observation", Actor.system("alerts"), payload)


async def test_updated_since_lists_every_scope_touched_since_a_time_however_old_or_many(index: Index) -> None:
    """The lifecycle job and the periodic sweep find their scopes by ``updated_since`` with no cap, so an incident
    declared long ago and touched now is found among any number of newer ones."""
    clock = ManualClock()
    log = MemoryLogStore(clock=clock)
    await declared(log, "incident/old", "Declared first")
    clock.advance(hours=1)
    for i in range(5):
        await declared(log, f"incident/new-{i}", f"Newer {i}")
    since = iso(clock.advance(minutes=10))
    await log.append("incident/old", [msg("still here")])  # the oldest, touched after ``since``
    for scope in ["incident/old"] + [f"incident/new-{i}" for i in range(5)]:
        await feed(index, log, scope)
    assert [r.id for r in await index.list_scopes(updated_since=since, limit=None)] == ["incident/old"]
    assert len(await index.list_scopes(limit=None)) == 6
    assert [r.id for r in await index.list_scopes(limit=2)] == ["incident/new-0", "incident/new-1"]


async def test_reservations_never_reuse_an_id(index: Index) -> None:
    first = await index.reserve_scope("incident", "db-down", exact=False)
    second = await index.reserve_scope("incident", "db-down", exact=False)
    third = await index.reserve_scope("incident", "db-down", exact=False, on_disk=lambda s: s.endswith("-3"))
    assert [str(first), str(second), str(third)] == ["incident/db-down", "incident/db-down-2", "incident/db-down-4"]
    with pytest.raises(Conflict):
        await index.reserve_scope("incident", "db-down", exact=True)
    assert await index.list_scopes() == []  # reserved only: not listed
    assert await index.counts() == {"reserved": 3}


async def test_an_inbound_key_reserves_once(index: Index) -> None:
    one = await index.reserve_scope("incident", "x", exact=False, inbound_key="slack:Ev1")
    again = await index.reserve_scope("incident", "x", exact=False, inbound_key="slack:Ev1")
    assert one == again
    assert await index.inbound_scope("slack:Ev1") == str(one)
    assert await index.inbound_scope("slack:Ev2") is None


async def test_racing_replicas_reserve_distinct_ids(open_index: OpenIndex) -> None:
    one, two = await open_index(), await open_index()
    got = await asyncio.gather(*(ix.reserve_scope("incident", "race", exact=False) for ix in (one, two) * 4))
    assert len({str(s) for s in got}) == 8


async def test_apply_lists_scopes_with_filters(index: Index) -> None:
    log = MemoryLogStore()
    await declared(log, "incident/a", "Payments 5xx")
    await log.append("incident/a", [obs("fp1", service="payments")])
    await declared(log, "incident/b", "Search slow")
    await log.append("incident/b", [NewEntry.make("status_changed", ALICE, {"status": "resolved"})])
    for scope in ("incident/a", "incident/b"):
        await feed(index, log, scope)
    rows = {r.id: r for r in await index.list_scopes()}
    assert set(rows) == {"incident/a", "incident/b"}
    assert rows["incident/a"].title == "Payments 5xx" and rows["incident/a"].is_open
    assert [r.id for r in await index.list_scopes(open_only=True)] == ["incident/a"]
    assert [r.id for r in await index.list_scopes(status="resolved")] == ["incident/b"]
    assert [r.id for r in await index.list_scopes(text="PAYMENTS")] == ["incident/a"]
    assert [r.id for r in await index.list_scopes(service="payments")] == ["incident/a"]
    assert await index.list_scopes(kind="change") == []
    got = await index.get("incident/a")
    assert got is not None and got.version == 2 and got.to_json()["id"] == "incident/a"
    assert await index.get("incident/zzz") is None
    assert await index.unresolved_incidents() == ["incident/a"]
    open_status = (await log.get_state("incident/a")).status
    assert await index.counts() == {open_status: 1, "resolved": 1}


async def test_apply_is_idempotent_by_seq(index: Index) -> None:
    log = MemoryLogStore()
    await declared(log, "incident/a", "Cache stampede")
    await log.append("incident/a", [msg("restarting the cache nodes")])
    for _ in range(3):
        await feed(index, log, "incident/a")
    assert await index.position("incident/a") == 2
    hits = await index.search("cache nodes")  # the declaration's title says "cache" too
    assert sorted((h.scope, h.seq) for h in hits) == [("incident/a", 1), ("incident/a", 2)]


async def test_routes_threads_and_channels(index: Index) -> None:
    log = MemoryLogStore()
    await declared(log, "incident/a", "A")
    await log.append("incident/a", [NewEntry.make("thread_linked", Actor.system(), {"channel": "C1", "ts": "1.5"})])
    await declared(log, "incident/b", "B")
    link = {"channel": "C2", "dedicated_channel": True, "ts": "2.5"}
    await log.append("incident/b", [NewEntry.make("thread_linked", Actor.system(), link)])
    for scope in ("incident/a", "incident/b"):
        await feed(index, log, scope)
    assert await index.route("C1", "1.5") == "incident/a"
    assert await index.route("C1", "9.9") is None
    assert await index.route("C2", "7.7") == "incident/b"  # a dedicated channel routes every thread
    await index.add_route("slack:C3", "incident/a")
    assert await index.route("C3") == "incident/a"
    await index.add_route("slack:C3", "incident/b")
    assert await index.route("C3") == "incident/b"
    row = await index.get("incident/a")
    assert row is not None and (row.thread_channel, row.thread_ts) == ("C1", "1.5")


async def test_fingerprints_route_to_the_open_scope(index: Index) -> None:
    log = MemoryLogStore()
    await declared(log, "incident/a", "A")
    await log.append("incident/a", [obs("fp1")])
    await feed(index, log, "incident/a")
    assert await index.open_scope_for_fingerprint("fp1") == "incident/a"
    await log.append("incident/a", [NewEntry.make("status_changed", ALICE, {"status": "resolved"})])
    await feed(index, log, "incident/a")
    assert await index.open_scope_for_fingerprint("fp1") is None
    await index.reserve_scope("incident", "b", exact=True)
    await index.claim_fingerprint("fp1", "incident/b", "api")
    assert await index.open_scope_for_fingerprint("fp1") == "incident/b"  # reserved counts as open
    assert await index.open_scope_for_fingerprint("fp2") is None


async def test_subscriptions(index: Index) -> None:
    await index.subscribe("incident/a", "agents", 3)
    await index.subscribe("incident/a", "actions")
    assert await index.subscribers("incident/a") == {"agents": 3, "actions": 0}
    assert await index.position("incident/a", "agents") == 3
    await index.subscribe("incident/a", "agents", 1)  # subscribe sets, it does not only move forward
    assert await index.position("incident/a", "agents") == 1
    assert await index.subscribers("incident/zzz") == {}


async def test_search_ranks_snippets_and_excludes(index: Index) -> None:
    log = MemoryLogStore()
    await declared(log, "incident/a", "A")
    await log.append("incident/a", [msg("the payments database failed over to the replica"), msg("unrelated")])
    await declared(log, "incident/b", "B")
    await log.append("incident/b", [msg("payments were slow, payments recovered"), obs("fp9", service="ledger")])
    for scope in ("incident/a", "incident/b"):
        await feed(index, log, scope)
    hits = await index.search("payments")
    assert {(h.scope, h.seq) for h in hits} == {("incident/a", 2), ("incident/b", 2)}
    assert all("[payments]" in h.snippet.lower() for h in hits), hits
    assert [h.rank for h in hits] == sorted(h.rank for h in hits)  # best first, lower rank is better
    assert [(h.scope, h.kind) for h in await index.search("ledger")] == [("incident/b", "observation")]
    assert [h.scope for h in await index.search("payments", exclude_scope="incident/a")] == ["incident/b"]
    assert await index.search("payments", limit=1) != []
    assert len(await index.search("payments", limit=1)) == 1
    assert await index.search("'; DROP TABLE x --") == []
    assert await index.search("") == []
    assert await index.search("nothing-matches-this") == []


async def test_changes_on_services(index: Index) -> None:
    log = MemoryLogStore()
    await declared(log, "change/r1", "Deploy api", services=["api"])
    await feed(index, log, "change/r1")
    row = await index.get("change/r1")
    assert row is not None
    at = (await log.read("change/r1"))[0].at
    found = await index.changes_on(["api", "web"], at - timedelta(minutes=5))
    assert [(r.id, when) for r, when in found] == [("change/r1", at)]
    assert await index.changes_on(["web"], at - timedelta(minutes=5)) == []
    assert await index.changes_on(["api"], at + timedelta(minutes=5)) == []


async def test_rebuild_replaces_everything(index: Index) -> None:
    log = MemoryLogStore()
    await declared(log, "incident/a", "A", key="slack:Ev7")
    await log.append("incident/a", [msg("disk full on node-3")])
    await index.reserve_scope("incident", "stale", exact=True)
    await index.add_route("slack:C9", "incident/stale")
    await index.rebuild([(await log.get_state("incident/a"), await log.read("incident/a"))])
    assert [r.id for r in await index.list_scopes()] == ["incident/a"]
    assert await index.route("C9") is None
    assert await index.counts() == {(await log.get_state("incident/a")).status: 1}
    assert await index.inbound_scope("slack:Ev7") == "incident/a"
    assert [h.seq for h in await index.search("disk")] == [2]
    assert await index.position("incident/a") == 2


async def test_a_batch_of_repeats_keeps_the_last_observation_of_each_fingerprint(index: Index) -> None:
    """One apply of many observations (an alert storm's batch): each fingerprint's row is its last observation's,
    and a milestones row written once stays right when later applies skip rewriting it."""
    log = MemoryLogStore()
    await declared(log, "incident/storm", "Storm")
    await log.append("incident/storm", [obs("fp1"), obs("fp2", service="db"), obs("fp1"), obs("fp1", "resolved")])
    await feed(index, log, "incident/storm")
    await log.append("incident/storm", [obs("fp2", "resolved", service="db"), obs("fp2", service="db")])
    await feed(index, log, "incident/storm")

    def rows(conn: Any) -> dict[str, tuple[str, str, str]]:
        q = sa.select(fingerprints.c.fingerprint, fingerprints.c.scope, fingerprints.c.status, fingerprints.c.service)
        return {r[0]: (r[1], r[2], r[3]) for r in conn.execute(q)}

    assert await index.file.read(rows) == {
        "fp1": ("incident/storm", "resolved", "api"),
        "fp2": ("incident/storm", "firing", "db"),
    }
    [row] = await index.file.read(lambda conn: read_milestones(conn, None))
    assert row.status == (await log.get_state("incident/storm")).status != "resolved"
    await log.append("incident/storm", [NewEntry.make("status_changed", ALICE, {"status": "resolved"})])
    await feed(index, log, "incident/storm")
    [row] = await index.file.read(lambda conn: read_milestones(conn, None))
    assert row.status == "resolved" and row.ttr is not None


async def test_a_fork_never_routes_and_is_never_an_open_incident(index: Index) -> None:
    """Issue 31: a fork copies its source's thread, messages and alerts; applied after the source (the CLI's fork)
    or before it (a rebuild in any order), it takes none of the source's routes or fingerprints, and it is listed
    but never offered as an open incident."""
    from core.fork import copies

    log = MemoryLogStore()
    await declared(log, "incident/a", "A", services=["api"])
    link = NewEntry.make("thread_linked", Actor.system(), {"channel": "C1", "ts": "1.5"})
    await log.append("incident/a", [link, msg("a reply", channel="C1", ts="1.6"), obs("fp1")])
    source = await log.read("incident/a")
    await log.append("incident/a-fork-1", copies(list(source), "incident/a", len(source)), create=True)
    items = [(await log.get_state(s), await log.read(s)) for s in ("incident/a-fork-1", "incident/a")]
    for rebuild in (False, True):
        if rebuild:
            await index.rebuild(items)
        else:
            for scope in ("incident/a", "incident/a-fork-1"):
                await feed(index, log, scope)
        assert await index.route("C1", "1.5") == "incident/a"
        assert await index.route("C1", "1.6") == "incident/a"
        assert await index.open_scope_for_fingerprint("fp1") == "incident/a"
        assert await index.last_scope_for_fingerprint("fp1") == "incident/a"
        assert [r.id for r in await index.list_scopes(open_only=True)] == ["incident/a"]
        assert [r.id for r in await index.list_scopes(kind="incident", service="api", open_only=True)] == ["incident/a"]
        assert await index.unresolved_incidents() == ["incident/a"]
        fork = await index.get("incident/a-fork-1")
        assert fork is not None and fork.forked_from == "incident/a" and not fork.is_open
        assert sorted(r.id for r in await index.list_scopes()) == ["incident/a", "incident/a-fork-1"]


async def test_an_index_made_before_forks_were_kept_out_gets_the_column(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old" / "index.db"
    path.parent.mkdir()
    with sqlite3.connect(path) as conn:  # the scopes table as older decklogs made it
        conn.execute(
            "CREATE TABLE scopes (id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, title VARCHAR NOT NULL DEFAULT '', "
            "status VARCHAR NOT NULL DEFAULT 'reserved', severity INTEGER, services TEXT NOT NULL DEFAULT '[]', "
            "created_at VARCHAR NOT NULL DEFAULT '', updated_at VARCHAR NOT NULL DEFAULT '', "
            "resolved_at VARCHAR NOT NULL DEFAULT '', version INTEGER NOT NULL DEFAULT 0, "
            "thread_channel VARCHAR NOT NULL DEFAULT '', thread_ts VARCHAR NOT NULL DEFAULT '', "
            "permalink VARCHAR NOT NULL DEFAULT '', pending_approvals INTEGER NOT NULL DEFAULT 0, "
            "reserved_at FLOAT NOT NULL DEFAULT 0)"
        )
        conn.execute("INSERT INTO scopes (id, kind, status) VALUES ('incident/old', 'incident', 'investigating')")
    with ThreadPoolExecutor(1) as executor:
        index = Index(path, executor)
        await index.open()
        try:
            assert [r.id for r in await index.list_scopes(open_only=True)] == ["incident/old"]
        finally:
            await index.close()
