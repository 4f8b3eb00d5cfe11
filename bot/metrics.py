"""Prometheus text exposition for ``GET /metrics`` — counters and gauges read from the live components."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Metrics:
    """Request counters kept by the HTTP middleware; everything else is read at scrape time."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str, int]] = Counter()
        self.slack_acks: Counter[int] = Counter()
        self.ack_latencies: list[float] = []

    def observe_request(self, route: str, method: str, status: int) -> None:
        self.requests[(route, method, status)] += 1

    def observe_slack_ack(self, status: int, seconds: float) -> None:
        self.slack_acks[status] += 1
        self.ack_latencies.append(seconds)
        if len(self.ack_latencies) > 4096:
            del self.ack_latencies[:2048]


def render(lines: Iterable[tuple[str, str, str, list[tuple[dict[str, str], float]]]]) -> str:
    """``(name, type, help, [(labels, value)])`` → Prometheus text format 0.0.4."""
    out: list[str] = []
    for name, kind, help_text, samples in lines:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            out.append(f"{name}{{{label_text}}} {value}" if label_text else f"{name} {value}")
    return "\n".join(out) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def quantiles(values: list[float]) -> list[tuple[dict[str, str], float]]:
    return [({"quantile": q}, round(_quantile(values, float(q)), 6)) for q in ("0.5", "0.9", "0.99")]
