"""results.jsonl → table.md: one row per arm × fault, Wilson 95 % intervals on the correct-continuation rate."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def table(rows: Sequence[dict[str, Any]]) -> str:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["arm"], r["fault"])].append(r)
    out = [
        "| arm | fault | runs | correct | 95 % CI | dup effects | tokens/run | context B/run | reconstr. B/run "
        "| units/run | tokens/unit | $/unit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (arm, fault), rs in sorted(groups.items()):
        n, k = len(rs), sum(1 for r in rs if r["correct"])
        lo, hi = wilson(k, n)
        units = sum(r["units"] for r in rs)
        tokens = sum(r["tokens"] for r in rs)
        usd = sum(r["usd"] for r in rs)
        out.append(
            f"| {arm} | {fault} | {n} | {k}/{n} | {lo:.2f}–{hi:.2f} | {sum(r['duplicate_effects'] for r in rs)} "
            f"| {tokens / n:.0f} | {sum(r['context_bytes'] for r in rs) / n:.0f} "
            f"| {sum(r['reconstruction_bytes'] for r in rs) / n:.0f} | {units / n:.1f} "
            f"| {tokens / units if units else 0:.0f} | {usd / units if units else 0:.5f} |"
        )
    return "\n".join(out) + "\n"
