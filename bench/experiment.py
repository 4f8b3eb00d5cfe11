"""The coordination experiment as a bench: ``python -m research.experiment`` (arms × faults × scenarios × seeds), then the
cost of each arm as a ratio against the ``rules`` arm of the same run (the baseline: cold views, rule dispatch).

Per arm: correct runs, duplicate effects, and per unit of work (obligations fulfilled without duplicates, plus
milestones): tokens, context bytes sent, reconstruction bytes read from the store, dollars. Wall time of the whole
run is printed too (it depends on the machine's load; the ratios do not).

    .venv/bin/python bench/experiment.py [--quick] [--seeds 3] [--jobs 2] [--model scripted|scripted-http]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--model", default="scripted")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="decklog-exp-")) / "out"
    cmd = [sys.executable, "-m", "research.experiment", "--out", str(out), "--jobs", str(args.jobs)]
    cmd += (
        ["--model", args.model]
        + (["--quick"] if args.quick else [])
        + (["--seeds", str(args.seeds)] * bool(args.seeds))
    )
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[1])
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    arms: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        a = arms[r["arm"]]
        for k in ("tokens", "context_bytes", "reconstruction_bytes", "usd", "units", "duplicate_effects"):
            a[k] += r[k]
        a["runs"] += 1
        a["correct"] += r["correct"]
    base = arms["rules"]
    print(f"{len(rows)} runs in {wall:.0f} s wall ({args.jobs} processes); table: {out / 'table.md'}")
    print(
        "| arm | correct | dup effects | tokens/unit | ×rules | context B/unit | ×rules | reconstr. B/unit | ×rules "
        "| $/unit | ×rules |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for arm, a in sorted(arms.items()):
        cells = []
        for k in ("tokens", "context_bytes", "reconstruction_bytes", "usd"):
            per, per_base = a[k] / a["units"], base[k] / base["units"]
            cells.append(f"{per:.5f} | {per / per_base:.2f}" if k == "usd" else f"{per:.0f} | {per / per_base:.2f}")
        print(
            f"| {arm} | {a['correct']:.0f}/{a['runs']:.0f} | {a['duplicate_effects']:.0f} | " + " | ".join(cells) + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
