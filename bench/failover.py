"""Failover of ``decklog serve`` replicas on one PostgreSQL database: 3 replicas behind a round-robin balancer
take the mixed Slack + alert load of tests/helpers/mixed_load.py; one is SIGKILLed at a moment it holds delivery
cursors, and the time from the kill until every row that was pending in those (scope, topic) cursors has been
delivered by the others is measured; a fresh replica replaces the dead one and the next round starts.

Prints that time p50/p99 over the rounds, and the verdict of the whole run (lost / duplicated effects, target 0).
A survivor finds the dead holder's liveness lock free (core/store/postgres/liveness.py: PostgreSQL frees a session
lock the moment the connection drops) within ``DEAD_HOLDERS_S`` (bot/ops.py), cuts its cursor leases to
``GRACE_S`` and takes them when that ran out; a holder without a liveness lock keeps the whole
``core.outbox.dispatcher.CURSOR_LEASE_S``. Also printed: when the dead one's cursors had moved (before delivery),
and how often a live holder paused for want of lease (``leases_lapsed``, counted from the replicas' logs: the price
of a short liveness window). ``--profile`` prints, per round and per cursor the dead one held, when its lease was
cut, when it was taken, and when its rows were marked done (it reads the database every poll: slower rounds).

    .venv/bin/python bench/failover.py [--rounds 6] [--workers 6] [--profile] [--database-url postgresql://…/test]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from decklog.adapters.local.slack import FakeSlack
from decklog.core.outbox.dispatcher import CURSOR_LEASE_S
from decklog.core.store.postgres.liveness import GRACE_S, MARGIN_S
from tests.helpers.balancer import Balancer
from tests.helpers.pg_view import CursorLook, cursors_held_by, look_at_cursors, pending_in
from tests.helpers.replica_load import Killed, ReplicaRun
from tests.helpers.serve import APP_TOKEN, BOT_TOKEN, start_serve


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


moved: list[float] = []  # seconds from a kill until none of its cursors with rows waiting is its any more
profile = False  # --profile: where each round's time went, per (scope, topic) cursor the dead one held


def _profile(
    looks: list[tuple[float, dict[tuple[str, str], CursorLook]]], pid: int, waiting: set[tuple[str, str, int]]
) -> list[str]:
    """Per cursor with rows waiting at the kill: its lease left then, when it was cut (the lease shortened), taken
    (another owner), its rows' first and last done mark and retries, in seconds after the kill."""
    lines: list[str] = []
    if not looks:
        return lines
    mine = f":{pid}:"
    first_after, first = looks[0]
    kill_db = next(iter(first.values())).now - first_after  # the kill on the database clock
    for pair in first:
        at_kill = first[pair]
        cut = taken = None
        for after, look in looks:
            c = look[pair]
            was = at_kill.lease_left
            if (
                cut is None
                and c.lease_left is not None
                and was is not None
                and c.lease_left < was - (after - first_after) - 0.3
            ):
                cut = after
            if taken is None and (c.owner is None or mine not in c.owner or c.lease_left is None):
                taken = after
        seqs = {q for s, t, q in waiting if (s, t) == pair}
        last = {q: r for q, r in looks[-1][1][pair].rows.items() if q in seqs}
        done = sorted(p - kill_db for _a, _n, p, _e in last.values() if p is not None)
        retried = [(q, a, round(n - kill_db, 2), e[:60]) for q, (a, n, _p, e) in sorted(last.items()) if a]
        lines.append(
            f"    {pair[1]:>9} {pair[0][:28]:<28} rows {len(last):>2} lease {at_kill.lease_left or 0:5.1f} s"
            f" | cut {_s(cut)} taken {_s(taken)} done {_s(done[0] if done else None)}..{_s(done[-1] if done else None)}"
            + (f" retried {retried[:3]}" if retried else "")
        )
    return lines


def _lapses(logs: Path) -> int:
    """Deliveries the replicas did not start because their lease (cursor or liveness) had too little left: each
    logs one warning (``Dispatcher.leases_lapsed``). With no replica stalled, each is a live holder paused."""
    return sum(
        line.count("dispatcher: the lease of")
        for f in logs.glob("serve-*.log")
        for line in f.read_text(errors="replace").splitlines()
    )


def _s(x: float | None) -> str:
    return "  -  " if x is None else f"{x:5.2f}"


async def _round(run: ReplicaRun, n: int) -> float | None:
    """One kill under load: seconds from the SIGKILL until the dead one's pending rows are all delivered."""
    start = run.acked.total
    measured: list[float] = []

    async def watch(held: list[tuple[str, str]], killed_at: float, pid: int) -> None:
        waiting = await asyncio.to_thread(pending_in, run.database_url, held)
        at_kill = set(waiting)
        moved_at: float | None = None
        pairs = sorted({(s, t) for s, t, _q in waiting})
        since = {pr: min(q for s, t, q in waiting if (s, t) == pr) for pr in pairs}
        looks: list[tuple[float, dict[tuple[str, str], CursorLook]]] = []
        while waiting:
            if profile:
                look = await asyncio.to_thread(look_at_cursors, run.database_url, pairs, since)
                looks.append((time.monotonic() - killed_at, look))
            await asyncio.sleep(0.05)
            still = await asyncio.to_thread(pending_in, run.database_url, held)
            waiting &= still
            if moved_at is None and not set(await asyncio.to_thread(cursors_held_by, run.database_url, pid)) & {
                (s, t) for s, t, _q in waiting
            }:
                moved_at = time.monotonic()
        measured.append(time.monotonic() - killed_at)
        if moved_at is not None:
            moved.append(moved_at - killed_at)
        if profile:
            await asyncio.sleep(1.0)  # the last done marks
            look = await asyncio.to_thread(look_at_cursors, run.database_url, pairs, since)
            looks.append((time.monotonic() - killed_at, look))
            print("\n".join(_profile(looks, pid, at_kill)))

    watcher: list[asyncio.Task[None]] = []

    def after(k: Killed) -> bool:
        if not watcher:
            watcher.append(asyncio.ensure_future(watch(k.held, k.at, k.served.pid)))
        return watcher[0].done() and run.acked.total >= start + 20

    killed = await run.load_and_kill(lambda: run.acked.total >= start + 30, after, victim=n % len(run.live))
    await watcher[0]
    env = {"DECKLOG_DATABASE_URL": run.database_url}
    data = run.data_dir.parent / f"replica-r{n}"
    fresh = await asyncio.to_thread(start_serve, data, run.fake.base_url, env=env)
    run.live.append(fresh)
    run.balancer.backends.append(fresh.url)
    return measured[0] if killed.held else None


async def main(rounds: int, workers: int, seed: int, admin: str) -> int:
    name = f"decklog_failover_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = admin.rsplit("/", 1)[0] + "/" + name
    times: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="decklog-failover-") as tmp:
            async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake, Balancer() as balancer:
                run = ReplicaRun(
                    fake, Path(tmp) / "data", random.Random(seed), workers=workers, database_url=url, balancer=balancer
                )
                await run.start_replicas(3)
                try:
                    for n in range(rounds):
                        took = await _round(run, n)
                        if took is not None:
                            times.append(took)
                            print(f"round {n}: the dead replica's pending rows delivered {took:.2f} s after the kill")
                    verdict = await run.wait_complete(timeout=120)
                    lapsed = _lapses(Path(tmp))

                finally:
                    await run.stop_all()
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(
        f"\nfailover: {rounds} SIGKILLs of one of 3 replicas under load (cursor lease {CURSOR_LEASE_S:.0f} s, "
        f"liveness grace {GRACE_S:.1f} s, margin {MARGIN_S:.1f} s)"
    )
    print(f"  acked requests      {run.acked.total}  {run.acked.counts()}")
    if times:
        print(
            f"  kill → its pending deliveries done by the others: p50 {_pct(times, 50):.2f} s, p99 {_pct(times, 99):.2f} s"
        )
    if moved:
        print(
            f"  kill → its cursors with rows waiting taken by the others: p50 {_pct(moved, 50):.2f} s, "
            f"p99 {_pct(moved, 99):.2f} s"
        )
    print(f"  live holders paused {lapsed}  (deliveries not started for want of lease, all replicas, whole run)")
    print(f"  lost effects        {len(verdict.lost)}  (target 0)")
    print(f"  duplicate effects   {len(verdict.duplicates)}  (target 0)")
    print(f"  outbox left         pending {dict(verdict.pending)} parked {dict(verdict.parked)}")
    for line in (verdict.lost[:5] + verdict.duplicates[:5]) if not verdict.ok else []:
        print(f"    {line}")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="where each round's time went, per cursor")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test", help="admin URL")
    a = parser.parse_args()
    profile = a.profile
    sys.exit(asyncio.run(main(a.rounds, a.workers, a.seed, a.database_url)))
