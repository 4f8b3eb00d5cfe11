"""``bench/append.py --backend postgresql``: the PostgreSQL log store against raw psycopg doing the same transaction.

Subjects: ``PostgresLogStore`` (group commit under the scope row's ``FOR UPDATE``), 1 producer / 1 scope,
16 / 1, 16 / 16, and 3 replicas × 16 producers on one hot scope (three processes, each its own store, competing
for the scope row). Baselines, raw psycopg 3 on the same database, the same transaction
``SELECT head FOR UPDATE; INSERT the entry; INSERT its 2 outbox rows; UPDATE head; COMMIT``: one per append with
1 thread and with 16 threads on one hot scope; and *batched* — 16 threads hand their appends to one writer
thread that commits everything waiting in one transaction, its rows with ``COPY`` as decklog's are
(hand-written group commit: the baseline for decklog's; until 2026-12-02 it used ``executemany``, decision 107).
A fresh database ``decklog_bench_<pid>`` is made on the server of
``--database-url`` (default ``DECKLOG_DATABASE_URL``, else 127.0.0.1:5432/test) and dropped at the end.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import sqlalchemy as sa
from _stats import (
    Sample,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    interleave,
    markdown_table,
    median_percentile_ms,
    median_rate,
    note,
    paired_ratio,
    verdict,
)

from decklog.core.entries import Actor, NewEntry
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.log_store import PostgresLogStore

TEXT = "p99 latency on payments-api is 2.3 s since 03:10; rolling back r2026-09-19-4 looks like the safest bet"
MESSAGE = NewEntry.make("message", Actor.human("U0ALICE", "alice"), {"text": TEXT, "channel": "C0INCIDENT"})
DECLARED = NewEntry.make("declared", Actor.human("U0ALICE", "alice"), {"title": "bench"})
RAW1, RAW16 = "raw psycopg (1 thread)", "raw psycopg (16 threads / 1 scope)"
RAWB = "raw psycopg batched (16 threads / 1 writer)"
ONE, SIXTEEN, SPREAD = "decklog pg 1 producer / 1 scope", "decklog pg 16 producers / 1 scope", "decklog pg 16 / 16"
REPLICAS = "decklog pg 3 replicas × 16 / 1 scope"
PER_SCOPE = "decklog pg 16 / 16, one commit per scope"  # cross-scope group commit off: the same-process baseline


def _scratch(server: str) -> tuple[str, Callable[[], None]]:
    name = f"decklog_bench_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = server.rsplit("/", 1)[0] + "/" + name

    def drop() -> None:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    engine = pg.make_engine(url)
    with engine.begin() as c:
        pg.ensure_schema(c)
    engine.dispose()
    return url, drop


def _decklog(url: str, producers: int, scopes: int, seconds: float, warmup: float, *, cross: bool = True) -> Sample:
    async def go() -> Sample:
        store = PostgresLogStore(url, topics=("index", "slack"), cross_scope=cross)
        run = f"{time.monotonic_ns()}"
        names = [f"incident/b{run}-{i}" for i in range(scopes)]
        try:
            for name in names:
                await store.append(name, [DECLARED], create=True)
            latencies: list[float] = []

            async def producer(i: int, until: float, record: bool) -> None:
                while time.perf_counter() < until:
                    start = time.perf_counter()
                    await store.append(names[i % scopes], [MESSAGE])
                    if record:
                        latencies.append(time.perf_counter() - start)

            await asyncio.gather(*(producer(i, time.perf_counter() + warmup, False) for i in range(producers)))
            cpu, began = time.process_time(), time.perf_counter()
            await asyncio.gather(*(producer(i, began + seconds, True) for i in range(producers)))
            elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
            for name in names:
                assert (await store.verify(name)).ok
        finally:
            await store.close()
        return Sample(len(latencies), elapsed, latencies, cpu)

    return asyncio.run(go())


def _raw(url: str, threads: int, seconds: float, warmup: float) -> Sample:
    """The same transaction decklog's append makes, by hand, one per append (no batching)."""
    scope = f"raw/{time.monotonic_ns()}"
    row = MESSAGE.model_dump_json()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scope_heads (scope_id, version, head_hash, head_at, body) VALUES (%s, 0, '', '', '{}')",
            (scope,),
        )
    latencies: list[list[float]] = [[] for _ in range(threads)]
    window: dict[str, float] = {}
    barrier = threading.Barrier(threads + 1)

    def worker(i: int) -> None:
        with psycopg.connect(url) as conn:
            barrier.wait()
            while True:
                now = time.perf_counter()
                if now >= window["end"]:
                    return
                with conn.transaction():
                    (version,) = conn.execute(
                        "SELECT version FROM scope_heads WHERE scope_id = %s FOR UPDATE", (scope,)
                    ).fetchone() or (0,)
                    seq = int(version) + 1
                    conn.execute(
                        "INSERT INTO entries (scope_id, seq, id, kind, at, actor, payload, refs, prev_hash, hash) "
                        "VALUES (%s, %s, %s, 'message', '', '{}', %s, '[]', '', '')",
                        (scope, seq, f"{scope}-{seq}", row),
                    )
                    conn.execute(
                        "INSERT INTO outbox (scope_id, topic, seq) VALUES (%s, 'index', %s), (%s, 'slack', %s)",
                        (scope, seq, scope, seq),
                    )
                    conn.execute(
                        "UPDATE scope_heads SET version = %s, body = %s WHERE scope_id = %s", (seq, row, scope)
                    )
                if now >= window["start"]:
                    latencies[i].append(time.perf_counter() - now)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    window["start"] = time.perf_counter() + warmup
    window["end"] = window["start"] + seconds
    cpu = time.process_time()
    barrier.wait()
    for t in pool:
        t.join()
    flat = [x for per in latencies for x in per]
    return Sample(len(flat), seconds, flat, time.process_time() - cpu)


def _raw_tx(conn: psycopg.Connection[Any], scope: str, row: str, n: int) -> None:
    """One transaction appending ``n`` entries to ``scope`` (the shape of decklog's, by hand: its rows go in with
    ``COPY``, as decklog's do, core/store/postgres/log_store.py)."""
    with conn.transaction():
        (version,) = conn.execute(
            "SELECT version FROM scope_heads WHERE scope_id = %s FOR UPDATE", (scope,)
        ).fetchone() or (0,)
        seqs = range(int(version) + 1, int(version) + 1 + n)
        with conn.cursor() as cur:
            with cur.copy(
                "COPY entries (scope_id, seq, id, kind, at, actor, payload, refs, prev_hash, hash) FROM STDIN"
            ) as copy:
                for seq in seqs:
                    copy.write_row((scope, seq, f"{scope}-{seq}", "message", "", "{}", row, "[]", "", ""))
            with cur.copy("COPY outbox (scope_id, topic, seq) FROM STDIN") as copy:
                for seq in seqs:
                    copy.write_row((scope, "index", seq))
                    copy.write_row((scope, "slack", seq))
        conn.execute("UPDATE scope_heads SET version = %s, body = %s WHERE scope_id = %s", (seqs[-1], row, scope))


def _raw_batched(url: str, threads: int, seconds: float, warmup: float) -> Sample:
    """16 producer threads, one writer thread committing every append waiting in one transaction."""
    scope = f"rawb/{time.monotonic_ns()}"
    row = MESSAGE.model_dump_json()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scope_heads (scope_id, version, head_hash, head_at, body) VALUES (%s, 0, '', '', '{}')",
            (scope,),
        )
    waiting: list[threading.Event] = []
    ready = threading.Condition()
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(threads)]
    window: dict[str, float] = {}
    barrier = threading.Barrier(threads + 2)

    def writer() -> None:
        with psycopg.connect(url) as conn:
            barrier.wait()
            while not stop.is_set():
                with ready:
                    while not waiting and not stop.is_set():
                        ready.wait(0.05)
                    batch = waiting[:]
                    waiting.clear()
                if batch:
                    _raw_tx(conn, scope, row, len(batch))
                    for done in batch:
                        done.set()

    def producer(i: int) -> None:
        barrier.wait()
        while True:
            now = time.perf_counter()
            if now >= window["end"]:
                return
            done = threading.Event()
            with ready:
                waiting.append(done)
                ready.notify()
            done.wait()
            if now >= window["start"]:
                latencies[i].append(time.perf_counter() - now)

    pool = [threading.Thread(target=producer, args=(i,)) for i in range(threads)]
    w = threading.Thread(target=writer)
    for t in [w, *pool]:
        t.start()
    window["start"] = time.perf_counter() + warmup
    window["end"] = window["start"] + seconds
    cpu = time.process_time()
    barrier.wait()
    for t in pool:
        t.join()
    stop.set()
    w.join()
    flat = [x for per in latencies for x in per]
    return Sample(len(flat), seconds, flat, time.process_time() - cpu)


def _replica_child(url: str, scope: str, producers: int, warmup: float, seconds: float, ready: Any, out: Any) -> None:
    """In a child process: ``producers`` appenders on a store of its own; once every replica is connected
    (``ready``, a barrier), ``warmup`` seconds unmeasured, then ``seconds`` measured. Puts (latencies, CPU s)."""

    async def go() -> tuple[list[float], float]:
        store = PostgresLogStore(url, topics=("index", "slack"))
        latencies: list[float] = []
        try:
            await store.append(scope, [MESSAGE])  # connections made, schema checked
            await asyncio.get_running_loop().run_in_executor(None, ready.wait)
            start_at = time.perf_counter() + warmup
            end = start_at + seconds

            async def producer() -> None:
                while (now := time.perf_counter()) < end:
                    await store.append(scope, [MESSAGE])
                    if now >= start_at:
                        latencies.append(time.perf_counter() - now)

            cpu = time.process_time()
            await asyncio.gather(*(producer() for _ in range(producers)))
            cpu = time.process_time() - cpu
        finally:
            await store.close()
        return latencies, cpu

    out.put(asyncio.run(go()))


def _replicas(url: str, replicas: int, producers: int, seconds: float, warmup: float) -> Sample:
    """``replicas`` processes × ``producers`` on one hot scope, all competing for its row lock."""
    import multiprocessing

    scope = f"incident/r{time.monotonic_ns()}"

    async def declare() -> None:
        store = PostgresLogStore(url, topics=("index", "slack"))
        try:
            await store.append(scope, [DECLARED], create=True)
        finally:
            await store.close()

    asyncio.run(declare())
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Barrier(replicas), ctx.Queue()
    procs = [
        ctx.Process(target=_replica_child, args=(url, scope, producers, warmup, seconds, ready, out))
        for _ in range(replicas)
    ]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join()

    async def check() -> None:
        store = PostgresLogStore(url, topics=("index", "slack"))
        try:
            assert (await store.verify(scope)).ok
        finally:
            await store.close()

    asyncio.run(check())
    flat = [x for lat, _cpu in results for x in lat]
    return Sample(len(flat), seconds, flat, sum(cpu for _lat, cpu in results))


def run_postgres(server: str, rounds: int, seconds: float, quick: bool) -> None:
    url, drop = _scratch(server)
    warmup = min(0.5, seconds / 4)
    try:
        cases: dict[str, Callable[[], Sample]] = {
            RAW1: lambda: _raw(url, 1, seconds, warmup),
            RAW16: lambda: _raw(url, 16, seconds, warmup),
            RAWB: lambda: _raw_batched(url, 16, seconds, warmup),
            ONE: lambda: _decklog(url, 1, 1, seconds, warmup),
            SIXTEEN: lambda: _decklog(url, 16, 1, seconds, warmup),
            SPREAD: lambda: _decklog(url, 16, 16, seconds, warmup),
            PER_SCOPE: lambda: _decklog(url, 16, 16, seconds, warmup, cross=False),
            REPLICAS: lambda: _replicas(url, 3, 16, seconds, warmup),
        }
        results = interleave(
            cases,
            rounds,
            progress=lambda r, name, s: note(f"  round {r + 1}: {name:<36} {s.rate:>9,.0f}/s"),
        )
    finally:
        drop()
    baseline = {ONE: RAW1, SIXTEEN: RAWB, SPREAD: RAW16, PER_SCOPE: RAW16, REPLICAS: RAWB}
    rows: list[list[Any]] = []
    for name, samples in results.items():
        p99 = median_percentile_ms(samples, 99)
        row = [name, fmt_rate(median_rate(samples)), fmt_ms(median_percentile_ms(samples, 50)), fmt_ms(p99)]
        if name in baseline:
            ratio = paired_ratio(samples, results[baseline[name]])
            target = f"p99 ≤ 20 ms {verdict(p99 <= 20.0)}" + (
                f", ≥ 0.8× raw batched {verdict(ratio >= 0.8)}" if name == SIXTEEN else ""
            )
            row += [f"{fmt_ratio(ratio)} (vs {baseline[name]})", target]
        else:
            row += ["", "baseline"]
        rows.append(row)
    version = sa.__version__
    print(f"### PostgreSQL append throughput — {'quick' if quick else 'full'} run")
    print()
    print(f"{rounds} interleaved rounds × {seconds:g} s per case; psycopg {psycopg.__version__}, SQLAlchemy {version}.")
    print()
    print(markdown_table(["case", "appends/s", "p50 ms", "p99 ms", "× raw psycopg", "targets"], rows))
    cross, alone = results[SPREAD], results[PER_SCOPE]
    print()
    print(
        f"16 / 16, cross-scope group commit vs one commit per scope (same process, interleaved): "
        f"{fmt_ratio(paired_ratio(cross, alone))} the rate; p99 {fmt_ms(median_percentile_ms(cross, 99))} vs "
        f"{fmt_ms(median_percentile_ms(alone, 99))} ms"
    )
