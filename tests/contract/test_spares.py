"""Spare scope files: made ahead of time, handed over by rename + link, never shared by two scopes."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.schema import CreateTable

from decklog.core.entries import Actor
from decklog.core.ids import ScopeId
from decklog.core.store.sqlite import schema as t
from decklog.core.store.sqlite.log_store import SqliteLogStore
from decklog.core.store.sqlite.spares import STALE_S, SpareFiles
from tests.conftest import ServerFactory, eventually
from tests.store_contract import SCOPE, declare, message, read_all

LAYOUT = t.layout_version(t.ddl())


def spares_in(directory: Path, keep: int = 2) -> SpareFiles:
    return SpareFiles(directory / "spare", ddl=t.ddl(), user_version=LAYOUT, keep=keep)


def catalogue(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY 1, 2")
        return [(str(a), str(b)) for a, b in rows]


def test_a_spare_has_exactly_the_schema_create_all_makes(tmp_path: Path) -> None:
    spares = spares_in(tmp_path, keep=1)
    assert spares.fill() == 1
    target = tmp_path / "made.db"
    assert spares.take(target)
    reference = tmp_path / "reference.db"
    engine = sa.create_engine(f"sqlite:///{reference}")
    t.metadata.create_all(engine)
    engine.dispose()
    assert catalogue(target) == catalogue(reference)
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LAYOUT
        assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 0
    assert not list((tmp_path / "spare").glob("*-wal"))


def test_taking_moves_one_spare_and_leaves_no_claim(tmp_path: Path) -> None:
    spares = spares_in(tmp_path, keep=2)
    spares.fill()
    assert spares.take(tmp_path / "a.db")
    names = sorted(p.name for p in (tmp_path / "spare").iterdir())
    assert len(names) == 1 and names[0].startswith("spare-")
    assert (tmp_path / "a.db").stat().st_nlink == 1
    assert spares.fill() == 1


def test_taking_never_replaces_an_existing_file(tmp_path: Path) -> None:
    spares = spares_in(tmp_path, keep=1)
    spares.fill()
    target = tmp_path / "existing.db"
    target.write_bytes(b"somebody's scope")
    assert not spares.take(target)
    assert target.read_bytes() == b"somebody's scope"
    assert len(list((tmp_path / "spare").glob("spare-*.db"))) == 1  # given back


def test_without_spares_take_says_so(tmp_path: Path) -> None:
    assert not spares_in(tmp_path).take(tmp_path / "x.db")
    assert not (tmp_path / "x.db").exists()


def test_racing_takers_each_get_a_different_file_or_none(tmp_path: Path) -> None:
    """Several "processes" (separate SpareFiles on one directory) reach for three spares at once."""
    spares_in(tmp_path, keep=3).fill()
    takers = [spares_in(tmp_path) for _ in range(8)]
    results: dict[int, bool] = {}
    start = threading.Barrier(len(takers))

    def take(i: int) -> None:
        start.wait()
        results[i] = takers[i].take(tmp_path / f"scope-{i}.db")

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(takers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [i for i, ok in results.items() if ok]
    assert len(won) == 3
    inodes = {(tmp_path / f"scope-{i}.db").stat().st_ino for i in won}
    assert len(inodes) == 3  # no two scopes share a file
    assert all(not (tmp_path / f"scope-{i}.db").exists() for i in results if i not in won)
    assert not list((tmp_path / "spare").iterdir())


def test_fill_clears_stale_leftovers_of_crashed_claims_only(tmp_path: Path) -> None:
    spares = spares_in(tmp_path, keep=0)
    spares.fill()
    directory = tmp_path / "spare"
    old, fresh = directory / "claim-1-aaaa.db", directory / "tmp-bbbb.db"
    old.write_bytes(b"")
    fresh.write_bytes(b"")
    past = time.time() - STALE_S - 5
    os.utime(old, (past, past))
    spares.fill()
    assert not old.exists() and fresh.exists()


async def test_the_store_declares_into_a_spare_and_tops_the_spares_up(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path, topics=("index",), spare_files=2)
    try:
        store.spares.fill()
        await declare(store)
        await store.append(SCOPE, [message("on a spare file")])
        assert store.spares.taken == 1
        assert [e.kind for e in await read_all(store)] == ["declared", "message"]
        assert (await store.verify(SCOPE)).ok
        await eventually(lambda: len(list((tmp_path / "spare").glob("spare-*.db"))) == 2, what="spares topped up")
    finally:
        await store.close()
    with sqlite3.connect(store.path_for(ScopeId.parse(SCOPE))) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 2


async def test_a_file_from_before_user_version_gets_the_current_indexes(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path, topics=("index",), spare_files=0)
    path = store.path_for(ScopeId.parse(SCOPE))
    path.parent.mkdir(parents=True)
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        for table in t.metadata.sorted_tables:
            conn.execute(CreateTable(table))  # tables only: no indexes, user_version 0 (an old file)
    engine.dispose()
    try:
        await declare(store)
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LAYOUT
    assert ("index", "entries_kind_seq") in catalogue(path)
    assert ("index", "outbox_parked") in catalogue(path)  # added with decision 128


async def test_a_started_server_has_spares_ready_for_its_first_declaration(make_server: ServerFactory) -> None:
    server = await make_server()
    spare = Path(server.settings.data_dir) / "spare"
    await eventually(lambda: len(list(spare.glob("spare-*.db"))) == server.runtime.store.spares.keep, what="spares")
    result = await server.runtime.service.declare(title="Payments 5xx", actor=Actor.human("U0ALICE", "alice"))
    assert server.runtime.store.spares.taken == 1
    assert (await server.runtime.store.verify(result.state.scope)).ok
