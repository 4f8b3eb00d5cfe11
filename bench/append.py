"""Acknowledged appends per second and latency of the SQLite log store, against baselines measured in the same run.

Subjects (``SqliteLogStore``, WAL + synchronous=FULL, ``message`` entries, each append awaited until committed):
1 producer / 1 scope, 16 producers / 1 scope (group commit), 16 producers / 16 scopes (one file each).
Baselines: raw ``sqlite3`` single-row INSERT+COMMIT (WAL + FULL, one thread), and the ``eventsourcing``
library's SQLite application recorder (one event per aggregate-version insert, its own default settings) with
1 and with 16 writer threads. SQLite alone on decklog's rows: its transaction by hand on raw cursors, 1 thread and 16
threads on 16 files, and the shared-file layout decision 135 proposes (16 scopes' appends per commit, one file).

The disk is noisy, so cases run interleaved for several rounds and ratios are medians of within-round ratios.
Usage: ``.venv/bin/python bench/append.py [--quick] [--rounds N] [--seconds S] [--dir DIR]``;
``--backend postgresql [--database-url URL]`` runs the PostgreSQL store against raw psycopg (bench/_append_pg.py).
Progress goes to stderr; stdout is a Markdown table to paste into the README. No number here is ever asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import platform
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from _stats import (
    Sample,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    fmt_us,
    interleave,
    markdown_table,
    median,
    median_cpu_us,
    median_percentile_ms,
    median_rate,
    note,
    paired_ratio,
    verdict,
)
from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from decklog.core.entries import Actor, NewEntry
from decklog.core.entries.records import actor_json, payload_json
from decklog.core.store.sqlite import schema
from decklog.core.store.sqlite.engine import make_engine
from decklog.core.store.sqlite.log_store import SqliteLogStore

TEXT = "p99 latency on payments-api is 2.3 s since 03:10; rolling back r2026-09-19-4 looks like the safest bet"
MESSAGE = NewEntry.make("message", Actor.human("U0ALICE", "alice"), {"text": TEXT, "channel": "C0INCIDENT"})
DECLARED = NewEntry.make("declared", Actor.human("U0ALICE", "alice"), {"title": "bench"})
# a row of about the size decklog writes per entry (ids, actor, payload, refs, hashes)
ROW = json.dumps({"kind": "message", "actor": {"id": "U0ALICE"}, "payload": {"text": TEXT}, "hash": "f" * 128})
EVENT_STATE = ROW.encode()
STATE_BODY = "x" * 568  # the folded state's JSON of a bench scope after a few messages is about this long
EVENT_TOPIC = "bench.domain:Incident.MessagePosted"

# group commit at work: appends per committed transaction, per decklog case, one value per round
APPENDS_PER_COMMIT: dict[tuple[int, int], list[float]] = {}

RAW = "raw sqlite3 (WAL, FULL, 1 thread)"
SHAPE1 = "raw sqlite3, decklog's transaction (1 thread)"
SHAPE16 = "raw sqlite3, decklog's transaction (16 threads / 16 files)"
SHARED = "raw sqlite3, 16 scopes' transactions in one commit (1 shared file)"
ES1 = "eventsourcing SQLite (1 thread)"
ES16 = "eventsourcing SQLite (16 threads)"
ONE = "decklog 1 producer / 1 scope"
SIXTEEN = "decklog 16 producers / 1 scope"
SPREAD = "decklog 16 producers / 16 scopes"


@dataclass(frozen=True)
class Options:
    seconds: float
    warmup: float
    workdir: Path | None


def workspace(options: Options) -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="decklog-bench-", dir=options.workdir)


# -- subjects ---------------------------------------------------------------------------------------------------------


def decklog_case(producers: int, scopes: int, options: Options) -> Callable[[], Sample]:
    def run() -> Sample:
        return asyncio.run(_decklog(producers, scopes, options))

    return run


async def _decklog(producers: int, scopes: int, options: Options) -> Sample:
    with workspace(options) as tmp:
        store = SqliteLogStore(Path(tmp), topics=("index", "slack"))
        try:
            names = [f"incident/bench-{i}" for i in range(scopes)]
            for name in names:
                await store.append(name, [DECLARED], create=True)
            latencies: list[float] = []

            async def producer(i: int, until: float, record: bool) -> None:
                scope = names[i % scopes]
                while time.perf_counter() < until:
                    start = time.perf_counter()
                    await store.append(scope, [MESSAGE])
                    if record:
                        latencies.append(time.perf_counter() - start)

            warm_until = time.perf_counter() + options.warmup
            await asyncio.gather(*(producer(i, warm_until, False) for i in range(producers)))
            cpu, began = time.process_time(), time.perf_counter()
            until = began + options.seconds
            await asyncio.gather(*(producer(i, until, True) for i in range(producers)))
            elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
            for name in names:
                report = await store.verify(name)
                assert report.ok, report  # a benchmark of a broken log would be worthless
            files = [f for f in map(store.file_of, names) if f is not None]  # white-box counters
            commits = sum(f.batches for f in files)
            APPENDS_PER_COMMIT.setdefault((producers, scopes), []).append(
                sum(f.requests for f in files) / commits if commits else math.nan
            )
        finally:
            await store.close()
    return Sample(len(latencies), elapsed, latencies, cpu)


# -- baselines --------------------------------------------------------------------------------------------------------


def raw_sqlite_case(options: Options) -> Callable[[], Sample]:
    def run() -> Sample:
        with workspace(options) as tmp:
            conn = wal_full(Path(tmp) / "raw.db")
            try:
                conn.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)")

                def insert() -> None:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.execute("INSERT INTO log (body) VALUES (?)", (ROW,))
                    conn.execute("COMMIT")

                return _threads(1, lambda _i: insert, options)
            finally:
                conn.close()

    return run


def shape_case(threads: int, options: Options) -> Callable[[], Sample]:
    """decklog's append transaction written by hand on raw sqlite3 cursors: its schema (core/store/sqlite/schema.py) and
    statements, one file per thread — what SQLite alone costs for decklog's rows, without decklog's Python."""

    def run() -> Sample:
        with workspace(options) as tmp:
            conns = [_shape_file(Path(tmp) / f"shape-{i}.db") for i in range(threads)]
            try:
                return _threads(threads, lambda i: _shape_op(conns[i]), options)
            finally:
                for conn in conns:
                    conn.close()

    return run


def wal_full(path: Path, *, page_size: int | None = None) -> sqlite3.Connection:
    """A raw connection in autocommit mode (statements say BEGIN/COMMIT), WAL, synchronous=FULL: as decklog's."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    if page_size is not None:
        conn.execute(f"PRAGMA page_size={page_size}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _shape_file(path: Path) -> sqlite3.Connection:
    conn = wal_full(path, page_size=schema.PAGE_SIZE)  # a scope file's layout, its page size included
    for statement in schema.ddl():
        conn.execute(statement)
    conn.execute("INSERT INTO state VALUES (1, 'incident/bench', 1, 0, '', '', ?)", (STATE_BODY,))
    return conn


def _shape_op(conn: sqlite3.Connection) -> Callable[[], None]:
    seq = [0]
    actor, payload = actor_json(MESSAGE.actor), payload_json(MESSAGE.payload)

    def append() -> None:
        seq[0] += 1
        n, digest = seq[0], hashlib.sha256(str(seq[0]).encode()).hexdigest()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("SELECT version, head_hash, head_at FROM state WHERE id = 1").fetchone()
        conn.execute(
            "INSERT INTO entries (seq, id, kind, at, actor, payload, refs, idempotency_key, prev_hash, hash) "
            "VALUES (?, ?, 'message', '2026-12-02T00:44:24.098056Z', ?, ?, '[]', NULL, ?, ?)",
            (n, f"e{n:022x}", actor, payload, digest, digest),
        )
        conn.executemany("INSERT INTO outbox (topic, seq) VALUES (?, ?)", [("index", n), ("slack", n)])
        conn.execute(
            "UPDATE state SET version = ?, head_hash = ?, head_at = ?, body = ? WHERE id = 1",
            (n, digest, "2026-12-02T00:44:24.098056Z", STATE_BODY),
        )
        conn.execute("COMMIT")

    return append


SHARED_DDL = (
    "CREATE TABLE entries (scope INTEGER NOT NULL, seq INTEGER NOT NULL, id VARCHAR NOT NULL UNIQUE, "
    "kind VARCHAR NOT NULL, at VARCHAR NOT NULL, actor TEXT NOT NULL, payload TEXT NOT NULL, refs TEXT NOT NULL, "
    "idempotency_key VARCHAR, prev_hash VARCHAR NOT NULL, hash VARCHAR NOT NULL, PRIMARY KEY (scope, seq))",
    "CREATE UNIQUE INDEX entries_idempotency_key ON entries (scope, idempotency_key) WHERE idempotency_key IS NOT NULL",
    "CREATE INDEX entries_kind_seq ON entries (scope, kind, seq)",
    "CREATE TABLE outbox (topic VARCHAR NOT NULL, scope INTEGER NOT NULL, seq INTEGER NOT NULL, "
    "attempts INTEGER DEFAULT 0 NOT NULL, next_attempt_at FLOAT DEFAULT 0 NOT NULL, published_at FLOAT, "
    "parked_at FLOAT, last_error TEXT DEFAULT '' NOT NULL, PRIMARY KEY (topic, scope, seq)) WITHOUT ROWID",
    "CREATE INDEX outbox_pending ON outbox (topic, scope, seq) WHERE published_at IS NULL AND parked_at IS NULL",
    "CREATE TABLE state (scope INTEGER PRIMARY KEY, name VARCHAR NOT NULL, schema_version INTEGER NOT NULL, "
    "version INTEGER NOT NULL, head_hash VARCHAR NOT NULL, head_at VARCHAR NOT NULL, body TEXT NOT NULL)",
)


def shared_case(scopes: int, options: Options) -> Callable[[], Sample]:
    """The layout decision 135 proposes, at SQLite's level: decklog's rows with a scope column in one file, and one
    writer committing one append for each of ``scopes`` scopes per transaction — what 16 producers on 16 scopes
    would cost SQLite if group commit could span scopes. Each append in a commit waits for it: ops and latencies
    are per append."""

    def run() -> Sample:
        with workspace(options) as tmp:
            conn = wal_full(Path(tmp) / "shared.db")
            try:
                for statement in SHARED_DDL:
                    conn.execute(statement)
                for i in range(scopes):
                    conn.execute("INSERT INTO state VALUES (?, ?, 1, 0, '', '', ?)", (i, f"incident/b-{i}", STATE_BODY))
                commits = _threads(1, lambda _i: _shared_op(conn, scopes), options)
            finally:
                conn.close()
        latencies = [x for x in commits.latencies for _ in range(scopes)]
        return Sample(commits.ops * scopes, commits.seconds, latencies, commits.cpu_seconds)

    return run


def _shared_op(conn: sqlite3.Connection, scopes: int) -> Callable[[], None]:
    seq = [0]
    actor, payload = actor_json(MESSAGE.actor), payload_json(MESSAGE.payload)

    def append_all() -> None:
        seq[0] += 1
        n = seq[0]
        conn.execute("BEGIN IMMEDIATE")
        for scope in range(scopes):
            digest = hashlib.sha256(f"{scope}:{n}".encode()).hexdigest()
            conn.execute("SELECT version, head_hash, head_at FROM state WHERE scope = ?", (scope,)).fetchone()
            conn.execute(
                "INSERT INTO entries (scope, seq, id, kind, at, actor, payload, refs, idempotency_key, prev_hash, "
                "hash) VALUES (?, ?, ?, 'message', '2026-12-02T00:44:24.098056Z', ?, ?, '[]', NULL, ?, ?)",
                (scope, n, f"e{scope:04x}{n:018x}", actor, payload, digest, digest),
            )
            conn.executemany(
                "INSERT INTO outbox (topic, scope, seq) VALUES (?, ?, ?)", [("index", scope, n), ("slack", scope, n)]
            )
            conn.execute(
                "UPDATE state SET version = ?, head_hash = ?, head_at = ?, body = ? WHERE scope = ?",
                (n, digest, "2026-12-02T00:44:24.098056Z", STATE_BODY, scope),
            )
        conn.execute("COMMIT")

    return append_all


def eventsourcing_case(threads: int, options: Options) -> Callable[[], Sample]:
    def run() -> Sample:
        with workspace(options) as tmp:
            datastore = SQLiteDatastore(str(Path(tmp) / "es.db"), pool_size=threads, max_overflow=threads)
            try:
                recorder = SQLiteApplicationRecorder(datastore)
                recorder.create_table()

                def writer(_i: int) -> Callable[[], None]:
                    originator, version = uuid.uuid4(), [0]

                    def insert() -> None:
                        version[0] += 1
                        event = StoredEvent(originator, version[0], EVENT_TOPIC, EVENT_STATE)
                        recorder.insert_events([event])

                    return insert

                return _threads(threads, writer, options)
            finally:
                datastore.close()

    return run


def _threads(count: int, make: Callable[[int], Callable[[], None]], options: Options) -> Sample:
    """Run ``count`` threads, each calling its operation in a loop: a warm-up, then ``options.seconds`` timed."""
    latencies: list[list[float]] = [[] for _ in range(count)]
    barrier = threading.Barrier(count + 1, timeout=60)
    window: list[float] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            op = make(i)
            barrier.wait()
            while time.perf_counter() < window[0]:
                op()
            barrier.wait()
            mine = latencies[i]
            while time.perf_counter() < window[1]:
                start = time.perf_counter()
                op()
                mine.append(time.perf_counter() - start)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    try:
        warm_until = time.perf_counter() + options.warmup
        window.extend([warm_until, warm_until + options.seconds])  # the timed window follows the warm-up
        barrier.wait()
        barrier.wait()
        cpu, began = time.process_time(), time.perf_counter()
    except threading.BrokenBarrierError:
        window[:] = [0.0, 0.0]
        cpu, began = time.process_time(), time.perf_counter()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    if errors:
        raise errors[0]
    flat = [x for per in latencies for x in per]
    return Sample(len(flat), elapsed, flat, cpu)


# -- settings actually in force ---------------------------------------------------------------------------------------


def settings_in_force(options: Options) -> dict[str, str]:
    """Read back the durability settings each contender really runs with (not what it is supposed to)."""
    out: dict[str, str] = {}
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    with workspace(options) as tmp:
        engine = make_engine(Path(tmp) / "decklog.db")
        with engine.connect() as conn:
            journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
        engine.dispose()
        out["decklog"] = f"journal_mode={journal}, synchronous={names.get(int(sync or 0))}"
        datastore = SQLiteDatastore(str(Path(tmp) / "es.db"))
        try:
            SQLiteApplicationRecorder(datastore).create_table()
            with datastore.transaction(commit=False) as cursor:
                cursor.execute("PRAGMA journal_mode")
                journal = cursor.fetchone()[0]
                cursor.execute("PRAGMA synchronous")
                sync = cursor.fetchone()[0]
        finally:
            datastore.close()
        compiled = sqlite3.connect(":memory:").execute("PRAGMA compile_options").fetchall()
        defaults = [o[0] for o in compiled if "SYNCHRONOUS" in o[0]]
        out["eventsourcing"] = (
            f"journal_mode={journal}, synchronous={names.get(int(sync))} — it sets no synchronous pragma, so this "
            f"is SQLite's compiled-in default ({', '.join(defaults) or 'not listed'})"
        )
    return out


# -- report -----------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small run (< 20 s) to check the script works")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 9; quick 2)")
    parser.add_argument("--seconds", type=float, help="timed seconds per case per round (default 1; quick 0.3)")
    parser.add_argument("--dir", type=Path, help="where to put the database files (default: the system temp dir)")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DECKLOG_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
        help="with --backend postgresql: the server (a scratch database is made on it and dropped)",
    )
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 9)
    seconds = args.seconds or (0.3 if args.quick else 1.0)
    if args.backend == "postgresql":
        from _append_pg import run_postgres

        run_postgres(args.database_url, rounds, seconds, args.quick)
        return
    options = Options(seconds=seconds, warmup=min(0.5, seconds / 4), workdir=args.dir)

    settings = settings_in_force(options)
    load_before = os.getloadavg()[0]
    cases: dict[str, Callable[[], Sample]] = {
        RAW: raw_sqlite_case(options),
        SHAPE1: shape_case(1, options),
        SHAPE16: shape_case(16, options),
        SHARED: shared_case(16, options),
        ES1: eventsourcing_case(1, options),
        ES16: eventsourcing_case(16, options),
        ONE: decklog_case(1, 1, options),
        SIXTEEN: decklog_case(16, 1, options),
        SPREAD: decklog_case(16, 16, options),
    }
    note(f"{len(cases)} cases × {rounds} rounds × {seconds:g} s, interleaved; settings: {settings}")
    started = time.perf_counter()
    results = interleave(
        cases,
        rounds,
        progress=lambda r, name, s: note(
            f"  round {r + 1}: {name:<36} {s.rate:>9,.0f}/s  p50 {s.percentile_ms(50):6.2f} ms"
            f"  p99 {s.percentile_ms(99):6.2f} ms"
        ),
    )
    took = time.perf_counter() - started
    load_after = os.getloadavg()[0]

    es_for = {ONE: ES1, SIXTEEN: ES16, SPREAD: ES16}
    rows: list[list[str]] = []
    for name, samples in results.items():
        rates = [s.rate for s in samples]
        p99 = median_percentile_ms(samples, 99)
        row = [
            name,
            fmt_rate(median_rate(samples)),
            f"{fmt_rate(min(rates))}–{fmt_rate(max(rates))}",
            fmt_ms(median_percentile_ms(samples, 50)),
            fmt_ms(p99),
            fmt_us(median_cpu_us(samples)),
            fmt_ratio(paired_ratio(samples, results[RAW])),
        ]
        if name in es_for:
            vs_es = paired_ratio(samples, results[es_for[name]])
            row.append(f"{fmt_ratio(vs_es)} (vs {'1' if es_for[name] == ES1 else '16'} thr.)")
            targets = [f"p99 ≤ 10 ms {verdict(p99 <= 10.0)}"]
            if name != ONE:
                targets.append(f"≥ 0.6× raw {verdict(paired_ratio(samples, results[RAW]) >= 0.6)}")
                targets.append(f"≥ 1.5× ES {verdict(vs_es >= 1.5)}")
            row.append(", ".join(targets))
        else:
            row += ["", "baseline"]
        rows.append(row)

    headers = ["case", "appends/s (median)", "rounds min–max", "p50 ms", "p99 ms", "CPU µs/append", "× raw sqlite3"]
    headers += ["× eventsourcing", "targets (informational)"]
    print(f"### Append throughput — {'quick' if args.quick else 'full'} run")
    print()
    print(
        f"{rounds} interleaved rounds × {seconds:g} s per case; medians over rounds; ratios are medians of "
        f"within-round ratios. Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"eventsourcing {metadata.version('eventsourcing')}, {os.cpu_count()} CPUs; {took:.0f} s in all; "
        f"1-min load average {load_before:.1f} before, {load_after:.1f} after."
    )
    if max(load_before, load_after) > (os.cpu_count() or 1):
        print()
        print(
            "> **The machine was busy with other work during this run** (load above the CPU count): throughput and"
            " latency of the CPU-heavier cases suffer most; CPU µs/append is the figure least affected."
        )
    print()
    print(markdown_table(headers, rows))
    print()
    print(f"- decklog: {settings['decklog']}; every append awaited until committed; `verify` ok after each run.")
    print(f"- eventsourcing: {settings['eventsourcing']}; `SQLiteApplicationRecorder.insert_events`, one event each.")
    print("- raw sqlite3: `BEGIN IMMEDIATE; INSERT one row; COMMIT` on one connection, rows of about the same size.")
    print(
        "- raw sqlite3, decklog's transaction: decklog's schema and statements on raw cursors (read the head; insert"
        " the entry and its two outbox rows; update the state row; commit), one file per thread: SQLite's own cost"
        " of decklog's rows; decklog's row ÷ this row is what decklog's Python adds."
    )
    print("- The × eventsourcing column compares with the eventsourcing run of the same producer count.")
    print("- CPU µs/append: process CPU time (all threads) in the timed window divided by acknowledged appends.")
    grouped = ", ".join(
        f"{p} producer{'s' if p > 1 else ''} / {n} scope{'s' if n > 1 else ''}: {median(v):.1f}"
        for (p, n), v in sorted(APPENDS_PER_COMMIT.items())
    )
    print(f"- decklog appends per commit (group commit; median over rounds, whole run incl. warm-up): {grouped}.")
    print(
        f"- decklog ÷ decklog's transaction on raw sqlite3, same shape: 1 / 1 "
        f"{fmt_ratio(paired_ratio(results[ONE], results[SHAPE1]))}, 16 / 16 "
        f"{fmt_ratio(paired_ratio(results[SPREAD], results[SHAPE16]))} (the rest is decklog's Python per append)."
    )
    print(f"- {feasibility(results)}")


def feasibility(results: dict[str, list[Sample]]) -> str:
    """The ratio targets restated in × raw, beside what SQLite alone makes of decklog's transaction in that shape."""

    def raw(name: str) -> float:
        return paired_ratio(results[name], results[RAW])

    return (
        "What the targets ask, in × raw sqlite3, beside what SQLite alone makes of decklog's rows in that shape: "
        f"16 / 16 needs max(0.6×, 1.5 × {fmt_ratio(raw(ES16))}) = {fmt_ratio(max(0.6, 1.5 * raw(ES16)))}, where "
        f"one file per scope gives SQLite alone {fmt_ratio(raw(SHAPE16))} and one shared file with 16 scopes per "
        f"commit {fmt_ratio(raw(SHARED))}; 1 / 1 needs max(0.6×, 1.5 × {fmt_ratio(raw(ES1))}) = "
        f"{fmt_ratio(max(0.6, 1.5 * raw(ES1)))}, where SQLite alone gives {fmt_ratio(raw(SHAPE1))} (decision 135)."
    )


if __name__ == "__main__":
    main()
