"""Fenced claims: claim + fulfil cycles per second with 1 and 16 concurrent claimers, and duplicate effects at the
executor under injected pauses — against raw sqlite3 single-row commits measured in the same run.

Cases (each round runs every case once, in rotating order; ratios are medians of within-round ratios):

- raw sqlite3: single-row INSERT+COMMIT, WAL + synchronous=FULL, one thread (the baseline).
- claim+fulfil, 1 claimer: ``claim`` then ``fulfil`` (two compare-and-set appends under the fence), one after
  the other, over 40 scopes of 100 open obligations each.
- claim+fulfil, 16 claimers: 16 tasks racing over the same pool, each picking obligations at random (a lost race
  is a Conflict and costs a try, not a cycle).
- runs under pauses (once, after the rounds): 16 claimers run 300 approved R1 proposals through the whole runner
  and the ``http`` executor against the fake deploy service on loopback, with a 5 % chance at each checkpoint of a
  pause longer than the lease. Duplicate effects are counted per idempotency key and per obligation (target: 0).

Usage: ``.venv/bin/python bench/claims.py [--quick] [--rounds N] [--seconds S] [--dir DIR]``. Progress goes to
stderr; stdout is a Markdown table. No number here is ever asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _stats import Sample, fmt_rate, fmt_ratio, interleave, markdown_table, median_rate, note, paired_ratio

from decklog.core.clock import SystemClock
from decklog.core.entries import Actor, NewEntry, ObligationClaimed
from decklog.core.errors import Conflict, DecklogError, NotFound
from decklog.core.obligations import claim, fulfil, open_obligation
from decklog.core.state import ScopeState
from decklog.core.store.sqlite.log_store import SqliteLogStore

ACTOR = Actor.agent("bench", "bench")
RAW = "raw sqlite3 single-row commits (WAL, FULL)"
ONE = "claim+fulfil, 1 claimer"
SIXTEEN = "claim+fulfil, 16 claimers"


def raw_commits(workdir: Path, seconds: float) -> Sample:
    path = Path(tempfile.mkdtemp(dir=workdir)) / "raw.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    ops, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (body) VALUES (?)", ("claimed ob-1a2b3c fence 7 " * 4,))
        conn.execute("COMMIT")
        ops += 1
    elapsed = time.perf_counter() - started
    conn.close()
    return Sample(ops, elapsed)


def _claim(s: ScopeState, *, oid: str, holder: str, now: datetime) -> list[NewEntry]:
    return claim(s, oid, holder=holder, now=now, lease_seconds=30, actor=ACTOR)


def _fulfil(s: ScopeState, *, oid: str, fence: int, now: datetime) -> list[NewEntry]:
    return fulfil(s, oid, fence=fence, now=now, actor=ACTOR)


async def _cycles(workdir: Path, claimers: int, scopes: int, seconds: float) -> tuple[Sample, int]:
    clock = SystemClock()
    store = SqliteLogStore(Path(tempfile.mkdtemp(dir=workdir)), clock=clock)
    pool: list[tuple[str, str]] = []
    per_scope = 100  # an incident with a hundred open obligations is already a big one
    for i in range(scopes):
        scope = f"incident/bench-{i}"
        declared = NewEntry.make("declared", ACTOR, {"title": f"bench {i}"})
        await store.append(scope, [declared], create=True)

        def open_many(s: ScopeState) -> list[NewEntry]:
            return [e for n in range(per_scope) for e in open_obligation(s, text=f"task {n}", actor=ACTOR)]

        opened = await store.append(scope, open_many)
        pool += [(scope, e.payload.obligation_id) for e in opened.entries]  # type: ignore[attr-defined]
    random.Random(7).shuffle(pool)
    done, conflicts = 0, 0
    deadline = time.perf_counter() + seconds

    async def claimer(n: int) -> None:
        nonlocal done, conflicts
        while time.perf_counter() < deadline and pool:
            scope, oid = pool[random.randrange(len(pool))] if claimers > 1 else pool[-1]
            try:
                got = await store.append(scope, functools.partial(_claim, oid=oid, holder=f"c{n}", now=clock.now()))
            except (Conflict, NotFound):
                conflicts += 1
                continue
            payload = got.entries[0].payload
            assert isinstance(payload, ObligationClaimed)
            await store.append(scope, functools.partial(_fulfil, oid=oid, fence=payload.fence, now=clock.now()))
            if (scope, oid) in pool:
                pool.remove((scope, oid))
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(claimer(n) for n in range(claimers)))
    elapsed = time.perf_counter() - started
    await store.close()
    return Sample(done, elapsed), conflicts


def cycles_case(workdir: Path, claimers: int, scopes: int, seconds: float, conflicts: list[int]) -> Sample:
    sample, lost = asyncio.run(_cycles(workdir, claimers, scopes, seconds))
    conflicts.append(lost)
    return sample


async def runs_under_pauses(workdir: Path, obligations: int = 300, claimers: int = 16) -> dict[str, float]:
    """The whole runner under injected pauses longer than the lease; counts duplicate effects."""
    from tests.actions_support import AGENT, desk_kit, effect_action, pid_of

    lease, pauses = 1.0, Counter[str]()
    rng = random.Random(11)

    async def checkpoint(point: str, _auth: object) -> None:
        if rng.random() < 0.05:
            pauses[point] += 1
            await asyncio.sleep(lease * rng.uniform(1.2, 1.6))

    async with desk_kit(
        Path(tempfile.mkdtemp(dir=workdir)),
        actions=[effect_action(timeout=0.2)],
        lease_seconds=lease,
        checkpoint=checkpoint,
    ) as kit:
        kit.desk.runner.lease_margin = 0.3
        scopes = [await kit.declare(f"Bench {i}") for i in range(8)]
        todo: list[tuple[str, str]] = []
        for i in range(obligations):
            scope = scopes[i % len(scopes)]
            line = await kit.desk.propose(
                scope, action="poke", params={"target": f"t-{i}"}, rationale="bench", obligation_id=None, actor=AGENT
            )
            todo.append((scope, pid_of(line)))
        left = set(todo)
        started = time.perf_counter()

        async def claimer(n: int) -> None:
            mine = random.Random(n)
            while left:
                scope, pid = mine.choice(sorted(left))
                try:
                    report = await kit.desk.execute(scope, pid, receipt=f"bench-{n}")
                except DecklogError:
                    continue
                if report.status == "not_runnable":
                    left.discard((scope, pid))
                elif report.status in ("busy", "deferred"):
                    await asyncio.sleep(0.005)

        await asyncio.gather(*(claimer(n) for n in range(claimers)))
        elapsed = time.perf_counter() - started
        per_key = Counter(e.idempotency_key for e in kit.deploy.effects)
        per_target = Counter(e.request["params"]["target"] for e in kit.deploy.effects)
        return {
            "runs": obligations,
            "seconds": elapsed,
            "pauses": sum(pauses.values()),
            "stale": kit.desk.runner.stats.stale,
            "effects": len(kit.deploy.effects),
            "dup_per_key": sum(n - 1 for n in per_key.values()),
            "dup_per_obligation": sum(n - 1 for n in per_target.values()),
            "missing": obligations - len(per_target),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 1 s per case, 100 runs under pauses")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go (default: a temp dir)")
    args = parser.parse_args()
    rounds, seconds = (1, 1.0) if args.quick else (args.rounds, args.seconds)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="decklog-bench-claims-"))
    workdir.mkdir(parents=True, exist_ok=True)
    conflicts: dict[str, list[int]] = {ONE: [], SIXTEEN: []}
    cases = {
        RAW: lambda: raw_commits(workdir, seconds),
        ONE: lambda: cycles_case(workdir, 1, 40, seconds, conflicts[ONE]),
        SIXTEEN: lambda: cycles_case(workdir, 16, 40, seconds, conflicts[SIXTEEN]),
    }
    results = interleave(cases, rounds, progress=lambda r, n, s: note(f"round {r + 1}: {n}: {s.rate:,.0f}/s"))
    note("runs under injected pauses …")
    paused = asyncio.run(runs_under_pauses(workdir, obligations=100 if args.quick else 300))
    rows = [
        [RAW, fmt_rate(median_rate(results[RAW])) + " commits/s", "1.00×", "—"],
        [
            ONE,
            fmt_rate(median_rate(results[ONE])) + " cycles/s",
            fmt_ratio(paired_ratio(results[ONE], results[RAW])),
            f"{fmt_rate(2 * median_rate(results[ONE]))} fenced commits/s",
        ],
        [
            SIXTEEN,
            fmt_rate(median_rate(results[SIXTEEN])) + " cycles/s",
            fmt_ratio(paired_ratio(results[SIXTEEN], results[RAW])),
            f"{fmt_rate(2 * median_rate(results[SIXTEEN]))} fenced commits/s; "
            f"{sorted(conflicts[SIXTEEN])[len(conflicts[SIXTEEN]) // 2]} lost races/round",
        ],
        [
            f"{paused['runs']:.0f} runs, 16 claimers, pauses > lease (http executor, loopback)",
            f"{paused['runs'] / paused['seconds']:,.1f} runs/s",
            "—",
            f"{paused['pauses']:.0f} pauses, {paused['stale']:.0f} stale writes rejected",
        ],
    ]
    print(markdown_table(["case", "rate", "vs raw sqlite3", "notes"], rows))
    print()
    print(
        markdown_table(
            ["duplicate effects under pauses", "count (target 0)"],
            [
                ["effects applied", f"{paused['effects']:.0f} of {paused['runs']:.0f} runs"],
                ["per idempotency key (more than one effect)", f"{paused['dup_per_key']:.0f}"],
                ["per obligation (more than one effect)", f"{paused['dup_per_obligation']:.0f}"],
                ["obligations left without an effect", f"{paused['missing']:.0f}"],
            ],
        )
    )
    print(
        f"\n{rounds} round(s) × {seconds:g} s per case; a cycle is two fenced commits (claim, fulfil) in a scope "
        f"of up to 100 open obligations; ratios are medians of within-round ratios; data in {workdir}"
    )


if __name__ == "__main__":
    main()
