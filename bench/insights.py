"""Insights at 10,000 incidents: ``core.insights.compute`` (what ``decklog insights`` and ``GET /api/insights``
run) against a baseline in the same run — one raw SQL aggregate over index.db's ``milestones`` table (count and
the three means, no percentiles, no breakdowns: the least any answer must cost).

It fills a fresh index.db with N synthetic incidents (states with realistic milestones, severities, services and
alert sources, declared over the last 90 days) through ``SqliteIndex.rebuild``, then times, interleaved round after
round, the window of 30 days and all time. Nothing replays a log: the numbers come from one row per incident.

    .venv/bin/python bench/insights.py [--incidents 10000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from decklog.core.clock import iso
from decklog.core.insights import compute
from decklog.core.state import AlertState, ScopeState
from decklog.core.store.sqlite.index import SqliteIndex

SERVICES = ["payments", "search", "checkout", "auth", "api", "db", "cache", "queue"]
SOURCES = ["alertmanager", "grafana", "datadog", "pagerduty", ""]
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def incident(i: int, rng: random.Random) -> ScopeState:
    declared = NOW - timedelta(seconds=rng.uniform(0, 90 * 86400))
    ack = declared + timedelta(seconds=rng.expovariate(1 / 180))
    mitigated = ack + timedelta(seconds=rng.expovariate(1 / 1200))
    resolved = mitigated + timedelta(seconds=rng.expovariate(1 / 1800))
    done = rng.random() < 0.9
    source = rng.choice(SOURCES)
    alerts = {f"fp{i}": AlertState(fingerprint=f"fp{i}", status="firing", source=source, first_seq=2)} if source else {}
    return ScopeState(
        scope=f"incident/bench-{i}",
        title=f"bench incident {i}",
        status="resolved" if done else rng.choice(["investigating", "identified", "mitigated"]),
        severity=rng.choice([1, 2, 2, 3, 3, 3, 4, None]),
        services=tuple(rng.sample(SERVICES, rng.choice([0, 1, 1, 2]))),
        version=10,
        created_at=iso(declared),
        updated_at=iso(resolved),
        acknowledged_at=iso(ack),
        mitigated_at=iso(mitigated) if done or rng.random() < 0.5 else "",
        resolved_at=iso(resolved) if done else "",
        alerts=alerts,
    )


def baseline(path: Path, since: float | None) -> tuple[float, ...]:
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT count(*), sum(status = 'resolved'), avg(acknowledged - declared), avg(mitigated - declared),"
            " avg(resolved - declared) FROM milestones WHERE declared >= ?",
            (since if since is not None else 0.0,),
        ).fetchone()
    return tuple(float(x or 0) for x in row)


async def main(n: int, rounds: int) -> None:
    rng = random.Random(18)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        path = Path(tmp) / "index.db"
        index = SqliteIndex(path, pool)
        await index.open()
        started = time.perf_counter()
        await index.rebuild([(incident(i, rng), []) for i in range(n)])
        print(f"filled index.db with {n} incidents in {time.perf_counter() - started:.1f} s")
        now = NOW.timestamp()
        for label, days in (("30 days", 30), ("all time", None)):
            since = now - days * 86400 if days else None
            subject, base, ratios = [], [], []
            for _ in range(rounds):
                t0 = time.perf_counter()
                body = await compute(index, since_days=days, now=now)
                t1 = time.perf_counter()
                raw = baseline(path, since)
                t2 = time.perf_counter()
                subject.append(t1 - t0)
                base.append(t2 - t1)
                ratios.append((t1 - t0) / (t2 - t1))
            assert body["incidents"] == int(raw[0]) and body["resolved"] == int(raw[1])
            assert abs(body["mttr_seconds"]["mean"] - raw[4]) < 0.01  # the same rows, the same numbers
            print(
                f"{label:>8}: {body['incidents']:>5} incidents · insights p50 {statistics.median(subject) * 1000:7.1f} ms"
                f" · raw SQL aggregate p50 {statistics.median(base) * 1000:6.1f} ms"
                f" · ratio (median of rounds) {statistics.median(ratios):5.1f}×"
            )
        await index.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(main(args.incidents, args.rounds))
