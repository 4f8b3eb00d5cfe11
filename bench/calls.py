"""Python function calls per alert in ``bench/alerts.py``'s storm: the work decklog does, counted, not timed.

    .venv/bin/python bench/calls.py [--top 25] [--json FILE] [bench/alerts.py's options, e.g. --quick]

On a shared machine the storm's rates and CPU times move with whatever else runs; a count of the Python calls the
server makes does not (a profile hook on every thread counts each function entered while ``decklog_storm`` runs,
from the server's start to the last summary, the load generator excluded: it is a child process). It is the way to
compare two commits' work on a busy machine: run it in each checkout and compare ``--json`` files with
``--compare A B``. Group commit batch sizes and pacing still depend on timing, so expect a few percent of noise;
tens of percent is a change in the code. The hook slows the server several-fold: read only the counts.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

Key = tuple[str, str]  # (where: a product package, a library or the standard library; the function's name)


def where(filename: str) -> str:
    site = re.search(r"site-packages/([^/]+)", filename)
    if site:
        return site.group(1)
    std = re.search(r"/lib/python3\.\d+/([^/]+)", filename)
    if std:
        return "stdlib"
    for part in ("core", "adapters", "bot", "prompts", "bench", "tests"):
        if f"/{part}/" in filename:
            return part
    return "other"


def count_storm(argv: list[str]) -> tuple[collections.Counter[Key], int]:
    import bench.alerts as alerts

    counts: collections.Counter[Key] = collections.Counter()
    on = [False]

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and on[0]:
            counts[(where(frame.f_code.co_filename), frame.f_code.co_name)] += 1

    storm = alerts.decklog_storm
    sizes: list[int] = []

    async def counted(*args: Any, **kwargs: Any) -> Any:
        sizes.append(args[0].alerts)  # the Storm
        on[0] = True
        try:
            return await storm(*args, **kwargs)
        finally:
            on[0] = False

    alerts.decklog_storm = counted  # type: ignore[assignment]
    threading.setprofile(hook)
    sys.setprofile(hook)
    sys.argv = ["bench/alerts.py", *argv]
    try:
        alerts.main()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return counts, sum(sizes)


def by_where(counts: collections.Counter[Key]) -> collections.Counter[str]:
    out: collections.Counter[str] = collections.Counter()
    for (place, _), n in counts.items():
        out[place] += n
    return out


def compare(a_path: str, b_path: str, top: int) -> None:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    ca = collections.Counter({(w, f): n for w, f, n in a["calls"]})
    cb = collections.Counter({(w, f): n for w, f, n in b["calls"]})
    per_a, per_b = sum(ca.values()) / a["alerts"], sum(cb.values()) / b["alerts"]
    print(f"calls per alert: {per_a:,.0f} ({a_path}) → {per_b:,.0f} ({b_path}): {per_b / per_a:.2f}×\n")
    print("| where | A per alert | B per alert |\n|---|---|---|")
    wa, wb = by_where(ca), by_where(cb)
    for place in sorted(set(wa) | set(wb), key=lambda p: -(wa[p] + wb[p])):
        print(f"| {place} | {wa[place] / a['alerts']:,.1f} | {wb[place] / b['alerts']:,.1f} |")
    print(f"\nlargest changes per alert (top {top} each way):")
    diff = sorted(set(ca) | set(cb), key=lambda k: cb[k] / b["alerts"] - ca[k] / a["alerts"])
    for key in diff[:top] + diff[-top:]:
        print(f"{(cb[key] / b['alerts'] - ca[key] / a['alerts']):+9.1f}  {key[0]}: {key[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", help="write the counts here")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two --json files, then stop")
    args, rest = parser.parse_known_args()
    if args.compare:
        compare(*args.compare, args.top)
        return
    counts, n_alerts = count_storm(rest)
    total = sum(counts.values())
    print(f"\n{total:,} Python calls during the storm of {n_alerts:,} alerts: {total / n_alerts:,.0f} per alert")
    for place, n in by_where(counts).most_common():
        print(f"  {place}: {n / n_alerts:,.1f} per alert")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"alerts": n_alerts, "calls": [[w, f, n] for (w, f), n in counts.items()]})
        )


if __name__ == "__main__":
    main()
