"""The alert inbox (``core.store.ports.AlertInbox``) on every backend: a notification stored before its 202 is
pending until routed, its receipt then holds the outcomes (or the error it was given up with), and it is never
pending again. On PostgreSQL, a replica that died after its 202s (its lease ran out) has its notifications routed
by another replica's ``AlertIntake``, with one incident per alert group and every receipt complete."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from decklog.core.alerts import AlertPolicy, AlertRouter
from decklog.core.alerts.intake import AlertIntake
from decklog.core.service import ScopeService
from decklog.core.signals import AlertSignal
from decklog.core.store.memory.factory import MemoryFactory
from decklog.core.store.memory.log_store import MemoryStorage
from decklog.core.store.ports import AlertReceipt, StorageFactory
from decklog.core.store.postgres.alert_inbox import PostgresAlertInbox
from decklog.core.store.sqlite.factory import SqliteFactory
from tests.conftest import eventually


async def test_a_stored_notification_is_pending_until_finished_and_its_receipt_keeps_the_outcomes(
    backend_factory: Callable[[], StorageFactory],
) -> None:
    factory = backend_factory()
    store = await factory.log_store()
    inbox = await factory.alert_inbox()
    try:
        await inbox.put(receipt="r1", source="generic", body=b'{"title": "x"}', accepted=1)
        await inbox.put(receipt="r2", source="alertmanager", body=b"\x00raw bytes\xff", accepted=3)
        pending = await inbox.pending()
        assert [(p.receipt, p.source, p.body, p.accepted) for p in pending] == [
            ("r1", "generic", b'{"title": "x"}', 1),
            ("r2", "alertmanager", b"\x00raw bytes\xff", 3),
        ]
        assert await inbox.pending_count() == 2
        waiting = await inbox.receipt("r1")
        assert waiting is not None and waiting.outcomes is None and waiting.error is None and waiting.accepted == 1

        await inbox.attempt(["r2"])
        assert [p.attempts for p in await inbox.pending() if p.receipt == "r2"] == [1]
        outcome = {"fingerprint": "fp", "outcome": "new", "scope": "incident/x", "seq": 2}
        await inbox.finish([AlertReceipt("r1", "generic", 1, 0.0, outcomes=[outcome])])
        await inbox.finish([AlertReceipt("r2", "alertmanager", 3, 0.0, error="routing failed 3 times: boom")])
        assert await inbox.pending() == [] and await inbox.pending_count() == 0

        routed = await inbox.receipt("r1")
        assert routed is not None and routed.outcomes == [outcome] and routed.routed_at is not None
        failed = await inbox.receipt("r2")
        assert failed is not None and failed.outcomes is None and failed.error == "routing failed 3 times: boom"
        assert await inbox.receipt("never-issued") is None

        await inbox.finish([AlertReceipt("r1", "generic", 1, 0.0, outcomes=[])])  # a second finish changes nothing
        again = await inbox.receipt("r1")
        assert again is not None and again.outcomes == [outcome]
        assert await inbox.prune(older_than_s=3600) == 0  # routed just now: kept
        assert await inbox.prune(older_than_s=-1) == 2 and await inbox.receipt("r1") is None
    finally:
        await inbox.close()
        await store.close()


def signal(n: int, group: str, notification: str) -> AlertSignal:
    return AlertSignal(
        source="alertmanager",
        fingerprint=f"fp-{n}",
        status="firing",
        title=f"alert {n}",
        service="payments",
        source_severity="critical",
        group=group,
        event_id=f"{notification}/{n}",  # each notification is new (not a vendor's retry of one)
    )


async def parse(source: str, body: bytes) -> tuple[list[AlertSignal], dict[str, Any]]:
    """Stored bodies here are ``group:n,n,…``: the signals again."""
    group, _, numbers = body.decode().partition(":")
    return [signal(int(n), group, body.decode()) for n in numbers.split(",")], {}


async def test_a_dead_replicas_notifications_are_routed_by_another_once_its_lease_runs_out(pg_url: str) -> None:
    from decklog.core.store.postgres.factory import PostgresFactory

    factory = PostgresFactory(pg_url)
    store = await factory.log_store()
    index = await factory.index()
    policy = AlertPolicy.build(grouping_window_minutes=0)
    router = AlertRouter(store, index, ScopeService(store, index), store.clock, policy, locks=factory.route_locks())
    dead = PostgresAlertInbox(store.engine, store.executor, owner="dead", lease_s=0.5)
    alive = PostgresAlertInbox(store.engine, store.executor, owner="alive", lease_s=30)
    try:
        receipts = []
        for k in range(4):  # acknowledged by the replica that then died: stored, never routed there
            numbers = ",".join(str(10 * k + j) for j in range(3))
            receipts.append(f"dead-{k}")
            await dead.put(receipt=f"dead-{k}", source="alertmanager", body=f"g{k % 2}:{numbers}".encode(), accepted=3)
        intake = AlertIntake(alive, router, parse)
        assert await intake.replay() == 0  # still the dead replica's: its lease has not run out
        running = asyncio.ensure_future(intake.run())
        try:

            async def complete() -> list[AlertReceipt]:
                got = [await alive.receipt(r) for r in receipts]
                return [r for r in got if r is not None and r.outcomes is not None]

            async def taken() -> bool:
                await intake.replay()
                return len(await complete()) == len(receipts)

            await eventually(taken, timeout=20, what="the dead replica's notifications routed")
        finally:
            running.cancel()
        routed = await complete()
        scopes = {o["scope"] for r in routed for o in r.outcomes or []}
        assert len(scopes) == 2  # one incident per alert group, whichever notification came first
        assert all(o["seq"] for r in routed for o in r.outcomes or []) and alive.taken_over == 4
        assert await dead.pending_count() == 0
        logged = [e for s in scopes for e in await store.read(s, kinds=("observation",))]
        assert sorted(e.payload.fingerprint for e in logged) == sorted(
            f"fp-{10 * k + j}" for k in range(4) for j in range(3)
        )
    finally:
        await store.close()
        await factory.close()


@pytest.mark.parametrize("backend", ["sqlite", "memory"])
async def test_what_a_crash_left_stored_is_routed_at_the_next_start(tmp_path: Path, backend: str) -> None:
    """A process stores notifications (its 202s) and dies before routing them; the next one (on the same data)
    replays them first. (On PostgreSQL a restart is a new replica: the dead one's lease runs out first, above.)"""
    storage = MemoryStorage()

    def backend_factory() -> StorageFactory:
        return SqliteFactory(tmp_path) if backend == "sqlite" else MemoryFactory(storage)

    first = backend_factory()
    store = await first.log_store()
    inbox = await first.alert_inbox()
    await inbox.put(receipt="a", source="alertmanager", body=b"g:1,2", accepted=2)
    await inbox.put(receipt="b", source="alertmanager", body=b"g:2,3", accepted=2)
    await inbox.close()
    await store.close()
    await first.close()

    second = backend_factory()
    store = await second.log_store()
    index = await second.index()
    inbox = await second.alert_inbox()
    try:
        router = AlertRouter(store, index, ScopeService(store, index), store.clock, AlertPolicy.build())
        intake = AlertIntake(inbox, router, parse)
        assert await intake.replay() == 2
        while intake.waiting:
            await intake.route_round()
        a, b = await inbox.receipt("a"), await inbox.receipt("b")
        assert a is not None and a.outcomes is not None and [o["outcome"] for o in a.outcomes] == ["new", "joined"]
        assert b is not None and b.outcomes is not None and [o["outcome"] for o in b.outcomes] == ["repeat", "joined"]
        assert {o["scope"] for o in a.outcomes + b.outcomes} == {a.outcomes[0]["scope"]}
        assert await inbox.pending_count() == 0
    finally:
        await inbox.close()
        await index.close()
        await store.close()
        await second.close()
