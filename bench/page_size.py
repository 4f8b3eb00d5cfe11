"""Appends to scope files with 1 KB pages (``schema.PAGE_SIZE``, decision 179) against 4 KB pages (SQLite's default,
every scope file before), interleaved in one process: the real ``SqliteLogStore``, WAL + ``synchronous=FULL``,
``message`` entries each awaited until committed, two outbox topics.

Shapes: 1 producer / 1 scope; 16 producers / 16 scopes (one file each); 1 producer / 1 scope whose state is about
3 KB (it goes to overflow pages at 1 KB). Each round runs both page sizes, in alternating order; the figures are
medians over rounds of appends/s, CPU µs per append (process time over acknowledged appends) and the within-round
ratios 1 KB ÷ 4 KB. No number here is ever asserted.

    .venv/bin/python bench/page_size.py [--seconds 1.0] [--rounds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from decklog.core.entries import Actor, NewEntry
from decklog.core.store.sqlite import schema
from decklog.core.store.sqlite.log_store import SqliteLogStore

ALICE = Actor.human("U0ALICE", "alice")
TEXT = "p99 latency on payments-api is 2.3 s since 03:10; rolling back r2026-09-19-4 looks like the safest bet"
SHAPES = ((1, 1, False), (16, 16, False), (1, 1, True))  # producers, scopes, a big state
PAGES = (4096, 1024)


async def one_case(page: int, producers: int, scopes: int, big_state: bool, seconds: float) -> tuple[float, float]:
    """Appends/s and CPU µs per append of one shape with scope files of ``page`` bytes."""
    schema.PAGE_SIZE = page  # read when a scope file is made (ScopeFile, and the spares: none here)
    with tempfile.TemporaryDirectory(prefix="decklog-pages-") as tmp:
        store = SqliteLogStore(Path(tmp), topics=("index", "slack"), spare_files=0)
        try:
            names = [f"incident/bench-{i}" for i in range(scopes)]
            services = [f"svc-{k}" for k in range(60 if big_state else 1)]
            for name in names:
                declared = NewEntry.make("declared", ALICE, {"title": "bench", "severity": 2, "services": services})
                await store.append(name, [declared], create=True)
            stop = time.perf_counter() + seconds
            count = 0

            async def producer(i: int) -> None:
                nonlocal count
                scope = names[i % scopes]
                while time.perf_counter() < stop:
                    await store.append(scope, [NewEntry.make("message", ALICE, {"text": TEXT, "channel": "C0INC"})])
                    count += 1

            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(producer(i) for i in range(producers)))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            report = await store.verify(names[0])
            if not report.ok:
                raise SystemExit(f"verify failed: {report}")
            return count / wall, cpu / count * 1e6
        finally:
            await store.close()


async def run(seconds: float, rounds: int) -> None:
    load = os.getloadavg()[0]
    print(f"page size: 1 KB against 4 KB scope files; {rounds} rounds x {seconds} s per case; load {load:.1f} before")
    for producers, scopes, big in SHAPES:
        got: dict[int, list[tuple[float, float]]] = {p: [] for p in PAGES}
        rate_ratios, cpu_ratios = [], []
        for r in range(rounds):
            one = {}
            for page in PAGES if r % 2 == 0 else tuple(reversed(PAGES)):
                one[page] = await one_case(page, producers, scopes, big, seconds)
                got[page].append(one[page])
            rate_ratios.append(one[1024][0] / one[4096][0])
            cpu_ratios.append(one[1024][1] / one[4096][1])

        def med(values: list[float]) -> float:
            return statistics.median(values)

        shape = f"{producers} producers / {scopes} scopes" + (" (state ~3 KB)" if big else "")
        print(
            f"  {shape:<34} 4 KB {med([x[0] for x in got[4096]]):.0f}/s {med([x[1] for x in got[4096]]):.0f} µs CPU; "
            f"1 KB {med([x[0] for x in got[1024]]):.0f}/s {med([x[1] for x in got[1024]]):.0f} µs CPU; "
            f"1 KB ÷ 4 KB: appends/s {med(rate_ratios):.2f}x (rounds {min(rate_ratios):.2f}–{max(rate_ratios):.2f}), "
            f"CPU/append {med(cpu_ratios):.2f}x",
            flush=True,
        )
    print(f"load {os.getloadavg()[0]:.1f} after")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=6)
    a = parser.parse_args()
    asyncio.run(run(a.seconds, a.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
