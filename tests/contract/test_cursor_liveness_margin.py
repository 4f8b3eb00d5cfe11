"""The margins of the liveness lease (decision 176): a holder starts deliveries only within ``GRACE_S - MARGIN_S``
of its last confirmed ping, stops as soon as a ping fails, and its last possible start comes at least
``MARGIN_S`` before another replica may take its cursor over.

Each drainer's liveness lock lives on its own PostgreSQL session (core/store/postgres/liveness.py); a taker that
finds it free cuts the holder's cursor lease to ``GRACE_S`` on the database clock and takes it once that ran out.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import psycopg
import pytest

from decklog.core.entries import Entry
from decklog.core.outbox import dispatcher as dispatching
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.store.postgres import liveness as live
from decklog.core.store.postgres.liveness import GRACE_S, MARGIN_S, Liveness
from decklog.core.store.postgres.log_store import PostgresLogStore
from tests.conftest import eventually
from tests.store_contract import SCOPE, declare, message

TOPICS = ("index", "slack")


class Recording:
    name = "slack"
    batch_size = 8

    def __init__(self) -> None:
        self.seqs: list[int] = []

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        self.seqs.extend(e.seq for e in entries)


class PingGate:
    """Stops the liveness thread inside its next ping (a ping thread the machine does not schedule, or a ping
    that hangs on a partition) until ``open``; ``refuse`` makes a new connection fail (the server out of reach)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.closed = threading.Event()
        self.opened = threading.Event()
        self.opened.set()
        self.waiting = threading.Event()
        self.refusing = False
        real = Liveness._ping

        def ping(liveness: Liveness) -> None:
            if self.closed.is_set():
                self.waiting.set()
                self.opened.wait(60)
            if self.refusing and (liveness._conn is None or liveness._conn.closed):
                raise psycopg.OperationalError("the server is out of reach (test)")
            real(liveness)

        monkeypatch.setattr(Liveness, "_ping", ping)

    def close(self) -> None:
        self.opened.clear()
        self.closed.set()

    def open(self) -> None:
        self.closed.clear()
        self.opened.set()


async def test_a_holder_whose_last_ping_is_older_than_its_window_starts_no_delivery(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = PingGate(monkeypatch)
    holder = PostgresLogStore(pg_url, topics=TOPICS)
    sender = Recording()
    dispatcher = Dispatcher(holder, [sender], cursors=holder)
    try:
        dispatcher.start()
        await declare(holder)
        await eventually(
            lambda: sender.seqs == [1], timeout=30, what="nothing was delivered while the pings were confirmed"
        )
        liveness = holder._liveness
        assert liveness is not None

        gate.close()  # no ping is confirmed from now on
        await eventually(gate.waiting.is_set, timeout=30, what="the liveness thread never pinged again")
        last = liveness._confirmed_at  # the send time of the last ping the server answered
        await eventually(lambda: time.monotonic() > last + GRACE_S - MARGIN_S, timeout=30, what="the clock stood still")
        lapsed = dispatcher.leases_lapsed
        await holder.append(SCOPE, [message("after the window of the last ping")])
        await eventually(
            lambda: dispatcher.leases_lapsed > lapsed, timeout=30, what="the holder neither delivered nor stopped"
        )
        assert sender.seqs == [1], "a delivery started after the run window of the last confirmed ping"

        gate.open()  # its pings are answered again: it takes the cursor again and delivers
        await eventually(
            lambda: sender.seqs == [1, 2], timeout=30, what="the holder never resumed once its pings were confirmed"
        )
    finally:
        gate.open()
        await dispatcher.stop()
        await holder.close()


async def test_a_holder_whose_ping_fails_stops_at_once(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its last confirmed ping's window and its cursor lease are far longer than the test: only the failed ping
    can stop it."""
    monkeypatch.setattr(live, "GRACE_S", 600.0)
    monkeypatch.setattr(dispatching, "CURSOR_LEASE_S", 600.0)
    gate = PingGate(monkeypatch)
    holder = PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(holder)
        dispatcher = Dispatcher(holder, [], cursors=holder)
        liveness = holder._liveness
        assert liveness is not None
        await eventually(
            lambda: holder.alive_until(time.monotonic()) > time.monotonic(), timeout=30, what="no liveness lock"
        )
        asked = time.monotonic()
        assert await holder.take_cursor(SCOPE, "slack", dispatcher.owner, lease_s=600) is not None
        dispatcher._leased(SCOPE, "slack", asked)
        await eventually(
            lambda: dispatcher.holds(SCOPE, "slack"), timeout=30, what="the holder never confirmed its liveness"
        )

        gate.refusing = True  # once its session is gone, it cannot get another
        conn = liveness._conn
        assert conn is not None
        with psycopg.connect(pg_url, autocommit=True) as c:  # the server ends its session; the process lives on
            c.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        await eventually(
            lambda: not dispatcher.holds(SCOPE, "slack"), timeout=30, what="the holder went on after its ping failed"
        )
    finally:
        gate.open()
        await holder.close()


async def test_the_holders_last_start_comes_a_margin_before_the_takers_first(pg_url: str) -> None:
    holder, other = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(holder)
        owner = holder.hold_liveness("r1")
        await eventually(
            lambda: holder.alive_until(time.monotonic()) > time.monotonic(), timeout=30, what="no liveness lock"
        )
        asked = time.monotonic()
        assert await holder.take_cursor(SCOPE, "slack", owner, lease_s=60) is not None
        liveness = holder._liveness
        assert liveness is not None
        await asyncio.to_thread(liveness.close)  # its process ends
        last_start = holder.alive_until(asked)  # no delivery of the holder starts after this (its own clock)

        async def taken() -> bool:
            await other.fence_dead_holders()
            return await other.take_cursor(SCOPE, "slack", "live:r2", lease_s=60) is not None

        await eventually(taken, timeout=30, what="the dead holder's cursor never moved")
        assert time.monotonic() >= last_start + MARGIN_S, "taken over while a delivery of the holder could start"
    finally:
        await holder.close()
        await other.close()
