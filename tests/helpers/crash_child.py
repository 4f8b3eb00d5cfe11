"""A child process for the crash test: several producers append, a dispatcher delivers to a recording sender.

Prints ``ack <scope> <seq> <entry id>`` after each append is acknowledged (committed). The recording sender is
idempotent by (scope, seq): it inserts into ``effects.db`` with a primary key and counts every attempt.

    python -m tests.helpers.crash_child DATA_DIR [--drain]
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path

from decklog.core.entries import Actor, Entry, NewEntry
from decklog.core.outbox.dispatcher import Dispatcher, RetryPolicy
from decklog.core.store.sqlite.log_store import SqliteLogStore

SCOPES = ("incident/crash-a", "incident/crash-b")


class RecordingSender:
    name = "rec"
    batch_size = 16

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS effects (scope TEXT, seq INTEGER, id TEXT, PRIMARY KEY (scope, seq))"
        )
        self.db.execute("CREATE TABLE IF NOT EXISTS attempts (scope TEXT, seq INTEGER)")

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        for e in entries:
            self.db.execute("INSERT INTO attempts VALUES (?, ?)", (scope, e.seq))
            self.db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?, ?)", (scope, e.seq, e.id))
        self.db.execute("COMMIT")


async def main(data: Path, drain: bool) -> None:
    data.mkdir(parents=True, exist_ok=True)
    store = SqliteLogStore(data, topics=("rec",))
    dispatcher = Dispatcher(store, [RecordingSender(data / "effects.db")], policy=RetryPolicy(base_delay=0.01))
    dispatcher.start()
    actor = Actor.system("crash-test")
    for scope in SCOPES:
        if not await store.exists(scope):
            declared = NewEntry.make("declared", actor, {"title": scope})
            await store.append(scope, [declared], create=True, idempotency_key=f"declare:{scope}")
    await dispatcher.sweep()
    if drain:
        for _ in range(200):
            await dispatcher.idle(timeout=30)
            pending = 0
            for scope in SCOPES:
                pending += sum((await store.outbox_summary(scope)).pending.values())
            if not pending:
                break
            await dispatcher.sweep()
            await asyncio.sleep(0.05)
        await dispatcher.stop()
        await store.close()
        print("drained", flush=True)
        return

    async def producer(n: int) -> None:
        scope = SCOPES[n % len(SCOPES)]
        i = 0
        while True:
            i += 1
            entry = NewEntry.make("message", actor, {"text": f"p{os.getpid()}-{n}-{i}"})
            result = await store.append(scope, [entry])
            e = result.entries[0]
            sys.stdout.write(f"ack {scope} {e.seq} {e.id}\n")
            sys.stdout.flush()

    await asyncio.gather(*(producer(n) for n in range(8)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), "--drain" in sys.argv))
