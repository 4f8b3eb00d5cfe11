"""``GET /metrics`` through prometheus-client, one ``CollectorRegistry`` per server (never the global one: a test
process starts many servers).

Latencies are histograms (``_bucket``/``_sum``/``_count``), so Prometheus can aggregate them across replicas:

- ``decklog_slack_ack_seconds``: receiving a Slack delivery on ``/slack/events`` to answering it (the middleware);
- ``decklog_sender_latency_seconds``: an entry's commit to its delivery, per entry and topic (the dispatcher);
- ``decklog_turn_seconds``: one agent turn, by outcome (the agents part); ``decklog_turns_waiting``, a gauge read
  from the turn runtime's slots at scrape time.

``decklog_findings_total{reasoner,kind,outcome}`` (what people made of the agents' findings) is computed from the incidents' logs
(``core.reports.sections.findings.findings_counts``) by :class:`FindingsCollector`: each scrape queues the scopes
whose version moved and a background task reads them (a scrape never waits for logs; the first one after a
restart is as cheap as any, and ``decklog_findings_uncounted_scopes`` says how many are not counted yet).

Everything else is a counter or gauge read from the live components at scrape time (``Live``), so that nothing is
counted twice: the inbox, the store, the dispatcher, the Slack sender and the Slack listeners keep their counts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from decklog.core.clock import iso
from decklog.core.outbox.dispatcher import DispatchStats
from decklog.core.reports.sections.findings import findings_counts
from decklog.core.store.ports import IndexPort, LogStore, ScopeRow

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Slack allows 3 s for an ack; the buckets are finest where acks and deliveries usually land.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 3.0, 5.0, 10.0, 30.0)
TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class ServerMetrics:
    """The metrics this process observes as things happen; ``render(live)`` adds what is read at scrape time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "decklog_http_requests",
            "HTTP requests by route, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.slack_acks = Counter(
            "decklog_slack_acks",
            "Responses to Slack deliveries on /slack/events by status",
            ["status"],
            registry=self.registry,
        )
        self.ack_seconds = Histogram(
            "decklog_slack_ack_seconds",
            "Time to answer a Slack delivery",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.delivery_seconds = Histogram(
            "decklog_sender_latency_seconds",
            "Commit to delivered, per entry",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.turn_seconds = Histogram(
            "decklog_turn_seconds",
            "Duration of one agent turn, by outcome",
            ["outcome"],
            buckets=TURN_BUCKETS,
            registry=self.registry,
        )
        self.turns_waiting = Gauge(
            "decklog_turns_waiting",
            "Agent turns and asks waiting for a slot ([agents] max_concurrent_turns)",
            registry=self.registry,
        )
        self.findings = FindingsCollector()
        self.registry.register(self.findings)

    def observe_request(self, route: str, method: str, status: int) -> None:
        self.requests.labels(route=route, method=method, status=str(status)).inc()

    def observe_slack_ack(self, status: int, seconds: float) -> None:
        self.slack_acks.labels(status=str(status)).inc()
        self.ack_seconds.observe(seconds)

    def delivery_stats(self) -> DispatchStats:
        """A ``DispatchStats`` for the dispatcher that also feeds the delivery histogram."""
        return ObservedDispatchStats(histogram=self.delivery_seconds)

    def render(self, live: Live) -> bytes:
        return generate_latest(_Scrape(self.registry, live))


@dataclass
class ObservedDispatchStats(DispatchStats):
    histogram: Histogram | None = None

    def observe(self, seconds: float) -> None:
        super().observe(seconds)
        if self.histogram is not None:
            self.histogram.observe(seconds)


@dataclass
class Live:
    """The values read from the components for one scrape."""

    counters: list[tuple[str, str, float]] = field(default_factory=list)
    gauges: list[tuple[str, str, float]] = field(default_factory=list)
    labelled: list[tuple[str, str, str, str, dict[str, float]]] = field(default_factory=list)
    """(kind "counter" | "gauge", name, help, label, {label value: value})."""

    def counter(self, name: str, help_text: str, value: float) -> None:
        self.counters.append((name, help_text, value))

    def gauge(self, name: str, help_text: str, value: float) -> None:
        self.gauges.append((name, help_text, value))

    def by_label(self, kind: str, name: str, help_text: str, label: str, values: dict[str, float]) -> None:
        self.labelled.append((kind, name, help_text, label, values))

    def families(self) -> Iterator[Metric]:
        for name, help_text, value in self.counters:
            yield CounterMetricFamily(name, help_text, value=value)
        for name, help_text, value in self.gauges:
            yield GaugeMetricFamily(name, help_text, value=value)
        for kind, name, help_text, label, values in self.labelled:
            family: CounterMetricFamily | GaugeMetricFamily = (
                CounterMetricFamily(name, help_text, labels=[label])
                if kind == "counter"
                else GaugeMetricFamily(name, help_text, labels=[label])
            )
            for key, value in sorted(values.items()):
                family.add_metric([key], value)
            yield family


class _Scrape(Collector):
    """One scrape: the registry's metrics, then the live ones (``generate_latest`` only needs ``collect``)."""

    def __init__(self, registry: CollectorRegistry, live: Live) -> None:
        self._registry = registry
        self._live = live

    def collect(self) -> Iterable[Metric]:
        yield from self._registry.collect()
        yield from self._live.families()


FULL_EVERY_S = 300.0  # how often every incident is listed again (a scrape lists only what was updated)
LAG_MARGIN_S = 120.0  # how far a scrape's listing reaches back before the last one (the index applies after commits)


def _iso_ago(seconds: float) -> str:
    return iso(datetime.now(UTC) - timedelta(seconds=seconds))


class FindingsCollector(Collector):
    """``decklog_findings_total{reasoner,kind,outcome}`` over every incident scope, however old: ``refresh`` (before
    a scrape) lists the incidents updated since the last scrape (one index query; every incident is listed at start
    and every ``FULL_EVERY_S`` in the background) and queues those whose version moved; ``run`` (a background
    task) reads their logs and caches the counts per scope version; ``collect`` (sync) sums the cache. A scrape
    never waits for logs to be read: after a restart the first scrape answers at once and the counts fill in, while
    ``decklog_findings_uncounted_scopes`` says how many incident logs are not counted yet."""

    NAME = "decklog_findings"
    LABELS = ("reasoner", "kind", "outcome")

    def __init__(self) -> None:
        self._cache: dict[str, tuple[int, dict[tuple[str, str, str], int]]] = {}
        self._todo: dict[str, None] = {}  # scopes to read (insertion order)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.reads = 0  # logs read (a scope is read again only when its version moved)
        self.listings = 0  # listings of every incident (at start, then every FULL_EVERY_S)
        self._since: str | None = None  # a scrape lists the incidents updated since then
        self._listed_at = 0.0  # when the last listing of every incident began (monotonic)
        self._listing: asyncio.Future[None] | None = None

    async def refresh(self, _store: LogStore, index: IndexPort) -> None:
        """Queue the incidents whose version moved: those updated since the last scrape (less a margin for the
        index's lag), from a listing of every incident made at start and every ``FULL_EVERY_S`` in the background
        (which also forgets the scopes no longer listed). A scrape never lists all of history itself, unless it
        comes before the first listing ends: then it waits for that one."""
        if self._since is None:
            await asyncio.shield(self._start_listing(index))
            return
        if time.monotonic() - self._listed_at >= FULL_EVERY_S:
            self._start_listing(index)
        since, self._since = self._since, _iso_ago(LAG_MARGIN_S)
        self._queue(await index.list_scopes(kind="incident", updated_since=since, limit=None))

    def _start_listing(self, index: IndexPort) -> asyncio.Future[None]:
        """The listing of every incident under way, or a new one."""
        if self._listing is None or self._listing.done():
            self._listing = asyncio.ensure_future(self._list_all(index))
            self._listing.add_done_callback(lambda f: f.cancelled() or f.exception())  # a failure: the next scrape
        return self._listing

    async def _list_all(self, index: IndexPort) -> None:
        started, since = time.monotonic(), _iso_ago(LAG_MARGIN_S)
        rows = await index.list_scopes(kind="incident", open_only=False, limit=None)
        listed = {row.id for row in rows}
        for gone in [k for k in self._cache if k not in listed]:
            del self._cache[gone]
        self._queue(rows)
        self._since, self._listed_at = since, started
        self.listings += 1

    def _queue(self, rows: Sequence[ScopeRow]) -> None:
        for row in rows:
            cached = self._cache.get(row.id)
            if cached is None or cached[0] != row.version:
                self._todo[row.id] = None
        if self._todo:
            self._idle.clear()
            self._wake.set()

    async def run(self, store: LogStore, index: IndexPort | None = None) -> None:
        """Count the queued scopes' findings, one log at a time (started with the server, cancelled at its stop);
        with ``index``, it first lists every incident, so that the first scrape need not."""
        if index is not None and self._since is None:
            self._start_listing(index)
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._todo:
                scope = next(iter(self._todo))
                del self._todo[scope]
                try:
                    entries = await store.read(scope)
                except Exception:
                    continue  # a scope that cannot be read now is queued again by the next refresh
                self.reads += 1
                self._cache[scope] = (entries[-1].seq if entries else 0, findings_counts([entries]))
            self._idle.set()

    async def settle(self) -> None:
        """Wait until every queued scope is counted (tests)."""
        await self._idle.wait()

    @property
    def uncounted(self) -> int:
        return len(self._todo)

    def totals(self) -> dict[tuple[str, str, str], int]:
        out: dict[tuple[str, str, str], int] = {}
        for _version, counts in self._cache.values():
            for key, n in counts.items():
                out[key] = out.get(key, 0) + n
        return dict(sorted(out.items()))

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self.NAME, self._help(), labels=self.LABELS)]

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.NAME, self._help(), labels=self.LABELS)
        for key, n in self.totals().items():
            family.add_metric(list(key), n)
        yield family
        yield GaugeMetricFamily(
            "decklog_findings_uncounted_scopes",
            "Incident logs whose findings decklog_findings_total does not count yet (read in the background)",
            value=float(self.uncounted),
        )

    @staticmethod
    def _help() -> str:
        return "Agent findings by reasoner, kind and what people made of them (incident logs)"
