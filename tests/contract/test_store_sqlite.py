"""The SQLite backend: the storage contract, plus what only the embedded backend promises.

WAL + ``synchronous=FULL`` on the store's own connection, ``BEGIN IMMEDIATE`` for writes, group commit, a
bounded set of open scope files, and no stray files after a failed first append.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from decklog.core.entries import Entry, NewEntry
from decklog.core.errors import NotFound
from decklog.core.ids import ScopeId
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore, StorageFactory
from decklog.core.store.sqlite.factory import SqliteFactory
from decklog.core.store.sqlite.inbox import SqliteInbox
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually
from tests.store_contract import (
    SCOPE,
    TOPICS,
    LogStoreContract,
    MakeFactory,
    OpenStore,
    StorageContract,
    assert_gapless_chain,
    declare,
    declared,
    message,
    open_fds,
    read_all,
)


class TestSqliteStorage(StorageContract):
    @pytest.fixture
    def make_factory(self, tmp_path: Path) -> MakeFactory:
        def make(*, max_open: int | None = None) -> StorageFactory:
            return SqliteFactory(tmp_path) if max_open is None else SqliteFactory(tmp_path, max_open=max_open)

        return make


class TestSqliteLogStoreContractOnSpareFiles(LogStoreContract):
    """The log store's contract with every scope file handed over from the spares (core/store/sqlite/spares.py)."""

    @pytest.fixture
    async def open_store(self, tmp_path: Path) -> AsyncIterator[OpenStore]:
        made: list[SqliteLogStore] = []

        async def open_store(*, max_open: int | None = None) -> LogStore:
            options: dict[str, Any] = {} if max_open is None else {"max_open": max_open}
            store = SqliteLogStore(tmp_path, topics=TOPICS, spare_files=12, **options)
            store.spares.fill()
            made.append(store)
            return store

        yield open_store
        for store in made:
            await store.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteLogStore]:
    s = SqliteLogStore(tmp_path, topics=TOPICS)
    yield s
    await s.close()


def scope_path(store: SqliteLogStore, scope: str = SCOPE) -> Path:
    return store.path_for(ScopeId.parse(scope))


def scope_file(store: SqliteLogStore, scope: str = SCOPE) -> Any:
    """The open ``SqliteFile`` of a scope (white-box: these checks are about the SQLite plumbing)."""
    return store.file_of(scope)


# -- durability settings --------------------------------------------------------------------------------------------


async def test_scope_files_are_in_wal_mode(store: SqliteLogStore) -> None:
    await declare(store)
    with sqlite3.connect(scope_path(store)) as raw:  # journal_mode=WAL is persistent: any connection sees it
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_the_store_connection_uses_synchronous_full_and_a_busy_timeout(store: SqliteLogStore) -> None:
    await declare(store)

    def pragmas(conn: Any) -> list[int]:
        return [
            conn.exec_driver_sql(f"PRAGMA {name}").scalar() for name in ("synchronous", "busy_timeout", "foreign_keys")
        ]

    synchronous, busy_timeout, foreign_keys = await scope_file(store).read(pragmas)
    assert synchronous == 2  # FULL (NORMAL=1 loses acknowledged commits on power loss)
    assert busy_timeout >= 5_000
    assert foreign_keys == 1


async def test_writes_begin_immediate(store: SqliteLogStore) -> None:
    await declare(store)
    statements: list[str] = []
    raw = scope_file(store)._conn.connection.dbapi_connection
    raw.set_trace_callback(statements.append)
    try:
        await store.append(SCOPE, [message("traced")])
        await store.memo_put(SCOPE, "slack", "k", {"v": 1})
    finally:
        raw.set_trace_callback(None)
    begins = [s for s in statements if s.upper().startswith("BEGIN")]
    assert begins and all(s.upper() == "BEGIN IMMEDIATE" for s in begins), statements
    first_insert = next(i for i, s in enumerate(statements) if s.upper().startswith("INSERT"))
    assert statements.index("BEGIN IMMEDIATE") < first_insert


# -- group commit ---------------------------------------------------------------------------------------------------


async def test_group_commit_shares_transactions_between_concurrent_appenders(store: SqliteLogStore) -> None:
    await declare(store)
    file = scope_file(store)
    batches, requests = file.batches, file.requests
    await asyncio.gather(*(store.append(SCOPE, [message(f"p{i}")]) for i in range(64)))
    assert file.requests - requests == 64
    assert file.batches - batches < 64, "64 concurrent appenders never shared a commit"
    assert_gapless_chain(await read_all(store))


async def test_two_stores_on_one_directory_interleave_safely(tmp_path: Path) -> None:
    """The CLI and the server each open the scope file; BEGIN IMMEDIATE makes their read-modify-write safe."""
    server, cli = SqliteLogStore(tmp_path, topics=TOPICS), SqliteLogStore(tmp_path, topics=TOPICS)
    try:
        await declare(server)

        async def producer(s: SqliteLogStore, name: str) -> None:
            for i in range(30):
                await s.append(SCOPE, [message(f"{name} {i}")], idempotency_key=f"{name}:{i}")

        await asyncio.gather(
            *(producer(s, f"{tag}{k}") for tag, s in (("srv", server), ("cli", cli)) for k in range(8))
        )
        entries = await read_all(cli)
        assert len(entries) == 1 + 2 * 8 * 30
        assert_gapless_chain(entries)
        keys = [e.idempotency_key for e in entries if e.idempotency_key]
        assert len(keys) == len(set(keys)) == 480
        assert (await server.verify(SCOPE)).ok
        assert (await cli.verify(SCOPE)).ok
        # each side's cached state notices the other's writes
        assert (await server.append(SCOPE, [message("last")], expected_version=481)).entries[0].seq == 482
        assert (await cli.get_state(SCOPE)).version == 482
    finally:
        await server.close()
        await cli.close()


# -- files on disk ---------------------------------------------------------------------------------------------------


async def test_a_failed_first_append_leaves_no_file_at_all(store: SqliteLogStore) -> None:
    for attempt in (
        store.append(SCOPE, [message()], create=True),
        store.append(SCOPE, [declared()], expected_version=4, create=True),
        store.append(SCOPE, lambda state: [], create=True),
    ):
        with pytest.raises(Exception):  # noqa: B017 - the contract pins the types; here only the disk matters
            await attempt
        assert list(store.scopes_dir.glob("*")) == []
        assert store.open_files == 0


async def test_a_discarded_first_append_never_deletes_a_concurrent_declaration(store: SqliteLogStore) -> None:
    """A failed first append discards its new file, but not if a declaration committed in the meantime.

    Deterministic interleaving (white-box): hold the store's open lock as soon as the failing request has opened
    the file, so that its clean-up queues behind the lock; a good declaration then commits through the open file.
    """
    failing = asyncio.create_task(store.append(SCOPE, [message("not a declaration")], create=True))
    async with asyncio.timeout(10):
        while store.open_files == 0:
            await asyncio.sleep(0)  # no sleep(>0): take the lock before the failing request can finish
    lock = store.cache.lock
    async with lock:
        async with asyncio.timeout(10):
            while not getattr(lock, "_waiters", None):  # the failed request is now waiting to clean up
                await asyncio.sleep(0.001)
        good = await asyncio.wait_for(store.append(SCOPE, [declared()], create=True), 10)
    with pytest.raises(NotFound):
        await failing
    assert good.entries[0].seq == 1
    assert [e.kind for e in await read_all(store)] == ["declared"]
    assert await store.scope_ids() == [ScopeId.parse(SCOPE)]
    assert (await store.verify(SCOPE)).ok


@pytest.fixture
def scratch_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs when there is one: tests about file handles need no fsync, only many files."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="decklog-test-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
async def test_300_scopes_never_hold_more_than_max_open_files(scratch_dir: Path) -> None:
    store = SqliteLogStore(scratch_dir, topics=TOPICS, max_open=16)
    peak_files, peak_fds = 0, 0
    stop = asyncio.Event()

    def sample() -> None:
        nonlocal peak_files, peak_fds
        peak_files = max(peak_files, store.open_files)
        peak_fds = max(peak_fds, open_fds())

    async def sampler() -> None:
        while not stop.is_set():
            sample()
            await asyncio.sleep(0)

    await declare(store, "incident/warm-up")
    baseline_fds = open_fds()
    task = asyncio.create_task(sampler())
    try:
        for i in range(100):
            await declare(store, f"incident/seq{i}")
            sample()

        async def work(i: int) -> None:
            scope = f"incident/con{i}"
            await declare(store, scope)
            await store.append(scope, [message("m")])
            await store.read(scope)

        # 199 scopes at once: far more concurrent users than slots
        await asyncio.gather(*(work(i) for i in range(199)))
        # and reads all over the 300 existing ones
        await asyncio.gather(*(store.get_state(s) for s in await store.scope_ids()))
    finally:
        stop.set()
        await task
        await store.close()
    assert peak_files <= 16
    # per open file: a writer and a reader connection, each with the db, -wal and -shm open
    assert peak_fds - baseline_fds <= 6 * 16 + 8, (baseline_fds, peak_fds)  # unbounded: ~1,800
    reopened = SqliteLogStore(scratch_dir, topics=TOPICS, max_open=16)
    try:
        ids = await reopened.scope_ids()
        assert len(ids) == 300
        for sid in ids[::13]:
            assert (await reopened.verify(sid)).ok
    finally:
        await reopened.close()


async def test_a_full_cache_closes_idle_files_ahead_of_need_and_off_the_open_lock(tmp_path: Path) -> None:
    """Evicted files close in the background while still counted, so the next new scope finds a free slot."""
    store = SqliteLogStore(tmp_path, topics=TOPICS, max_open=8)
    try:
        for i in range(20):
            await declare(store, f"incident/s{i}")
            assert store.open_files <= 8
        await eventually(lambda: store.closing_files == 0, what="evicted files closed")
        assert len(store.open_scopes) == 7  # one slot kept free
        assert store.open_scopes[-1] == "incident/s19"  # the least recently used went first
        for i in range(20):
            assert (await store.get_state(f"incident/s{i}")).version == 1
            assert store.open_files <= 8
    finally:
        await store.close()
    assert store.closing_files == 0


async def test_opening_a_scope_while_every_slot_is_busy_waits_for_a_free_slot(tmp_path: Path) -> None:
    """With all ``max_open`` files in use, the next scope waits; it never evicts itself or exceeds the bound.
    The appends that hold the files block in their ``decide``, which must then run on workers, not on the loop."""
    store = SqliteLogStore(tmp_path, topics=TOPICS, max_open=4, threads=8, stage_on_loop=False)
    try:
        for i in range(5):
            await declare(store, f"incident/s{i}")
        gate = threading.Event()
        started = threading.Semaphore(0)

        def blocked(state: ScopeState) -> list[NewEntry]:
            started.release()
            gate.wait(10)
            return [message("after the gate")]

        busy = [asyncio.create_task(store.append(f"incident/s{i}", blocked)) for i in range(4)]
        loop = asyncio.get_running_loop()
        for _ in range(4):
            assert await loop.run_in_executor(None, started.acquire, True, 10)
        assert store.open_files == 4
        waiting = asyncio.create_task(store.append("incident/s4", [message("needs a slot")]))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        assert store.open_files == 4
        gate.set()
        results = await asyncio.wait_for(asyncio.gather(*busy, waiting), 10)
        assert [r.entries[0].seq for r in results] == [2] * 5
        assert store.open_files <= 4
    finally:
        gate.set()
        await store.close()


async def test_subscribers_run_after_the_commit_is_durable(store: SqliteLogStore) -> None:
    seen_on_disk: list[list[int]] = []

    def listener(scope: str, entries: tuple[Entry, ...]) -> None:
        # a separate connection sees the entries: the transaction has committed before anyone is told
        with sqlite3.connect(scope_path(store, scope)) as raw:
            seqs = [e.seq for e in entries]
            marks = ",".join("?" * len(seqs))
            found = raw.execute(f"SELECT seq FROM entries WHERE seq IN ({marks}) ORDER BY seq", seqs).fetchall()
            seen_on_disk.append([r[0] for r in found])

    store.subscribe(listener)
    await declare(store)
    await asyncio.gather(*(store.append(SCOPE, [message(f"m{i}")]) for i in range(10)))
    assert len(seen_on_disk) == 11
    assert sorted(s for batch in seen_on_disk for s in batch) == list(range(1, 12))


# -- topics that name the entry kinds they care about ---------------------------------------------------------------


async def test_a_topic_with_kinds_gets_rows_only_for_those_kinds(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path, topics=("index", "links"), topic_kinds={"links": ("declared",)})
    try:
        await declare(store)
        await store.append(SCOPE, [message("a"), message("b")])
        assert [i.entry.seq for i in await store.outbox_pending(SCOPE, "index")] == [1, 2, 3]
        assert [(i.entry.seq, i.entry.kind) for i in await store.outbox_pending(SCOPE, "links")] == [(1, "declared")]
        assert (await store.outbox_summary(SCOPE)).pending == {"index": 3, "links": 1}
        await store.outbox_done(SCOPE, "links", [1])
        assert await store.outbox_pending(SCOPE, "links") == []
        assert store.topics_for("message") == ("index",) and store.topics_for("declared") == ("index", "links")
    finally:
        await store.close()
    reopened = SqliteLogStore(tmp_path, topics=("index", "links"))  # without the filter: every kind again
    try:
        await reopened.append(SCOPE, [message("c")])
        assert [i.entry.seq for i in await reopened.outbox_pending(SCOPE, "links")] == [4]
    finally:
        await reopened.close()


# -- key lookups as compiled text --------------------------------------------------------------------------------


def keyed(n: int, prefix: str) -> list[NewEntry]:
    return [message(f"{prefix} {i}", key=f"{prefix}:{i}") for i in range(n)]


async def test_a_request_with_more_entry_keys_than_one_lookup_takes_still_finds_a_stored_one(
    store: SqliteLogStore,
) -> None:
    """``select_by_keys`` takes at most ``KEYS_PER_SELECT`` keys: a longer list is looked up in slices."""
    await declare(store)
    first = await store.append(SCOPE, keyed(150, "a"))
    assert not first.duplicate and len(first.entries) == 150
    stored = {e.idempotency_key: e for e in first.entries}
    again = await store.append(SCOPE, [*keyed(130, "b"), message("old", key="a:140"), message("old", key="a:3")])
    assert again.duplicate
    assert [e.id for e in again.entries] == [stored["a:3"].id, stored["a:140"].id]  # in seq order
    fresh = await store.append(SCOPE, keyed(150, "c"))
    assert not fresh.duplicate
    entries = await read_all(store)
    assert len(entries) == 1 + 150 + 150
    assert_gapless_chain(entries)


async def test_a_retried_request_key_finds_all_its_entries_and_no_neighbour_key(store: SqliteLogStore) -> None:
    await declare(store)
    first = await store.append(SCOPE, [message("a"), message("b"), message("c")], idempotency_key="ev")
    await store.append(SCOPE, [message("x")], idempotency_key="ev2")  # not one of ev's entries ("ev#n" only)
    await store.append(SCOPE, [message("y")], idempotency_key="e")
    again = await store.append(SCOPE, [message("other")], idempotency_key="ev")
    assert again.duplicate
    assert [e.id for e in again.entries] == [e.id for e in first.entries]
    assert [e.idempotency_key for e in again.entries] == ["ev", "ev#2", "ev#3"]


@pytest.mark.parametrize("where", ["worker", "loop"])
async def test_a_database_error_in_a_cursor_statement_fails_the_whole_batch(store: SqliteLogStore, where: str) -> None:
    """A DBAPI error from compiled text on the cursor (not wrapped by SQLAlchemy) is the file's trouble, as a
    SQLAlchemy error is: every request of the batch fails with ``StorageError`` and nothing of it commits. The same
    for a batch staged on the loop's thread (decision 133): its transaction is rolled back there, and the next batch
    starts clean."""
    from decklog.core.errors import StorageError
    from decklog.core.store.sqlite.statements import raw_cursor

    await declare(store)
    file = scope_file(store)

    def broken(conn: Any, _b: Any) -> None:
        raw_cursor(conn).execute("UPDATE no_such_table SET x = 1")

    bad, neighbour = await asyncio.gather(
        file.write(broken, savepoint=False, on_loop=where == "loop"),
        store.append(SCOPE, [message("same batch")]),
        return_exceptions=True,
    )
    assert isinstance(bad, StorageError)
    assert isinstance(neighbour, StorageError)
    assert [e.kind for e in await read_all(store)] == ["declared"]
    after = await store.append(SCOPE, [message("next batch")])
    assert after.entries[0].seq == 2
    assert (await store.verify(SCOPE)).ok


async def test_a_small_append_batch_is_staged_on_the_loop_and_committed_on_a_worker(
    store: SqliteLogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decision 133: a batch of a few appends runs its statements on the loop's thread (no GIL hand-off per
    statement), and only the COMMIT (the fsync) on a worker; the caller hears back after the commit."""
    import decklog.core.store.sqlite.log_store as log_store

    await declare(store)
    threads: set[int] = set()
    stage = log_store.stage

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.add(threading.get_ident())
        return stage(*args, **kwargs)

    monkeypatch.setattr(log_store, "stage", spy)
    statements: list[tuple[int, str]] = []
    raw = scope_file(store)._conn.connection.dbapi_connection
    raw.set_trace_callback(lambda sql: statements.append((threading.get_ident(), sql)))
    try:
        await store.append(SCOPE, [message("staged on the loop")])
    finally:
        raw.set_trace_callback(None)
    loop_thread = threading.get_ident()
    assert threads == {loop_thread}
    begin = next(t for t, sql in statements if sql.upper() == "BEGIN IMMEDIATE")
    commit = next(t for t, sql in statements if sql.upper() == "COMMIT")
    assert begin == loop_thread and commit != loop_thread, statements
    assert raw.execute("PRAGMA busy_timeout").fetchone()[0] == 0  # a worker's BEGIN waits in Python instead
    with sqlite3.connect(scope_path(store)) as other:  # committed: another connection sees it
        assert other.execute("SELECT count(*) FROM entries").fetchone()[0] == 2


async def test_while_another_process_holds_the_write_lock_an_append_waits_on_a_worker_not_the_loop(
    store: SqliteLogStore,
) -> None:
    """The loop never waits for SQLite's lock (busy_timeout is 0 there): the batch goes to a worker, which waits."""
    await declare(store)
    other = sqlite3.connect(scope_path(store), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # the CLI, say, in the middle of its own append
        waiting = asyncio.create_task(store.append(SCOPE, [message("after the other writer")]))
        ticks = 0
        for _ in range(20):  # the loop keeps turning while the append waits for the lock
            await asyncio.sleep(0.005)
            ticks += 1
        assert ticks == 20 and not waiting.done()
        other.execute("COMMIT")
        result = await asyncio.wait_for(waiting, 30)
        assert result.entries[0].seq == 2
    finally:
        other.close()
    assert_gapless_chain(await read_all(store))


def test_a_begin_that_waits_in_python_gives_up_with_the_busy_error_after_its_bound(tmp_path: Path) -> None:
    """The worker side of a connection whose SQLite busy timeout is 0: it retries while the lock is held, as
    SQLite's own busy handler would, and fails with SQLite's error once its bound has passed."""
    from decklog.core.store.sqlite.engine import begin_waiting

    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    waiter = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        holder.execute("PRAGMA journal_mode=WAL")
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as raised:
            begin_waiting(waiter, "BEGIN IMMEDIATE", timeout_s=0.05)
        assert raised.value.sqlite_errorcode == sqlite3.SQLITE_BUSY
        holder.execute("COMMIT")
        begin_waiting(waiter, "BEGIN IMMEDIATE", timeout_s=0.05)
        assert waiter.in_transaction
    finally:
        holder.close()
        waiter.close()


async def test_a_long_read_runs_on_a_worker_and_a_short_one_may_run_on_the_loop(
    store: SqliteLogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unbounded read (a summary's thousands of observations) must not hold the event loop (decision 127)."""
    import decklog.core.store.sqlite.log_store as log_store

    await declare(store)
    await store.append(SCOPE, [message(f"m{i}") for i in range(log_store.SMALL_READ_ROWS + 5)])
    threads: set[int] = set()
    convert = log_store.trusted_row_to_entry

    def spy(scope: str, row: Any) -> Entry:
        threads.add(threading.get_ident())
        return convert(scope, row)

    monkeypatch.setattr(log_store, "trusted_row_to_entry", spy)
    loop_thread = threading.get_ident()
    for read in (lambda: store.read(SCOPE), lambda: store.read_seqs(SCOPE, list(range(1, 80)))):
        threads.clear()
        assert len(await read()) > log_store.SMALL_READ_ROWS
        assert threads and loop_thread not in threads
    threads.clear()
    assert len(await store.read(SCOPE, limit=5)) == 5
    assert threads == {loop_thread}  # a short read skips the hop to a worker when the read connection is free


async def test_the_outbox_summary_reads_only_pending_and_parked_rows(store: SqliteLogStore) -> None:
    """A storm's scope holds tens of thousands of delivered rows; the summary (run by every sweep) must not scan
    them (decision 128): both counts go over a partial index."""
    from decklog.core.store.sqlite.statements import compiled

    await declare(store)
    conn = sqlite3.connect(scope_path(store))
    try:
        for sql in (compiled().count_pending, compiled().count_parked):
            plan = " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql))
            assert "USING INDEX outbox_pending" in plan or "USING INDEX outbox_parked" in plan, plan
    finally:
        conn.close()
    summary = await store.outbox_summary(SCOPE)
    assert summary.pending == {"index": 1, "slack": 1} and summary.parked == {}


# -- index.db and inbox.db made by older versions ------------------------------------------------------------------


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
        index = SqliteIndex(path, executor)
        await index.open()
        try:
            assert [r.id for r in await index.list_scopes(open_only=True)] == ["incident/old"]
        finally:
            await index.close()


async def test_an_inbox_db_made_before_parking_gets_its_columns(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "inbox.db") as conn:  # as older decklogs made it, with a pending request
        conn.execute(
            "CREATE TABLE inbox (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, source TEXT NOT NULL,"
            " body TEXT NOT NULL, meta TEXT NOT NULL, received_at REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,"
            " done_at REAL)"
        )
        conn.execute("INSERT INTO inbox (key, source, body, meta, received_at) VALUES ('old', 'http', '{}', '{}', 1)")
    inbox = await SqliteInbox.open(tmp_path)
    try:
        assert [i.key for i in await inbox.pending()] == ["old"]
        await inbox.park(key="old", error="boom", attempts=3)
        assert [p.key for p in await inbox.parked()] == ["old"]
    finally:
        await inbox.close()


async def test_an_older_index_db_gains_the_change_time_column(tmp_path: Path) -> None:
    """An index.db made before a change's own time was kept gets ``scopes.changed_at`` on open; its rows are kept
    (and read their recording time until ``decklog reindex``)."""
    path = tmp_path / "index.db"
    with sqlite3.connect(path) as conn:  # as an older decklog made it
        conn.execute(
            "CREATE TABLE scopes (id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, title VARCHAR NOT NULL DEFAULT '',"
            " status VARCHAR NOT NULL DEFAULT 'reserved', severity INTEGER, services TEXT NOT NULL DEFAULT '[]',"
            " created_at VARCHAR NOT NULL DEFAULT '', updated_at VARCHAR NOT NULL DEFAULT '',"
            " resolved_at VARCHAR NOT NULL DEFAULT '', version INTEGER NOT NULL DEFAULT 0,"
            " thread_channel VARCHAR NOT NULL DEFAULT '', thread_ts VARCHAR NOT NULL DEFAULT '',"
            " permalink VARCHAR NOT NULL DEFAULT '', pending_approvals INTEGER NOT NULL DEFAULT 0,"
            " reserved_at FLOAT NOT NULL DEFAULT 0, forked_from VARCHAR NOT NULL DEFAULT '')"
        )
        conn.execute(
            "INSERT INTO scopes (id, kind, status, services, created_at, version)"
            " VALUES ('change/r1', 'change', 'open', '[\"api\"]', '2026-12-07T10:00:00.000000Z', 2)"
        )
    with ThreadPoolExecutor(2) as pool:
        index = SqliteIndex(path, pool)
        await index.open()
        try:
            row = await index.get("change/r1")
        finally:
            await index.close()
    assert row is not None and row.changed_at == "" and row.change_time == "2026-12-07T10:00:00.000000Z"
