"""``bench/append.py --backend postgresql``: the PostgreSQL log store against raw psycopg doing the same transaction.

Subjects: ``PostgresLogStore`` (group commit under the scope row's ``FOR UPDATE``), 1 producer / 1 scope,
16 / 1 and 16 / 16. Baselines, raw psycopg 3 on the same database, per append one transaction of the same shape:
``SELECT head FOR UPDATE; INSERT entry; INSERT 2 outbox rows; UPDATE head; COMMIT`` — with 1 thread, and with 16
threads on one hot scope (one transaction each). A fresh database ``decklog_bench_<pid>`` is made on the server of
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

from core.entries import Actor, NewEntry
from core.store import postgres_schema as pg
from core.store.postgres import PostgresLogStore

TEXT = "p99 latency on payments-api is 2.3 s since 03:10; rolling back r2026-09-19-4 looks like the safest bet"
MESSAGE = NewEntry.make("message", Actor.human("U0ALICE", "alice"), {"text": TEXT, "channel": "C0INCIDENT"})
DECLARED = NewEntry.make("declared", Actor.human("U0ALICE", "alice"), {"title": "bench"})
RAW1, RAW16 = "raw psycopg (1 thread)", "raw psycopg (16 threads / 1 scope)"
ONE, SIXTEEN, SPREAD = "decklog pg 1 producer / 1 scope", "decklog pg 16 producers / 1 scope", "decklog pg 16 / 16"


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


def _decklog(url: str, producers: int, scopes: int, seconds: float, warmup: float) -> Sample:
    async def go() -> Sample:
        store = PostgresLogStore(url, topics=("index", "slack"))
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


def run_postgres(server: str, rounds: int, seconds: float, quick: bool) -> None:
    url, drop = _scratch(server)
    warmup = min(0.5, seconds / 4)
    try:
        cases: dict[str, Callable[[], Sample]] = {
            RAW1: lambda: _raw(url, 1, seconds, warmup),
            RAW16: lambda: _raw(url, 16, seconds, warmup),
            ONE: lambda: _decklog(url, 1, 1, seconds, warmup),
            SIXTEEN: lambda: _decklog(url, 16, 1, seconds, warmup),
            SPREAD: lambda: _decklog(url, 16, 16, seconds, warmup),
        }
        results = interleave(
            cases,
            rounds,
            progress=lambda r, name, s: note(f"  round {r + 1}: {name:<36} {s.rate:>9,.0f}/s"),
        )
    finally:
        drop()
    baseline = {ONE: RAW1, SIXTEEN: RAW16, SPREAD: RAW16}
    rows: list[list[Any]] = []
    for name, samples in results.items():
        p99 = median_percentile_ms(samples, 99)
        row = [name, fmt_rate(median_rate(samples)), fmt_ms(median_percentile_ms(samples, 50)), fmt_ms(p99)]
        if name in baseline:
            ratio = paired_ratio(samples, results[baseline[name]])
            target = f"p99 ≤ 20 ms {verdict(p99 <= 20.0)}" + (
                f", ≥ 0.8× raw {verdict(ratio >= 0.8)}" if name == SIXTEEN else ""
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
