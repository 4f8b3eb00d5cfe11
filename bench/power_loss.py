"""Power-loss simulation of the log store (tests/helpers/power_loss.py; the suite runs a short version in
tests/reliability/test_power_loss.py): the store's own SQL, recorded from a real SqliteLogStore run, replayed on an APSW VFS
that drops un-fsynced writes at a random I/O operation, many times, under ``synchronous=FULL`` (what the store runs)
and, as the baseline measured in the same run, ``synchronous=NORMAL``.

Prints, per mode, the power cuts, the acknowledged entries at the cuts, and how many of them were lost (target for
FULL: 0), and the ratio of FULL's loss rate to NORMAL's.

    .venv/bin/python bench/power_loss.py [--appends 2000] [--trials 100] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.power_loss import record_store_sql, trials


def main(appends: int, count: int, seed: int) -> int:
    with tempfile.TemporaryDirectory(prefix="decklog-power-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        statements, _ = record_store_sql(work / "data", appends=appends, seed=seed)
        batches = sum(s.strip().upper() == "BEGIN IMMEDIATE" for s in statements)
        print(f"recorded {len(statements)} statements, {batches} transactions, from {appends} appends")
        rates: dict[str, float] = {}
        failed = False
        for mode in ("FULL", "NORMAL"):
            (work / mode).mkdir()
            tally = trials(statements, work / mode, synchronous=mode, count=count, seed=seed)
            rates[mode] = tally.lost / tally.acked if tally.acked else 0.0
            print(
                f"synchronous={mode:<6} cuts {tally.cuts}/{tally.trials}  acknowledged {tally.acked}  "
                f"lost {tally.lost} ({rates[mode]:.2%})  problems {len(tally.problems or [])}"
            )
            for problem in (tally.problems or [])[:5]:
                print("   ", problem)
            failed |= bool(tally.problems)
        ratio = rates["FULL"] / rates["NORMAL"] if rates["NORMAL"] else float("nan")
        print(f"loss rate FULL / NORMAL = {ratio:.3f}   ({time.monotonic() - started:.1f}s)")
        return 1 if failed or rates["FULL"] > 0 else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    raise SystemExit(main(args.appends, args.trials, args.seed))
