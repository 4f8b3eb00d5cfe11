"""Outbox dispatch: commit → sender-invoked latency, and drain throughput, against a raw sqlite3 baseline.

    .venv/bin/python bench/dispatch.py [--quick]

- latency: a producer appends one entry at a time (WAL + synchronous=FULL); the time from the append being
  acknowledged (committed) to the sender being called with that entry. Targets: p50 ≤ 5 ms, p99 ≤ 20 ms.
- drain: N entries already committed; the dispatcher starts and delivers them all (reads pending rows, calls the
  sender in batches, marks them published) — entries/s. Baseline, measured in the same run and interleaved: a raw
  sqlite3 loop doing the same work on the same schema (select a batch of pending rows joined to their entries,
  mark them published, commit).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stats import (
    Sample,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    interleave,
    markdown_table,
    median,
    median_percentile_ms,
    median_rate,
    note,
    paired_ratio,
    verdict,
)
from decklog.core.entries import Actor, Entry, NewEntry
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.store.sqlite.log_store import SqliteLogStore

ACTOR = Actor.system("bench")
SCOPE = "incident/bench"


class Recorder:
    name = "rec"
    batch_size = 64

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self.event = asyncio.Event()
        self.expect = 0

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        now = time.perf_counter()
        for e in entries:
            self.seen.setdefault(e.seq, now)
        if len(self.seen) >= self.expect:
            self.event.set()


async def _store(root: Path) -> SqliteLogStore:
    store = SqliteLogStore(root, topics=("rec",))
    await store.append(SCOPE, [NewEntry.make("declared", ACTOR, {"title": "bench"})], create=True)
    return store


async def _latency(n: int) -> Sample:
    root = Path(tempfile.mkdtemp(prefix="decklog-bench-"))
    try:
        store = await _store(root)
        rec = Recorder()
        rec.expect = n + 1
        dispatcher = Dispatcher(store, [rec])
        dispatcher.start()
        committed: dict[int, float] = {}
        started = time.perf_counter()
        for i in range(n):
            result = await store.append(SCOPE, [NewEntry.make("message", ACTOR, {"text": f"m{i}"})])
            committed[result.entries[0].seq] = time.perf_counter()
            await asyncio.sleep(0.002)  # a steady trickle, not a burst: we measure wake-up latency
        await asyncio.wait_for(rec.event.wait(), 60)
        elapsed = time.perf_counter() - started
        latencies = [rec.seen[seq] - at for seq, at in committed.items()]
        await dispatcher.stop()
        await store.close()
        return Sample(n, elapsed, latencies)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _drain(n: int) -> Sample:
    root = Path(tempfile.mkdtemp(prefix="decklog-bench-"))
    try:
        store = await _store(root)
        batch = [NewEntry.make("message", ACTOR, {"text": f"m{i}"}) for i in range(100)]
        for _ in range(n // 100):
            await store.append(SCOPE, batch)
        rec = Recorder()
        rec.expect = (n // 100) * 100 + 1
        dispatcher = Dispatcher(store, [rec])
        dispatcher.start()
        started = time.perf_counter()
        dispatcher.wake(SCOPE)
        await asyncio.wait_for(rec.event.wait(), 120)
        await dispatcher.idle(60)
        elapsed = time.perf_counter() - started
        await dispatcher.stop()
        await store.close()
        return Sample(rec.expect, elapsed)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _raw_drain(n: int) -> Sample:
    """The floor: the same schema and work, in raw sqlite3 with no framework."""
    root = Path(tempfile.mkdtemp(prefix="decklog-bench-raw-"))
    try:
        db = sqlite3.connect(root / "raw.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE entries (seq INTEGER PRIMARY KEY, kind TEXT, payload TEXT)")
        db.execute(
            "CREATE TABLE outbox (topic TEXT, seq INTEGER, published_at REAL, parked_at REAL, PRIMARY KEY (topic, seq))"
        )
        db.execute("CREATE INDEX pending ON outbox (topic, seq) WHERE published_at IS NULL AND parked_at IS NULL")
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO entries VALUES (?, 'message', ?)", [(i, f'{{"text":"m{i}"}}') for i in range(1, n + 1)]
        )
        db.executemany("INSERT INTO outbox VALUES ('rec', ?, NULL, NULL)", [(i,) for i in range(1, n + 1)])
        db.execute("COMMIT")
        started = time.perf_counter()
        done = 0
        while True:
            rows = db.execute(
                "SELECT e.seq, e.kind, e.payload FROM outbox o JOIN entries e ON e.seq = o.seq "
                "WHERE o.topic = 'rec' AND o.published_at IS NULL AND o.parked_at IS NULL ORDER BY o.seq LIMIT 256"
            ).fetchall()
            if not rows:
                break
            for i in range(0, len(rows), 64):
                chunk = rows[i : i + 64]
                db.execute("BEGIN IMMEDIATE")
                db.executemany(
                    "UPDATE outbox SET published_at = ? WHERE topic = 'rec' AND seq = ?",
                    [(time.time(), r[0]) for r in chunk],
                )
                db.execute("COMMIT")
                done += len(chunk)
        elapsed = time.perf_counter() - started
        db.close()
        return Sample(done, elapsed)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _replicas(url: str, n: int, *, notify: bool, replicas: int = 3) -> tuple[Sample, int, int]:
    """PostgreSQL, ``replicas`` stores and dispatchers on one database (one process, each store its own engine,
    LISTEN connection and token): commits round-robin on the replicas; commit → sender invoked (latency samples),
    ordering violations, duplicate deliveries. ``notify=False``: the other replicas learn of a commit only by
    their claim retry (the poll), the baseline LISTEN/NOTIFY is measured against."""
    from decklog.core.store.postgres.log_store import PostgresLogStore

    stores = [PostgresLogStore(url, topics=("rec",), notify=notify) for _ in range(replicas)]
    rec = Recorder()
    order: list[int] = []

    class Shared(Recorder):
        async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
            order.extend(e.seq for e in entries)
            await rec.deliver(scope, entries)

    dispatchers = [Dispatcher(s, [Shared()], cursors=s) for s in stores]
    for d in dispatchers:
        d.start()
    scope = f"incident/bench-{'notify' if notify else 'poll'}-{time.monotonic_ns()}"
    await stores[0].append(scope, [NewEntry.make("declared", ACTOR, {"title": "bench"})], create=True)
    rec.expect = n + 1
    committed: dict[int, float] = {}
    for i in range(n):
        result = await stores[i % replicas].append(scope, [NewEntry.make("message", ACTOR, {"text": f"m{i}"})])
        committed[result.entries[0].seq] = time.perf_counter()
        await asyncio.sleep(0.002)
    await asyncio.wait_for(rec.event.wait(), 120)
    lat = Sample(n, 1.0, [rec.seen[seq] - at for seq, at in committed.items()])
    bad = sum(1 for a, b in itertools.pairwise(order) if b < a)
    dup = len(order) - len(set(order))
    for d in dispatchers:
        await d.stop()
    for s in stores:
        await s.close()
    return lat, bad, dup


async def _pg_runs(url: str, n: int, replicas: int = 3) -> None:
    rows = []
    for r, notify in enumerate((False, True, False, True)):  # interleaved: the first run also warms the server
        lat, bad, dup = await _replicas(url, n, notify=notify, replicas=replicas)
        what = "LISTEN/NOTIFY" if notify else "poll only (no NOTIFY)"
        p50, p99 = lat.percentile_ms(50), lat.percentile_ms(99)
        rows.append([f"{what}, round {r // 2 + 1}", f"{fmt_ms(p50)} ms", f"{fmt_ms(p99)} ms", str(bad), str(dup)])
    print(f"## Dispatch on PostgreSQL, {replicas} replicas on one database ({n} commits round-robin, 2 ms apart)\n")
    print(markdown_table(["wake-up", "commit → sender p50", "p99", "ordering violations", "duplicates"], rows))
    print("\n(failover of a killed replica: bench/failover.py)")


def _pg_main(admin: str, n: int) -> None:
    import psycopg

    name = f"decklog_bench_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        asyncio.run(_pg_runs(admin.rsplit("/", 1)[0] + "/" + name, n))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run (< 20 s)")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test", help="admin URL")
    args = parser.parse_args()
    if args.backend == "postgresql":
        _pg_main(args.database_url, 200 if args.quick else 1000)
        return
    rounds = 2 if args.quick else 5
    lat_n = 200 if args.quick else 1000
    drain_n = 2000 if args.quick else 10000

    latency = interleave(
        {"latency": lambda: asyncio.run(_latency(lat_n))},
        rounds,
        progress=lambda r, k, s: note(f"round {r} {k}: p50 {s.percentile_ms(50):.2f} ms"),
    )["latency"]
    drains = interleave(
        {"decklog": lambda: asyncio.run(_drain(drain_n)), "raw sqlite3": lambda: _raw_drain(drain_n)},
        rounds,
        progress=lambda r, k, s: note(f"round {r} {k}: {s.rate:,.0f}/s"),
    )
    p50, p99 = median_percentile_ms(latency, 50), median_percentile_ms(latency, 99)
    ratio = paired_ratio(drains["decklog"], drains["raw sqlite3"])
    print(f"## Dispatch ({rounds} interleaved rounds, medians; WAL + synchronous=FULL)\n")
    print(
        markdown_table(
            ["measure", "value", "target", ""],
            [
                ["commit → sender invoked, p50", f"{fmt_ms(p50)} ms", "≤ 5 ms", verdict(p50 <= 5)],
                ["commit → sender invoked, p99", f"{fmt_ms(p99)} ms", "≤ 20 ms", verdict(p99 <= 20)],
                ["drain throughput (decklog)", f"{fmt_rate(median_rate(drains['decklog']))} entries/s", "", ""],
                [
                    "drain throughput (raw sqlite3, same work)",
                    f"{fmt_rate(median_rate(drains['raw sqlite3']))} entries/s",
                    "",
                    "",
                ],
                ["decklog / raw sqlite3", fmt_ratio(ratio), "", ""],
            ],
        )
    )
    print(
        f"\n(latency samples per round: {lat_n}; drain size: {drain_n}; median of per-round p99s: {median([s.percentile_ms(99) for s in latency]):.2f} ms)"
    )


if __name__ == "__main__":
    main()
