"""What bounds the storm's ratio, measured in the same run as decklog (bench/alerts.py).

- ``store_baseline``, the floor: ``LogStore.append`` of one alert observation per alert (the same topics, so the same
  outbox rows), no HTTP, no routing, no dispatcher: what the storage alone costs on this machine.
- ``persist_baseline``, the ceiling: an aiohttp handler that parses the alert, appends its observation with the
  floor's append and answers its scope and seq, with no routing, dedup, index or dispatch. Any receiver that answers
  each alert's outcome after it is durable (the contract) does at least this.
- ``coalesce_baseline``: the same handler, but requests bound for one incident while its append is in flight wait
  and go together in the next append (many entries, one call). It tests whether merging requests above the store
  beats the ceiling; the store already shares one commit among a file's concurrent appends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from bench._blast import Storm, blast_handler
from bench._stats import Sample
from decklog.bot.runtime import OUTBOX_TOPICS, TOPIC_KINDS
from decklog.core.entries import Actor, NewEntry
from decklog.core.store.sqlite.log_store import SqliteLogStore

ACTOR = Actor.system("generic")
#: (scope, entry) → the entry's seq once it is durable
Record = Callable[[str, NewEntry], Awaitable[int]]


async def opened_store(storm: Storm, data_dir: Path) -> SqliteLogStore:
    """A store with the storm's incidents declared (one per service)."""
    store = SqliteLogStore(data_dir, topics=OUTBOX_TOPICS, topic_kinds=TOPIC_KINDS)
    for s in range(storm.services):
        await store.append(f"incident/svc-{s}", [NewEntry.make("declared", ACTOR, {"title": f"svc-{s}"})], create=True)
    return store


def observation(alert: dict[str, Any]) -> tuple[str, NewEntry]:
    """The generic alert's incident and its observation (what the floor appends)."""
    payload = {"text": alert["summary"], "fingerprint": alert["fingerprint"], "alert_status": "firing"}
    entry = NewEntry.make(
        "observation", ACTOR, payload | {"service": alert["service"]}, idempotency_key=alert["event_id"]
    )
    return f"incident/{alert['service']}", entry


async def store_baseline(storm: Storm, concurrency: int, data_dir: Path) -> Sample:
    store = await opened_store(storm, data_dir)
    alerts = [json.loads(body) for body in storm.bodies()]  # parsed before the clock starts: storage alone
    pending = iter(alerts)
    latencies: list[float] = []

    async def worker() -> None:
        for alert in pending:
            scope, entry = observation(alert)
            started = time.perf_counter()
            await store.append(scope, [entry])
            latencies.append(time.perf_counter() - started)

    started, cpu = time.perf_counter(), time.process_time()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        cpu = time.process_time() - cpu
    finally:
        await store.close()
    return Sample(storm.alerts, time.perf_counter() - started, latencies, cpu_seconds=cpu)


async def serve_receiver(storm: Storm, concurrency: int, store: SqliteLogStore, record: Record) -> Sample:
    """Blast the storm at a handler that parses each alert, ``record``s its observation and answers its seq."""

    async def receive(request: web.Request) -> web.Response:
        alert = json.loads(await request.read())
        scope, entry = observation(alert)
        seq = await record(scope, entry)
        answer = {"fingerprint": alert["fingerprint"], "status": "firing", "scope": scope, "seq": seq}
        return web.json_response({"source": "generic", "received": 1, "recorded": 1, "alerts": [answer]}, status=202)

    cpu = time.process_time()
    try:
        result = await blast_handler(receive, storm, concurrency)
        cpu = time.process_time() - cpu
    finally:
        await store.close()
    if any(status != 202 for status in result.statuses):
        raise RuntimeError(f"a bounding receiver answered {sorted(set(result.statuses))}")
    return Sample(storm.alerts, result.seconds, result.latencies, cpu_seconds=cpu)


async def persist_baseline(storm: Storm, concurrency: int, data_dir: Path) -> Sample:
    store = await opened_store(storm, data_dir)

    async def record(scope: str, entry: NewEntry) -> int:
        return (await store.append(scope, [entry])).last_seq

    return await serve_receiver(storm, concurrency, store, record)


class Coalescer:
    """Per incident: entries that arrive while its append is in flight go together in the next one."""

    def __init__(self, store: SqliteLogStore) -> None:
        self.store = store
        self.waiting: dict[str, list[tuple[NewEntry, asyncio.Future[int]]]] = {}
        self.drains: set[asyncio.Task[None]] = set()  # referenced until done
        self.appends = 0
        self.entries = 0

    async def record(self, scope: str, entry: NewEntry) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        queue = self.waiting.get(scope)
        if queue is None:
            self.waiting[scope] = [(entry, future)]
            drain = asyncio.ensure_future(self._drain(scope))
            self.drains.add(drain)
            drain.add_done_callback(self.drains.discard)
        else:
            queue.append((entry, future))
        return await future

    async def _drain(self, scope: str) -> None:
        await asyncio.sleep(0)  # the requests parsed in this loop turn join the first append
        while batch := self.waiting.get(scope):
            self.waiting[scope] = []
            self.appends += 1
            self.entries += len(batch)
            try:
                result = await self.store.append(scope, [entry for entry, _ in batch])
            except Exception as exc:  # every waiter hears it
                for _, future in batch:
                    future.set_exception(exc)
                continue
            for (_, future), stored in zip(batch, result.entries, strict=True):
                future.set_result(stored.seq)
        del self.waiting[scope]


async def coalesce_baseline(storm: Storm, concurrency: int, data_dir: Path) -> tuple[Sample, float]:
    """The coalescing receiver's sample, and its mean entries per append."""
    coalescer = Coalescer(await opened_store(storm, data_dir))
    sample = await serve_receiver(storm, concurrency, coalescer.store, coalescer.record)
    return sample, coalescer.entries / max(coalescer.appends, 1)
