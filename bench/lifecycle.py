"""The lifecycle job's pass (core/lifecycle.py: archives and reminders that have fallen due) over an index of N
incidents, against a baseline in the same run: one ``list_scopes`` over the index and one ``get_state`` per
candidate (open SEV1/SEV2 incidents, incidents resolved within the scan window) — what a pass costs that reads every
candidate's state. The job reads a candidate again only when its index version changed or its next item's time
came (a cache of what the last pass found); the first pass reads everything, as after a restart.

The index holds N synthetic incidents declared over the last 90 days (90 % resolved); the candidates also have real
logs in a SQLite store (declared, resolved when resolved), so the job reads what it would read in production.
Interleaved rounds; every round after the first finds nothing new to append (the first appends what is due).

    .venv/bin/python bench/lifecycle.py [--incidents 10000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from decklog.core.clock import ManualClock, iso
from decklog.core.entries import Actor, NewEntry
from decklog.core.lifecycle import LifecycleJob
from decklog.core.reminders import LifecyclePolicy
from decklog.core.state import ScopeState
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore

NOW = datetime(2026, 12, 1, tzinfo=UTC)
WHO = Actor.human("U0ALICE", "alice")


def synthetic(i: int, rng: random.Random) -> tuple[ScopeState, datetime, datetime | None]:
    declared = NOW - timedelta(seconds=rng.uniform(0, 90 * 86400))
    resolved = declared + timedelta(seconds=rng.expovariate(1 / 3600)) if rng.random() < 0.9 else None
    severity = rng.choice([1, 2, 2, 3, 3, 3, 4])
    state = ScopeState(
        scope=f"incident/bench-{i}",
        title=f"bench incident {i}",
        status="resolved" if resolved else "investigating",
        severity=severity,
        version=2,
        created_at=iso(declared),
        updated_at=iso(resolved or declared),
        resolved_at=iso(resolved) if resolved else "",
    )
    return state, declared, resolved


async def fill(
    store: SqliteLogStore, clock: ManualClock, state: ScopeState, declared: datetime, resolved: datetime | None
) -> ScopeState:
    clock._now = declared
    payload = {"title": state.title, "severity": state.severity}
    result = await store.append(state.scope, [NewEntry.make("declared", WHO, payload)], create=True)
    if resolved is not None:
        clock._now = resolved
        status = {"status": "resolved", "previous": "investigating"}
        result = await store.append(state.scope, [NewEntry.make("status_changed", WHO, status)])
    return result.state


async def main(n: int, rounds: int) -> None:
    rng = random.Random(18)
    policy = LifecyclePolicy()
    window = timedelta(seconds=policy.scan_window_s())
    with tempfile.TemporaryDirectory() as tmp:
        clock = ManualClock(NOW)
        store = SqliteLogStore(Path(tmp) / "data", topics=("index",), clock=clock)
        index = SqliteIndex(Path(tmp) / "index.db", store.executor)
        await index.open()
        started = time.perf_counter()
        items = []
        for i in range(n):
            state, declared, resolved = synthetic(i, rng)
            open_hot = resolved is None and state.severity in policy.status_update_s
            if open_hot or (resolved is not None and resolved >= NOW - window):
                state = await fill(store, clock, state, declared, resolved)
            items.append((state, []))
        await index.rebuild(items)
        clock._now = NOW
        job = LifecycleJob(store, index, clock, policy)
        candidates = [r for r in await index.list_scopes(kind="incident", limit=10_000) if job._candidate(r, NOW)]
        print(f"{n} incidents, {len(candidates)} candidates, filled in {time.perf_counter() - started:.1f} s")

        async def base() -> None:
            for row in await index.list_scopes(kind="incident", limit=10_000):
                if job._candidate(row, NOW):
                    await store.get_state(row.id)

        ticks, bases = [], []
        for r in range(rounds):
            t0 = time.perf_counter()
            fired = await job.tick()
            ticks.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await base()
            bases.append(time.perf_counter() - t0)
            if r == 0:
                print(f"first pass appended {len(fired)} due entries ({ticks[0] * 1000:.0f} ms)")
        tick, baseline = statistics.median(ticks[1:]), statistics.median(bases[1:])
        print(
            f"later passes p50 {tick * 1000:.1f} ms vs reading every candidate {baseline * 1000:.1f} ms: {tick / baseline:.2f}×"
        )
        print(
            f"first pass {ticks[0] * 1000:.0f} ms vs reading every candidate {bases[0] * 1000:.0f} ms: {ticks[0] / bases[0]:.2f}×"
        )
        await index.close()
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    asyncio.run(main(args.incidents, max(2, args.rounds)))
