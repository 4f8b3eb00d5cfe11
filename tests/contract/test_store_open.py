"""Opening scope files: different scopes open at the same time, one scope is opened once (decision 136).

An alert storm declares many incidents at once. Their files used to open one after another under the cache's lock,
so the tenth declaration waited for nine opens, each a hop to a worker on a saturated loop (up to 150 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from pathlib import Path

import pytest

from decklog.core.errors import Conflict, NotFound
from decklog.core.store.sqlite.file import SqliteFile
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.store_contract import declared, message

TOPICS = ("index", "slack")


class HeldOpens:
    """Holds every ``SqliteFile._open_sync`` at its start until released; counts the opens under way."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.inside = 0
        self.peak = 0
        self.opened: list[str] = []
        self.files: list[SqliteFile] = []
        original = SqliteFile._open_sync

        def held(file: SqliteFile, prepare: object = None) -> None:
            with self.lock:
                self.inside += 1
                self.peak = max(self.peak, self.inside)
                self.opened.append(file.path.name)
                self.files.append(file)
            try:
                self.gate.wait(10)
                original(file, prepare)  # type: ignore[arg-type]
            finally:
                with self.lock:
                    self.inside -= 1

        monkeypatch.setattr(SqliteFile, "_open_sync", held)

    async def until_inside(self, n: int) -> None:
        async with asyncio.timeout(10):
            while self.inside < n:
                await asyncio.sleep(0.001)


async def test_files_of_different_scopes_open_at_the_same_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteLogStore(tmp_path, topics=TOPICS, threads=4)
    held = HeldOpens(monkeypatch)
    try:
        declaring = [
            asyncio.create_task(store.append(f"incident/burst-{i}", [declared(f"burst {i}")], create=True))
            for i in range(4)
        ]
        await held.until_inside(4)  # all four are opening at once: none waits for another's open
        assert store.open_files == 4  # being opened counts against max_open
        held.gate.set()
        results = await asyncio.wait_for(asyncio.gather(*declaring), 10)
        assert [r.entries[0].seq for r in results] == [1, 1, 1, 1]
        assert held.peak == 4
    finally:
        held.gate.set()
        await store.close()


async def test_callers_of_one_scope_share_its_single_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteLogStore(tmp_path, topics=TOPICS, threads=4)
    await store.append("incident/one", [declared("one")], create=True)
    await store.close()
    store = SqliteLogStore(tmp_path, topics=TOPICS, threads=4)
    held = HeldOpens(monkeypatch)
    try:
        appends = [asyncio.create_task(store.append("incident/one", [message(f"m{i}")])) for i in range(5)]
        await held.until_inside(1)
        await asyncio.sleep(0.02)  # the other four are waiting for that open, not opening the file again
        assert held.inside == 1 and store.open_files == 1
        held.gate.set()
        results = await asyncio.wait_for(asyncio.gather(*appends), 10)
        assert sorted(r.entries[0].seq for r in results) == [2, 3, 4, 5, 6]
        assert held.opened == ["incident~one.db"]
    finally:
        held.gate.set()
        await store.close()


async def test_a_failed_open_lets_the_callers_waiting_for_it_try_themselves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append to a scope that does not exist fails its open with NotFound; a declaration waiting for that open
    then opens (creates) the file itself."""
    store = SqliteLogStore(tmp_path, topics=TOPICS)
    try:
        missing = asyncio.create_task(store.append("incident/late", [message("too early")]))
        declaring = asyncio.create_task(store.append("incident/late", [declared("late")], create=True))
        with pytest.raises(NotFound):
            await asyncio.wait_for(missing, 10)
        assert (await asyncio.wait_for(declaring, 10)).entries[0].seq == 1
        assert store.cache.opening == {}
    finally:
        await store.close()


async def test_close_waits_for_the_files_being_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteLogStore(tmp_path, topics=TOPICS)
    held = HeldOpens(monkeypatch)
    declaring = asyncio.create_task(store.append("incident/closing", [declared("closing")], create=True))
    await held.until_inside(1)
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.02)
    assert not closing.done()  # the file being opened must join the cache and be closed with it
    held.gate.set()
    await asyncio.wait_for(asyncio.gather(declaring, closing, return_exceptions=True), 10)
    assert store.cache.files == {} and store.cache.opening == {} and store.open_files == 0


async def test_a_caller_cancelled_during_the_open_leaves_the_file_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open runs on a worker whatever happens to its caller: the file it opened is cached (and closed with the
    store), not left holding its connections until the garbage collector finds it."""
    store = SqliteLogStore(tmp_path, topics=TOPICS)
    await store.append("incident/cancelled", [declared("cancelled")], create=True)
    await store.close()
    store = SqliteLogStore(tmp_path, topics=TOPICS)
    held = HeldOpens(monkeypatch)
    try:
        appending = asyncio.create_task(store.append("incident/cancelled", [message("never written")]))
        await held.until_inside(1)
        appending.cancel()
        held.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(appending, 10)
        [opened] = held.files
        assert store.cache.files["incident/cancelled"].file is opened and store.open_files == 1
        assert store.cache.files["incident/cancelled"].users == 0
        assert (await store.append("incident/cancelled", [message("later")])).entries[0].seq == 2
        assert held.opened == ["incident~cancelled.db"]  # the later append used that file, not a second open
    finally:
        held.gate.set()
        await store.close()
    assert opened._conn is None  # closed with the store


async def test_random_opens_appends_and_evictions_keep_the_bound_and_every_log(tmp_path: Path) -> None:
    """Seeded random work over 24 scopes through 4 slots: declarations racing appends to the same scope (which
    fail with NotFound until it is declared), reads and evictions. The bound holds at every loop turn, and every
    log ends with exactly the appends that were acknowledged."""
    rng = random.Random(136)
    store = SqliteLogStore(tmp_path, topics=TOPICS, max_open=4)
    acked: dict[str, int] = {}
    peak = 0
    stop = asyncio.Event()

    async def sampler() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, store.open_files)
            await asyncio.sleep(0)

    async def work(scope: str, what: str) -> None:
        if what == "declare":
            with contextlib.suppress(Conflict):  # declared already by another task
                await store.append(scope, [declared(scope)], create=True)
                acked[scope] = acked.get(scope, 0) + 1
        elif what == "append":
            with contextlib.suppress(NotFound):
                await store.append(scope, [message("m")])
                acked[scope] = acked.get(scope, 0) + 1
        else:
            with contextlib.suppress(NotFound):
                await store.get_state(scope)

    scopes = [f"incident/r{i}" for i in range(24)]
    task = asyncio.create_task(sampler())
    try:
        ops = [(rng.choice(scopes), rng.choice(["declare", "append", "append", "read"])) for _ in range(400)]
        await asyncio.wait_for(asyncio.gather(*(work(s, w) for s, w in ops)), 60)
    finally:
        stop.set()
        await task
    try:
        assert peak <= 4
        assert store.cache.opening == {}
        for scope in scopes:
            if scope in acked:
                state = await store.get_state(scope)
                assert state.version == acked[scope]
                assert (await store.verify(scope)).ok
            else:
                assert not store.holds(scope)
    finally:
        await store.close()
