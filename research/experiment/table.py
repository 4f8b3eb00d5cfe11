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
    return "\n".join([*out, "", *break_even(rows)]) + "\n"


def _per_unit(r: dict[str, Any]) -> float:
    return float(r["usd"]) / max(1, int(r["units"]))


def break_even(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Cold views against the warm transcript, run by run (same scenario, fault and seed): $ per unit, and the
    log length (entries) that best separates the runs where the warm transcript is cheaper from the others."""
    central = {(r["scenario"], r["fault"], r["seed"]): r for r in rows if r["arm"] == "central"}
    out = [
        "### Break-even: cold views vs the warm transcript ($ per unit, same scenario × fault × seed)",
        "",
        "| cold arm | faults | pairs | warm cheaper | median $/unit warm | median $/unit cold | break-even (entries) |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in ("rules", "nm"):
        for label, faulted in (("none", False), ("with faults", True)):
            pairs = [
                (int(c.get("entries", 0)), _per_unit(c), _per_unit(r))
                for r in rows
                if r["arm"] == arm and (r["fault"] != "none") == faulted
                for c in [central.get((r["scenario"], r["fault"], r["seed"]))]
                if c is not None
            ]
            if not pairs:
                continue
            warm = sum(1 for _, w, c in pairs if w < c)
            out.append(
                f"| {arm} | {label} | {len(pairs)} | {warm}/{len(pairs)} | {_median([w for _, w, _ in pairs]):.5f} "
                f"| {_median([c for _, _, c in pairs]):.5f} | {_threshold(pairs)} |"
            )
    out += [
        "",
        "Break-even: the log length L (entries, all scopes) that best predicts which side is cheaper per unit "
        "(agreeing pairs in brackets); “none” when no length predicts better than the majority.",
    ]
    return out


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2 if s else 0.0


def _threshold(pairs: list[tuple[int, float, float]]) -> str:
    """The length L (and side) that best predicts which is cheaper; "none" when it predicts no better than always
    answering the majority."""
    majority = max(sum(1 for _, w, c in pairs if w < c), sum(1 for _, w, c in pairs if w >= c))
    best, best_ok, side = 0, -1, ""
    for t in sorted({n for n, _, _ in pairs}):
        for warm_short in (True, False):
            ok = sum(1 for n, w, c in pairs if (w < c) == ((n <= t) == warm_short))
            if ok > best_ok:
                best, best_ok, side = t, ok, "warm cheaper ≤ L" if warm_short else "cold cheaper ≤ L"
    if best_ok <= majority:
        return f"none (majority {majority}/{len(pairs)})"
    return f"L={best}, {side} ({best_ok}/{len(pairs)})"
