"""A small shop of services whose health the test controls, each exporting Prometheus metrics on its own loopback
port (one scrape job per service, so ``up`` is per service), through ``prometheus-client``:

- ``http_requests_total{service,code}`` (200 or 500), ``http_request_duration_seconds{service}`` (a histogram);
- ``app_build_info{service,version}`` = 1 (only the current version);
- ``process_cpu_seconds_total{service}``, ``process_start_time_seconds{service}`` and
  ``process_resident_memory_bytes{service}`` (its ``memory_mb``).

A background tick (about every 0.1 s) adds ``rps`` requests per second that passed, per service, with its ``error_ratio`` of 500s and its
``latency_s``, and its ``cpu`` seconds per second. ``down`` makes its ``/metrics`` answer 503 (Prometheus sets
``up`` to 0). ``restart()`` moves the start time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tests.helpers.monitoring import free_port

TICK_S = 0.1


@dataclass
class Service:
    name: str
    version: str = "v1"
    error_ratio: float = 0.0
    latency_s: float = 0.05
    cpu: float = 0.1
    memory_mb: float = 80.0
    rps: float = 50.0
    down: bool = False
    port: int = 0
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    _carry: float = 0.0
    _errors_carry: float = 0.0

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter("http_requests", "requests", ["service", "code"], registry=r)
        self.duration = Histogram(
            "http_request_duration_seconds",
            "latency",
            ["service"],
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        self.build = Gauge("app_build_info", "build", ["service", "version"], registry=r)
        self.cpu_total = Counter("process_cpu_seconds", "cpu", ["service"], registry=r)
        self.start = Gauge("process_start_time_seconds", "start", ["service"], registry=r)
        self.memory = Gauge("process_resident_memory_bytes", "memory", ["service"], registry=r)
        self.requests.labels(self.name, "200")
        self.requests.labels(self.name, "500")
        self.build.labels(self.name, self.version).set(1)
        self.start.labels(self.name).set(time.time())

    def deploy(self, version: str) -> None:
        self.build.remove(self.name, self.version)
        self.version = version
        self.build.labels(self.name, version).set(1)

    def restart(self) -> None:
        self.start.labels(self.name).set(time.time())

    def tick(self, elapsed: float) -> None:
        n = self.rps * elapsed + self._carry
        whole = int(n)
        self._carry = n - whole
        errors_f = whole * self.error_ratio + self._errors_carry
        errors = min(whole, int(errors_f))
        self._errors_carry = errors_f - errors
        if whole - errors:
            self.requests.labels(self.name, "200").inc(whole - errors)
        if errors:
            self.requests.labels(self.name, "500").inc(errors)
        for _ in range(min(whole, 10)):
            self.duration.labels(self.name).observe(self.latency_s)
        self.cpu_total.labels(self.name).inc(self.cpu * elapsed)
        self.memory.labels(self.name).set(self.memory_mb * 1e6)


class Shop:
    """``async with Shop(["web", "api", "db"]) as shop``: every service served on its own port."""

    def __init__(self, names: list[str]) -> None:
        self.services = {n: Service(n) for n in names}
        self._runners: list[web.AppRunner] = []
        self._task: asyncio.Task[None] | None = None

    def __getitem__(self, name: str) -> Service:
        return self.services[name]

    def scrape_configs(self) -> list[dict[str, Any]]:
        return [
            {"job_name": s.name, "static_configs": [{"targets": [f"127.0.0.1:{s.port}"]}]}
            for s in self.services.values()
        ]

    async def __aenter__(self) -> Shop:
        for svc in self.services.values():
            app = web.Application()
            app.router.add_get("/metrics", self._handler(svc))
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            svc.port = free_port()
            await web.TCPSite(runner, "127.0.0.1", svc.port).start()
            self._runners.append(runner)
        self._task = asyncio.ensure_future(self._ticks())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for runner in self._runners:
            await runner.cleanup()

    @staticmethod
    def _handler(svc: Service) -> Any:
        async def metrics(_request: web.Request) -> web.Response:
            if svc.down:
                return web.Response(status=503, text="down")
            body = generate_latest(svc.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        return metrics

    async def _ticks(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            for svc in self.services.values():
                if not svc.down:
                    svc.tick(now - last)  # by the time that passed: a loaded loop ticks late, not slower
            last = now
