"""Many replicas, one database: alert routing is consistent across processes. Two replicas (each its own store,
index, service and router, on one PostgreSQL database) get the same fingerprints at once and open one incident per
fingerprint, because the routing locks are PostgreSQL advisory locks (core/store/postgres_locks.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
import pytest

from core.alarm import AsyncioAlarm
from core.alerts import AlertPolicy, AlertRouter
from core.index_postgres import PostgresIndex
from core.index_sender import IndexSender
from core.outbox import Dispatcher
from core.service import ScopeService
from core.signals import AlertSignal
from core.store.postgres import PostgresLogStore
from core.store.postgres_locks import AdvisoryLocks, libpq_url, lock_id


@dataclass
class Replica:
    store: PostgresLogStore
    dispatcher: Dispatcher
    router: AlertRouter


@pytest.fixture
async def replicas(pg_url: str) -> AsyncIterator[list[Replica]]:
    made: list[Replica] = []
    for _ in range(2):
        store = PostgresLogStore(pg_url, topics=("index",))
        await store.open()
        index = PostgresIndex(store.engine, store.executor)
        await index.open()
        dispatcher = Dispatcher(store, [IndexSender(index, store)], alarm=AsyncioAlarm())
        dispatcher.start()
        service = ScopeService(store, index)
        router = AlertRouter(store, index, service, store.clock, AlertPolicy.build(), locks=store.route_locks())
        made.append(Replica(store, dispatcher, router))
    yield made
    for r in made:
        await r.dispatcher.stop()
        await r.store.close()


def signal(fingerprint: str, event_id: str) -> AlertSignal:
    return AlertSignal(
        source="alertmanager",
        fingerprint=fingerprint,
        status="firing",
        title=f"{fingerprint}: elevated 5xx",
        service=f"svc-{fingerprint}",
        source_severity="critical",
        event_id=event_id,
    )


@pytest.mark.parametrize("same_notification", [True, False], ids=["one-notification", "two-notifications"])
async def test_the_same_fingerprint_on_two_replicas_at_once_opens_one_incident(
    replicas: list[Replica], same_notification: bool
) -> None:
    fingerprints = [f"fp{n:02d}" for n in range(24)]

    async def send(r: int, fp: str) -> list[object]:
        event = "ev" if same_notification else f"ev-from-{r}"  # an HA pair of alert managers: two notifications
        return list(await replicas[r].router.receive("alertmanager", [signal(fp, event)]))

    outcomes = await asyncio.gather(*(send(r, fp) for fp in fingerprints for r in (0, 1)))
    by_fp: dict[str, Counter[str]] = {}
    scopes: dict[str, set[str]] = {}
    for (o,) in outcomes:
        by_fp.setdefault(o.fingerprint, Counter())[o.outcome] += 1  # type: ignore[attr-defined]
        scopes.setdefault(o.fingerprint, set()).add(o.scope)  # type: ignore[attr-defined]
    second = "duplicate" if same_notification else "repeat"
    assert all(c == Counter({"new": 1, second: 1}) for c in by_fp.values()), by_fp
    assert all(len(s) == 1 for s in scopes.values()), scopes
    incidents = [s for s in await replicas[0].store.scope_ids() if s.kind == "incident"]
    assert len(incidents) == len(fingerprints)  # one incident per fingerprint, not one per replica


async def test_advisory_locks_exclude_another_process_and_die_with_its_connection(pg_url: str) -> None:
    a, b = AdvisoryLocks(pg_url), AdvisoryLocks(pg_url)
    order: list[str] = []
    try:
        async with a.hold("fp:x", "svc:s"):
            waiter = asyncio.create_task(_hold(b, order, "fp:x"))
            while not b.waits:  # b tried and found the key held
                await asyncio.sleep(0.005)
            order.append("a")
        await waiter
        assert order == ["a", "b"]
        async with b.hold("svc:t"), a.hold("svc:u"):  # disjoint keys do not wait
            pass
        # a replica that dies holds nothing: its session is gone
        dead = await psycopg.AsyncConnection.connect(libpq_url(pg_url), autocommit=True)
        await dead.execute("SELECT pg_advisory_lock(%s)", (lock_id("fp:y"),))
        held = asyncio.create_task(_hold(a, order, "fp:y"))
        while not a.waits:
            await asyncio.sleep(0.005)
        await dead.close()
        await held
        assert order[-1] == "b"
    finally:
        await a.close()
        await b.close()


async def _hold(locks: AdvisoryLocks, order: list[str], key: str) -> None:
    async with locks.hold(key):
        order.append("b")
