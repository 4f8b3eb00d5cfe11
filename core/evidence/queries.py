"""The PromQL each check runs for one service, on the two common conventions.

A service is selected by its ``service`` label, or else its ``job`` label, equal to the catalog component's name
(``or`` between the two: the first that has series answers). Requests are counted from the Prometheus client's
``http_requests_total`` (errors: ``code`` or ``status`` 5xx) or OpenTelemetry's
``http_server_request_duration_seconds_count`` (errors: ``http_response_status_code`` 5xx); latency is the p99 of
``http_request_duration_seconds_bucket`` or ``http_server_request_duration_seconds_bucket``. A component's
``decklog.io/prometheus-selector`` annotation (e.g. ``app="checkout",env="prod"``) replaces the selector, and a
``decklog.io/query-<check>`` annotation replaces one check's query (``$window`` in it becomes the window).

docs/agents.md lists each query as it is sent for a service named ``checkout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from decklog.core.evidence.catalog import QUERY_ANNOTATION_PREFIX, SELECTOR_ANNOTATION

CHECKS = ("error_ratio", "latency_p99", "up", "restarts", "saturation", "memory", "versions")
_REQUESTS = (
    ("http_requests_total", ('code=~"5.."', 'status=~"5.."')),
    ("http_server_request_duration_seconds_count", ('http_response_status_code=~"5.."',)),
)
_BUCKETS = ("http_request_duration_seconds_bucket", "http_server_request_duration_seconds_bucket")


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _or(parts: list[str]) -> str:
    return " or ".join(parts)


@dataclass(frozen=True)
class ServiceQueries:
    """The queries of one service. ``window``: a PromQL duration (``5m``; tests use seconds)."""

    service: str
    window: str = "5m"
    annotations: Mapping[str, str] | None = None

    def selectors(self) -> list[str]:
        custom = (self.annotations or {}).get(SELECTOR_ANNOTATION, "").strip()
        if custom:
            return [custom]
        name = _quote(self.service)
        return [f'service="{name}"', f'job="{name}"']

    def _override(self, check: str) -> str:
        text = (self.annotations or {}).get(QUERY_ANNOTATION_PREFIX + check, "").strip()
        return text.replace("$window", self.window)

    def _sel(self, sel: str, extra: str = "") -> str:
        return "{" + ",".join(x for x in (sel, extra) if x) + "}"

    def _rng(self, offset: str) -> str:
        return f"[{self.window}]" + (f" offset {offset}" if offset else "")

    def error_ratio(self, *, offset: str = "") -> str:
        """5xx responses / all responses over the window (0 when there were requests and no 5xx series)."""
        if (custom := self._override("error_ratio")) and not offset:
            return custom
        rng = self._rng(offset)
        errors: list[str] = []
        totals: list[str] = []
        for sel in self.selectors():
            for metric, error_labels in _REQUESTS:
                errors += [f"sum(rate({metric}{self._sel(sel, e)}{rng}))" for e in error_labels]
                totals.append(f"sum(rate({metric}{self._sel(sel)}{rng}))")
        return f"({_or(errors)} or vector(0)) / ({_or(totals)})"

    def latency_p99(self, *, offset: str = "") -> str:
        if (custom := self._override("latency_p99")) and not offset:
            return custom
        rng = self._rng(offset)
        parts = [
            f"histogram_quantile(0.99, sum by (le) (rate({metric}{self._sel(sel)}{rng})))"
            for sel in self.selectors()
            for metric in _BUCKETS
        ]
        return _or(parts)

    def up(self) -> str:
        return self._override("up") or f"min({_or([f'up{self._sel(sel)}' for sel in self.selectors()])})"

    def restarts(self) -> str:
        """Process restarts in the window (the start time changed)."""
        return self._override("restarts") or _or(
            [f"sum(changes(process_start_time_seconds{self._sel(sel)}{self._rng('')}))" for sel in self.selectors()]
        )

    def saturation(self) -> str:
        """CPU seconds per second (1 = one core busy), the busiest process of the service."""
        return self._override("saturation") or _or(
            [f"max(rate(process_cpu_seconds_total{self._sel(sel)}{self._rng('')}))" for sel in self.selectors()]
        )

    def memory(self) -> str:
        """Resident memory of the service's largest process, in bytes."""
        return self._override("memory") or _or(
            [f"max(process_resident_memory_bytes{self._sel(sel)})" for sel in self.selectors()]
        )

    def memory_low(self, span: str) -> str:
        """The lowest resident memory of any of its processes over ``span`` (a leak grows from there; unlike an
        ``offset`` baseline it exists as soon as the process has been scraped once)."""
        return _or(
            [f"min(min_over_time(process_resident_memory_bytes{self._sel(sel)}[{span}]))" for sel in self.selectors()]
        )

    def versions(self) -> str:
        """The versions its ``*_build_info`` metric reported in the window: more than one = it changed."""
        return self._override("versions") or _or(
            [
                f'count by (version) (last_over_time({{__name__=~".+_build_info",{sel}}}{self._rng("")}))'
                for sel in self.selectors()
            ]
        )
