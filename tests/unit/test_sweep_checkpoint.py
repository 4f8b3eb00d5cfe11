"""The boot sweep opens the scopes that may have rows waiting, not all of history (SQLite's sweep checkpoint).

A boot sweep records what it found (core/store/sqlite/sweep_checkpoint.py); the next one opens the scopes it found
pending and those written since, and every scope when the record cannot vouch for the others.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.outbox.sweeps import Sweeps
from decklog.core.store.memory.index import MemoryIndex
from decklog.core.store.sqlite import sweep_checkpoint
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.store_contract import declare, message


class Holding:
    """A sender that never delivers (its rows stay pending), recording what it was woken for."""

    name = "slack"

    def __init__(self) -> None:
        self.woken: list[str] = []

    async def deliver(self, scope: str, entries: object) -> None:
        self.woken.append(scope)
        raise RuntimeError("Slack is down")


def _age(store: SqliteLogStore, seconds: float) -> None:
    """Every scope file as if last written ``seconds`` ago (an old history)."""
    old = time.time() - seconds
    for p in store.scopes_dir.iterdir():
        os.utime(p, (old, old))


async def _candidates(store: SqliteLogStore, topics: tuple[str, ...] = ("slack",)) -> list[str]:
    ids, _at = await store.sweep_candidates(topics)
    return sorted(str(s) for s in ids)


async def test_the_next_boot_opens_what_was_pending_and_what_was_written_since(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path, topics=("slack",))
    try:
        scopes = [f"incident/old-{i}" for i in range(4)]
        for s in scopes:
            await declare(store, s)
        for s in scopes[:3]:  # delivered; the fourth stays pending
            items = await store.outbox_pending(s, "slack")
            await store.outbox_done(s, "slack", [i.entry.seq for i in items])
        assert await _candidates(store) == sorted(scopes)  # no checkpoint yet: every scope

        dispatcher = Dispatcher(store, [])
        dispatcher.register(Holding())  # type: ignore[arg-type]
        sweeps = Sweeps(dispatcher, MemoryIndex(), store)
        await sweeps.boot()
        assert (tmp_path / sweep_checkpoint.NAME).exists()
        await dispatcher.stop()

        _age(store, 3600)
        assert await _candidates(store) == [scopes[3]]  # only what was pending: history is not opened

        await store.append(scopes[0], [message("written after the check")])
        assert await _candidates(store) == [scopes[0], scopes[3]]

        # a sender this process runs that the checkpoint did not check for: its rows were never looked for
        assert await _candidates(store, ("slack", "paging")) == sorted(scopes)
    finally:
        await store.close()


async def test_a_checkpoint_that_cannot_vouch_means_a_full_sweep(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path, topics=("slack",))
    try:
        scopes = [f"incident/old-{i}" for i in range(3)]
        for s in scopes:
            await declare(store, s)
        _ids, at = await store.sweep_candidates(("slack",))
        await store.sweep_checked(("slack",), at, [])
        _age(store, 3600)
        assert await _candidates(store) == []  # nothing pending and nothing written since

        (tmp_path / sweep_checkpoint.NAME).write_text("{not json")
        assert await _candidates(store) == sorted(scopes)

        await store.sweep_checked(("slack",), at, [])
        point = (tmp_path / sweep_checkpoint.NAME).read_text().replace('"dir": [', '"dir": [1, ')
        (tmp_path / sweep_checkpoint.NAME).write_text(point)  # another directory's (a restored backup)
        assert await _candidates(store) == sorted(scopes)
    finally:
        await store.close()
