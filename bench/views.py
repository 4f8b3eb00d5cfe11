"""Views against the full history: size and build time for incidents of 100, 1,000 and 10,000 entries.

For each size it builds a realistic incident log (messages, repeated alerts, observations, hypotheses, decisions,
obligations, proposals…) with a ManualClock, then measures, per view:

- bytes of the view vs bytes of the full history (every entry as ``timeline --json`` shows it) — target ≤ 5 % at
  10,000 entries;
- build time (state + the entries the view needs) vs the baseline measured in the same run: reading the whole
  log and folding it (what a view must not do) — target p50 ≤ 5 ms at 10,000 entries. "Turn" builds are what a
  running process does on each turn (3 new entries since the last build: only those are read); "cold" builds
  are the first after a start (nothing remembered). A second table shows what an index on entries(kind, seq)
  — not in the store's schema today — would change.

Then the debounce: a burst of 100 warranting entries inside the debounce window → exactly one turn.

    .venv/bin/python bench/views.py [--sizes 100,1000,10000] [--runs 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from decklog.core.agents import AgentsSender, TurnInput, TurnOutput, TurnRuntime, TurnScheduler
from decklog.core.alarm import AsyncioAlarm
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, NewEntry
from decklog.core.state import fold_all
from decklog.core.store.sqlite.log_store import SqliteLogStore
from decklog.core.views import VIEW_NAMES, ViewCache, build_view

SCOPE = "incident/bench"
PEOPLE = [Actor.human(f"U{i:03d}", name) for i, name in enumerate(["alice", "bob", "carol", "dan", "erin"])]
ALERTS = Actor.system("alertmanager")
AGENT = Actor.agent("rules", "decklog rules")


def entry_for(i: int, rng: random.Random, open_obligations: list[str]) -> NewEntry:
    """The i-th entry of a busy incident: mostly chatter and alert repeats, a little structure."""
    roll = rng.random()
    if roll < 0.55:
        who = rng.choice(PEOPLE)
        text = f"update {i}: {rng.choice(['checking the pool', 'p99 still high', 'rolling restart done', 'looking at traces', 'db cpu 80%'])}"
        return NewEntry.make("message", who, {"text": text, "channel": "C0ALERTS", "ts": f"{1000 + i}.000100"})
    if roll < 0.80:
        fp = f"fp-{rng.randrange(12)}"
        status = "firing" if rng.random() < 0.85 else "resolved"
        payload = {
            "text": f"{fp} HTTP 5xx above 5% on payments-{fp[-1]}",
            "source": "alertmanager",
            "service": "payments",
            "fingerprint": fp,
            "alert_status": status,
            "labels": {"alertname": "Payments5xx", "region": rng.choice(["eu-west-1", "us-east-1"])},
        }
        return NewEntry.make("observation", ALERTS, payload)
    if roll < 0.90:
        return NewEntry.make(
            "observation", rng.choice(PEOPLE), {"text": f"metric {i}: error budget burn {rng.randint(2, 40)}x"}
        )
    if roll < 0.93:
        return NewEntry.make(
            "hypothesis", AGENT, {"text": f"hypothesis {i}: the db pool is exhausted", "confidence": 0.5}
        )
    if roll < 0.95:
        return NewEntry.make(
            "decision",
            rng.choice(PEOPLE),
            {"text": f"decision {i}: shed 10% of traffic", "expected_outcome": "5xx under 1%"},
        )
    if roll < 0.96 and len(open_obligations) < 12:
        oid = f"ob-{i}"
        open_obligations.append(oid)
        return NewEntry.make(
            "obligation_opened",
            rng.choice(PEOPLE),
            {"obligation_id": oid, "text": f"follow up {i}", "purpose": "follow_up"},
        )
    if roll < 0.97 and open_obligations:
        return NewEntry.make("obligation_fulfilled", rng.choice(PEOPLE), {"obligation_id": open_obligations.pop(0)})
    if roll < 0.98:
        return NewEntry.make(
            "evidence", rng.choice(PEOPLE), {"text": f"pinned graph {i}", "channel": "C0ALERTS", "ts": f"{1000 + i}.5"}
        )
    return NewEntry.make(
        "status_changed", rng.choice(PEOPLE), {"status": rng.choice(["investigating", "identified", "monitoring"])}
    )


async def build_log(store: SqliteLogStore, clock: ManualClock, size: int) -> None:
    rng = random.Random(size)
    declared = NewEntry.make("declared", ALERTS, {"title": "Payments 5xx", "severity": 2, "services": ["payments"]})
    await store.append(SCOPE, [declared], create=True)
    await store.append(
        SCOPE,
        [NewEntry.make("role_assigned", PEOPLE[0], {"role": "commander", "user_id": "U000", "user_name": "alice"})],
    )
    await store.append(SCOPE, [NewEntry.make("goal", PEOPLE[0], {"text": "restore checkout"})])
    open_obligations: list[str] = []
    batch: list[NewEntry] = []
    for i in range(size - 3):
        batch.append(entry_for(i, rng, open_obligations))
        if len(batch) == 500:
            clock.advance(seconds=30)
            await store.append(SCOPE, batch)
            batch = []
    if batch:
        await store.append(SCOPE, batch)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def add_kind_index(data_dir: Path) -> None:
    """What the store would do with an index on entries(kind, seq) (not in the schema today; suggested)."""
    for path in (data_dir / "scopes").glob("*.db"):
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE INDEX IF NOT EXISTS entries_kind_seq ON entries(kind, seq)")


async def measure(size: int, runs: int, root: Path, *, kind_index: bool = False) -> list[dict[str, object]]:
    """Per view: a cold build (a fresh store: nothing remembered) and steady builds (a turn after a few more
    entries were appended: the view reads only what is new)."""
    clock = ManualClock()
    data_dir = root / f"s{size}{'-indexed' if kind_index else ''}"
    store = SqliteLogStore(data_dir, topics=("index",), clock=clock)
    try:
        await build_log(store, clock, size)
        await store.close()
        if kind_index:
            add_kind_index(data_dir)
        store = SqliteLogStore(data_dir, topics=("index",), clock=clock)
        entries = await store.read(SCOPE)
        history = sum(len(json.dumps(e.to_json(), ensure_ascii=False, separators=(",", ":")).encode()) for e in entries)
        replay: list[float] = []
        for _ in range(max(3, runs // 10)):
            started = time.perf_counter()
            fold_all(SCOPE, await store.read(SCOPE))
            replay.append((time.perf_counter() - started) * 1000)
        rows: list[dict[str, object]] = []
        rng = random.Random(size + 1)
        for name in VIEW_NAMES:
            cold: list[float] = []
            for _ in range(5):
                fresh = SqliteLogStore(data_dir, topics=("index",), clock=clock)
                try:
                    await fresh.get_state(SCOPE)  # open the file: opening is not building
                    started = time.perf_counter()
                    await build_view(fresh, SCOPE, name)
                    cold.append((time.perf_counter() - started) * 1000)
                finally:
                    await fresh.close()
            cache = ViewCache()  # what a runtime remembers between its turns
            await build_view(store, SCOPE, name, cache=cache)
            times: list[float] = []
            cpu: list[float] = []
            view = None
            for i in range(runs):
                await store.append(SCOPE, [entry_for(size + i, rng, []) for _ in range(3)])  # the turn's new input
                started, started_cpu = time.perf_counter(), time.process_time()
                view = await build_view(store, SCOPE, name, cache=cache)
                times.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - started_cpu) * 1000)
            assert view is not None
            rows.append(
                {
                    "entries": size,
                    "view": name,
                    "view_bytes": view.bytes,
                    "history_bytes": history,
                    "ratio": view.bytes / history,
                    "cold_ms": statistics.median(cold),
                    "p50_ms": statistics.median(times),
                    "p95_ms": pct(times, 0.95),
                    "cpu_ms": statistics.median(cpu),
                    "replay_ms": statistics.median(replay),
                    "omitted": len(view.omitted),
                }
            )
        return rows
    finally:
        await store.close()


class CountingReasoner:
    name = "bench"
    model = ""
    wants_wakes = False

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, turn: TurnInput) -> TurnOutput:
        self.calls += 1
        return TurnOutput()


async def burst(root: Path, debounce: float = 1.0) -> tuple[int, int, float]:
    """100 warranting entries delivered inside one debounce window → how many turns ran."""
    store = SqliteLogStore(root / "burst", topics=("index",))
    alarm = AsyncioAlarm()
    reasoner = CountingReasoner()
    scheduler = TurnScheduler(TurnRuntime(store, reasoner=reasoner), alarm, first_delay=0.0, debounce=debounce)
    sender = AgentsSender(scheduler)
    try:
        declared = await store.append(SCOPE, [NewEntry.make("declared", PEOPLE[0], {"title": "Burst"})], create=True)
        await sender.deliver(SCOPE, declared.entries)
        started = time.perf_counter()

        async def one(i: int) -> None:
            result = await store.append(SCOPE, [NewEntry.make("message", rng_person(i), {"text": f"burst {i}"})])
            await sender.deliver(SCOPE, result.entries)

        await asyncio.gather(*(one(i) for i in range(100)))
        window = time.perf_counter() - started
        await asyncio.sleep(debounce * 3)
        await scheduler.idle()
        return reasoner.calls, scheduler.armed, window
    finally:
        await scheduler.stop()
        await alarm.shutdown()
        await store.close()


def table(rows: list[dict[str, object]]) -> None:
    print(
        "| entries | view | view bytes | history bytes | view / history | cold build p50 | turn build p50 | turn build p95 "
        "| turn build CPU p50 | replay p50 (baseline) | omission lines |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['entries']:,} | {r['view']} | {r['view_bytes']:,} | {r['history_bytes']:,} | {float(r['ratio']):.2%} "  # type: ignore[arg-type]
            f"| {float(r['cold_ms']):.2f} ms | {float(r['p50_ms']):.2f} ms | {float(r['p95_ms']):.2f} ms "  # type: ignore[arg-type]
            f"| {float(r['cpu_ms']):.2f} ms | {float(r['replay_ms']):.1f} ms | {r['omitted']} |"  # type: ignore[arg-type]
        )


def rng_person(i: int) -> Actor:
    return PEOPLE[i % len(PEOPLE)]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows: list[dict[str, object]] = []
        for size in sizes:
            rows.extend(await measure(size, args.runs, root))
        indexed = await measure(max(sizes), args.runs, root, kind_index=True)
        turns, armed, window = await burst(root)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"## Views vs the full history  (load average {load:.1f} on {os.cpu_count()} CPUs)\n")
    table(rows)
    print(f"\nWith an index on entries(kind, seq) (not in the schema; what it would give at {max(sizes):,} entries):\n")
    table(indexed)
    largest = max(sizes)
    at_max = [r for r in rows if r["entries"] == largest]
    worst_ratio = max(float(r["ratio"]) for r in at_max)  # type: ignore[arg-type]
    worst_p50 = max(float(r["p50_ms"]) for r in at_max)  # type: ignore[arg-type]
    worst_cold = max(float(r["cold_ms"]) for r in at_max)  # type: ignore[arg-type]
    print(
        f"\nAt {largest:,} entries: largest view / history = {worst_ratio:.2%} (target ≤ 5 %); slowest view p50 = "
        f"{worst_p50:.2f} ms per turn (target ≤ 5 ms), {worst_cold:.2f} ms cold; replaying the log takes "
        f"{float(at_max[0]['replay_ms']):.0f} ms."  # type: ignore[arg-type]
    )
    print("\n## Debounce\n")
    print("| entries in the burst | burst lasted | debounce | timers armed | turns run |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| 100 | {window * 1000:.0f} ms | 1000 ms | {armed} | {turns} |")
    print(
        f"\nA burst of 100 entries inside the debounce window → {turns} turn{'s' if turns != 1 else ''} (expected 1)."
    )


if __name__ == "__main__":
    asyncio.run(main())
