"""N SIGKILL/restart cycles of ``decklog serve`` under a mixed Slack + alert load (the load and the verdict are
tests/helpers/mixed_load.py and log_view.py, shared with tests/reliability/test_crash_mixed.py).

Prints the acked requests by kind, lost effects (target 0), duplicate Slack effects (target 0), and the time from
each restart (process spawn) until every effect acked before it was delivered (p50/p99).

    .venv/bin/python bench/crash.py [--cycles 20] [--workers 6] [--seed 1] [--settle 60]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from decklog.adapters.local.slack import FakeSlack
from tests.helpers.mixed_load import CrashRun
from tests.helpers.serve import APP_TOKEN, BOT_TOKEN


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main(cycles: int, workers: int, seed: int, settle: float) -> int:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="decklog-crash-") as tmp:
        async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake:
            run = CrashRun(fake, Path(tmp) / "data", rng, workers=workers, socket_every=3)
            started = time.monotonic()
            for _ in range(cycles):
                await run.cycle(kill_after=0.4 + rng.random() * 1.2, settle_first=settle)
            _running, verdict, _ = await run.settle(timeout=120)
            elapsed = time.monotonic() - started
    settled = [c.restart_to_delivered for c in run.cycles[1:] if c.restart_to_delivered is not None]
    unsettled = sum(1 for c in run.cycles[1:] if c.restart_to_delivered is None)
    print(f"crash: {cycles} SIGKILL cycles ({sum(c.socket for c in run.cycles)} in Socket Mode), {elapsed:.0f} s")
    print(f"  acked requests      {run.acked.total}  {run.acked.counts()}")
    print(f"  lost effects        {len(verdict.lost)}  (target 0)")
    print(f"  duplicate effects   {len(verdict.duplicates)}  (target 0)")
    print(f"  outbox left         pending {dict(verdict.pending)} parked {dict(verdict.parked)}")
    if settled:
        print(
            f"  restart → all acked effects delivered: p50 {_pct(settled, 50):.2f} s, p99 {_pct(settled, 99):.2f} s"
            f" over {len(settled)} restarts" + (f" ({unsettled} never within {settle:.0f} s)" if unsettled else "")
        )
    elif unsettled:
        print(f"  restart → all acked effects delivered: never within {settle:.0f} s ({unsettled} restarts)")
    for line in (verdict.lost[:5] + verdict.duplicates[:5]) if not verdict.ok else []:
        print(f"    {line}")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--settle", type=float, default=60.0, help="seconds to wait for delivery after each restart")
    a = ap.parse_args()
    sys.exit(asyncio.run(main(a.cycles, a.workers, a.seed, a.settle)))
