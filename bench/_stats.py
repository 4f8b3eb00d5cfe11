"""Shared helpers for the benchmark scripts: samples, percentiles, interleaved rounds, ratios, a Markdown table.

The disk here is noisy (its fsync rate swings several-fold between runs), so a benchmark never compares numbers
taken minutes apart: ``interleave`` runs the baselines and the subjects alternately, round after round (rotating
the order), and a ratio is the median over rounds of the ratio measured within each round.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    """One timed run of one case: how many acknowledged operations in how long, and each one's latency."""

    ops: int
    seconds: float
    latencies: Sequence[float] = field(default=(), repr=False)  # seconds, one per operation
    cpu_seconds: float = math.nan  # process CPU time (all threads) spent in the timed window

    @property
    def cpu_us_per_op(self) -> float:
        return self.cpu_seconds / self.ops * 1e6 if self.ops else math.nan

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    def percentile_ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) with linear interpolation between closest ranks; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else math.nan


def interleave(
    cases: Mapping[str, Callable[[], Sample]],
    rounds: int,
    *,
    progress: Callable[[int, str, Sample], None] | None = None,
) -> dict[str, list[Sample]]:
    """Run every case once per round, rotating the order each round so no case always runs first or last."""
    names = list(cases)
    results: dict[str, list[Sample]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            sample = cases[name]()
            results[name].append(sample)
            if progress is not None:
                progress(r, name, sample)
    return results


def median_rate(samples: Sequence[Sample]) -> float:
    return median([s.rate for s in samples])


def median_percentile_ms(samples: Sequence[Sample], q: float) -> float:
    """The median over rounds of each round's percentile (rounds are not pooled: each is its own condition)."""
    return median([s.percentile_ms(q) for s in samples])


def median_cpu_us(samples: Sequence[Sample]) -> float:
    return median([s.cpu_us_per_op for s in samples])


def paired_ratio(subject: Sequence[Sample], baseline: Sequence[Sample]) -> float:
    """Median over rounds of subject rate / baseline rate, each pair measured in the same round."""
    return median([s.rate / b.rate for s, b in zip(subject, baseline, strict=True) if b.rate > 0])


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def fmt_rate(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


def fmt_ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def fmt_us(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


def fmt_ratio(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}×"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def note(text: str) -> None:
    """Progress goes to stderr so that stdout stays pasteable."""
    print(text, file=sys.stderr, flush=True)
