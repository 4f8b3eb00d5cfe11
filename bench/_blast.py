"""The storm's load generator: a storm's bodies, blasted over loopback from a child process, at a served handler.

Shared by ``bench/alerts.py`` (decklog's server) and ``bench/_receivers.py`` (the bounding receivers).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from bench._stats import Sample

TOKEN = "bench-alert-token"
T = TypeVar("T")


@dataclass
class Storm:
    alerts: int
    fingerprints: int
    services: int

    def body(self, k: int) -> bytes:
        f = k % self.fingerprints
        s = f % self.services
        return json.dumps(
            {
                "title": f"svc-{s}: check {f} failing",
                "fingerprint": f"fp-{f}",
                "service": f"svc-{s}",
                "severity": "critical",
                "event_id": f"ev-{k}",
                "summary": f"check {f} of svc-{s} is failing (notification {k})",
                "labels": {"env": "prod", "check": str(f)},
            }
        ).encode()

    def bodies(self) -> list[bytes]:
        return [self.body(k) for k in range(self.alerts)]


@dataclass
class Blast:
    seconds: float
    sent_at: list[float]  # time.time() when each request was sent
    latencies: list[float]  # seconds, per request
    answers: list[Any]
    statuses: list[int] = field(default_factory=list)


def blast_in_process(url: str, storm: Storm, concurrency: int) -> Blast:
    """``blast`` in this (child) process: the load generator never competes with the server for the GIL."""
    return asyncio.run(blast(url, storm.bodies(), concurrency))


async def blast_from_child(url: str, storm: Storm, concurrency: int) -> Blast:
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return await loop.run_in_executor(pool, blast_in_process, url, storm, concurrency)


async def blast(url: str, bodies: list[bytes], concurrency: int) -> Blast:
    """POST every body with ``concurrency`` requests in flight; answers in body order."""
    n = len(bodies)
    sent_at: list[float] = [0.0] * n
    latencies: list[float] = [0.0] * n
    answers: list[Any] = [None] * n
    statuses: list[int] = [0] * n
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    next_index = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker() -> None:
            nonlocal next_index
            while next_index < n:
                i = next_index
                next_index += 1
                sent_at[i] = time.time()
                started = time.perf_counter()
                async with http.post(url, data=bodies[i], headers=headers) as response:
                    statuses[i] = response.status
                    answers[i] = await response.json()
                latencies[i] = time.perf_counter() - started

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return Blast(seconds, sent_at, latencies, answers, statuses)


# -- the baseline: raw aiohttp, a no-op handler ----------------------------------------------------------------


async def baseline(storm: Storm, concurrency: int) -> Sample:
    async def noop(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"ok": True}, status=202)

    result = await blast_handler(noop, storm, concurrency)
    return Sample(storm.alerts, result.seconds, result.latencies)


async def blast_handler(handler: Any, storm: Storm, concurrency: int) -> Blast:
    """Serve ``handler`` as ``POST /alerts/{source}`` on a bare aiohttp app, and blast the storm at it."""
    app = web.Application()
    app.router.add_post("/alerts/{source}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        return await blast_from_child(f"http://127.0.0.1:{port}/alerts/generic", storm, concurrency)
    finally:
        await runner.cleanup()


def in_scratch(name: str, run: Callable[[Path], Coroutine[Any, Any, T]]) -> T:
    """``run`` on a fresh data directory, removed afterwards."""
    data_dir = Path(tempfile.mkdtemp(prefix=f"decklog-bench-{name}-"))
    try:
        return asyncio.run(run(data_dir))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
