"""Failover of ``decklog serve`` replicas on one PostgreSQL database: 3 replicas behind a round-robin balancer
take the mixed Slack + alert load of tests/helpers/mixed_load.py; one is SIGKILLed at a moment it holds delivery
cursors, and the time from the kill until every row that was pending in those (scope, topic) cursors has been
delivered by the others is measured; a fresh replica replaces the dead one and the next round starts.

Prints that time p50/p99 over the rounds, and the verdict of the whole run (lost / duplicated effects, target 0).
A survivor finds the dead holder's liveness lock free (core/store/postgres/liveness.py: PostgreSQL frees a session
lock the moment the connection drops) within ``DEAD_HOLDERS_S`` (bot/ops.py), cuts its cursor leases to
``GRACE_S`` and takes them when that ran out; a holder without a liveness lock keeps the whole
``core.outbox.dispatcher.CURSOR_LEASE_S``. Also printed: when the dead one's cursors had moved (before delivery).

    .venv/bin/python bench/failover.py [--rounds 6] [--workers 6] [--database-url postgresql://…/test]
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
from decklog.core.store.postgres.liveness import GRACE_S
from tests.helpers.balancer import Balancer
from tests.helpers.pg_view import cursors_held_by, pending_in
from tests.helpers.replica_load import Killed, ReplicaRun
from tests.helpers.serve import APP_TOKEN, BOT_TOKEN, start_serve


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


moved: list[float] = []  # seconds from a kill until none of its cursors with rows waiting is its any more


async def _round(run: ReplicaRun, n: int) -> float | None:
    """One kill under load: seconds from the SIGKILL until the dead one's pending rows are all delivered."""
    start = run.acked.total
    measured: list[float] = []

    async def watch(held: list[tuple[str, str]], killed_at: float, pid: int) -> None:
        waiting = await asyncio.to_thread(pending_in, run.database_url, held)
        moved_at: float | None = None
        while waiting:
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
                finally:
                    await run.stop_all()
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(
        f"\nfailover: {rounds} SIGKILLs of one of 3 replicas under load (cursor lease {CURSOR_LEASE_S:.0f} s, "
        f"liveness grace {GRACE_S:.1f} s)"
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
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test", help="admin URL")
    a = parser.parse_args()
    sys.exit(asyncio.run(main(a.rounds, a.workers, a.seed, a.database_url)))
