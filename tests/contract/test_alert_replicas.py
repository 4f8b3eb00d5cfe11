"""Many replicas, one database: alert routing is consistent across processes. Two replicas (each its own store,
index, service and router, on one PostgreSQL database) get the same fingerprints at once and open one incident per
fingerprint, because the routing locks are PostgreSQL advisory locks (core/store/postgres/locks.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import psycopg
import pytest

from decklog.core.alarm import AsyncioAlarm
from decklog.core.alerts import AlertPolicy, AlertRouter
from decklog.core.index.sender import IndexSender
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.service import ScopeService
from decklog.core.signals import AlertSignal
from decklog.core.store.postgres.index import PostgresIndex
from decklog.core.store.postgres.locks import AdvisoryLocks, libpq_url, lock_id
from decklog.core.store.postgres.log_store import PostgresLogStore
from decklog.core.store.postgres.rates import PostgresRateCounter


@dataclass
class Replica:
    store: PostgresLogStore
    dispatcher: Dispatcher
    router: AlertRouter


@asynccontextmanager
async def open_replicas(pg_url: str, policy: AlertPolicy, *, shared_rate: bool = False) -> AsyncIterator[list[Replica]]:
    """Two replicas, each its own store, index, dispatcher (index sender) and router, on one database."""
    made: list[Replica] = []
    locks: list[AdvisoryLocks] = []
    try:
        for _ in range(2):
            store = PostgresLogStore(pg_url, topics=("index",))
            await store.open()
            index = PostgresIndex(store.engine, store.executor)
            await index.open()
            dispatcher = Dispatcher(store, [IndexSender(index, store)], alarm=AsyncioAlarm(), cursors=store)
            dispatcher.start()
            service = ScopeService(store, index)
            rates = PostgresRateCounter(store) if shared_rate else None
            locks.append(AdvisoryLocks(pg_url))
            router = AlertRouter(store, index, service, store.clock, policy, locks=locks[-1], rates=rates)
            made.append(Replica(store, dispatcher, router))
        yield made
    finally:
        for r in made:
            await r.dispatcher.stop()
            await r.store.close()
        for held in locks:
            await held.close()


@pytest.fixture
async def replicas(pg_url: str) -> AsyncIterator[list[Replica]]:
    async with open_replicas(pg_url, AlertPolicy.build()) as made:
        yield made


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


@pytest.mark.parametrize("shared_rate", [True, False], ids=["counted-across-replicas", "per-replica"])
async def test_the_rate_limit_counts_the_alerts_of_every_replica(pg_url: str, shared_rate: bool) -> None:
    """Five alerts a minute, twelve new fingerprints on twelve services, alternating between two replicas behind a
    load balancer: the sixth alert, on whichever replica, is over the limit and opens the alert-storm incident, and
    the rest join it. Each replica counting alone lets ten through before its own count reaches five."""
    policy = AlertPolicy.build(rate_limit_per_minute=5)
    async with open_replicas(pg_url, policy, shared_rate=shared_rate) as replicas:
        outcomes = []
        for n in range(12):
            r = replicas[n % 2]
            [outcome] = await r.router.receive("alertmanager", [signal(f"rate{n:02d}", f"ev-{n}")])
            outcomes.append(outcome)
            await asyncio.gather(*(x.dispatcher.idle() for x in replicas))  # each sees the other's incidents
        opened = sum(1 for o in outcomes if o.outcome == "new" and not o.storm)
        storms = {o.scope for o in outcomes if o.storm}
        if shared_rate:
            assert opened == 5 and len(storms) == 1
            assert all(o.storm for o in outcomes[5:])
            state = await replicas[0].store.get_state(next(iter(storms)))
            assert state.title == "Alert storm: more than 5 alertmanager alerts a minute"
        else:
            assert opened == 10  # what the counter across replicas is for


async def test_a_storm_arriving_on_two_replicas_at_once_opens_one_storm_incident(pg_url: str) -> None:
    """Over the limit, twenty new alerts at once, alternating between the replicas: the storm lock is an advisory
    lock, and the storm incident is claimed in the shared index before it is released, so the other replica joins
    it before its index sender has seen the declaration."""
    async with open_replicas(pg_url, AlertPolicy.build(rate_limit_per_minute=3), shared_rate=True) as replicas:
        for n in range(3):
            await replicas[n % 2].router.receive("alertmanager", [signal(f"pre{n}", f"pre-{n}")])
        sent = [replicas[n % 2].router.receive("alertmanager", [signal(f"storm{n:02d}", f"ev-{n}")]) for n in range(20)]
        outcomes = [o for (o,) in await asyncio.gather(*sent)]
        assert all(o.storm for o in outcomes)
        assert len({o.scope for o in outcomes}) == 1
        assert sorted(o.outcome for o in outcomes) == ["joined"] * 19 + ["new"]


async def test_a_rate_counter_sums_the_window_across_replicas_and_forgets_older_buckets(pg_url: str) -> None:
    stores = [PostgresLogStore(pg_url, topics=("index",)) for _ in range(2)]
    for store in stores:
        await store.open()
    try:
        a, b = (PostgresRateCounter(store, prune_every=0) for store in stores)  # every count prunes
        assert await a.count("grafana", 3, window=60) == 3
        assert await b.count("grafana", 2, window=60) == 5  # the other replica's three are counted
        assert await b.count("datadog", 1, window=60) == 1  # per source
        with psycopg.connect(pg_url, autocommit=True) as conn:  # a storm two and a half minutes ago
            conn.execute(
                "INSERT INTO alert_rates (source, bucket, count) "
                "VALUES ('grafana', floor(extract(epoch FROM clock_timestamp()) / 5)::bigint - 30, 1000)"
            )
        assert await a.count("grafana", 1, window=60) == 6  # outside the window: not counted
        with psycopg.connect(pg_url, autocommit=True) as conn:
            [(rows,)] = conn.execute("SELECT count(*) FROM alert_rates WHERE count = 1000").fetchall()
        assert rows == 0  # and pruned: older than two windows
    finally:
        for store in stores:
            await store.close()


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
