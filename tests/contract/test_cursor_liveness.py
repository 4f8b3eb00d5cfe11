"""A dead replica's cursors move within seconds, and the fence stays as safe as the lease (liveness locks).

Each drainer holds a session-level advisory lock (core/store/postgres/liveness.py) that PostgreSQL frees the
moment its connection ends. A replica that finds a holder's lock free cuts that holder's lease to a short grace
instead of waiting out the whole lease; the holder, for its part, starts nothing once its own session has not
been confirmed for that grace, so it has stopped before anyone takes over. A holder that does not announce a
liveness lock (an older version) keeps the plain lease.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import psycopg

from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.liveness import GRACE_S, LIVE_PREFIX, holder_lock
from decklog.core.store.postgres.log_store import PostgresLogStore
from tests.store_contract import SCOPE, declare

TOPICS = ("index", "slack")


async def _until(check: Callable[[], Awaitable[bool] | bool], what: str, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = check()
        if isinstance(got, Awaitable):
            got = await got
        if got:
            return
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.02)


def _lease_left(url: str, owner: str) -> float:
    """Seconds left of the slack cursor's lease, on the database clock."""
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(
            f"SELECT extract(epoch FROM lease_until - clock_timestamp()) FROM {pg.outbox_cursors.name}"
            " WHERE scope_id = %s AND topic = 'slack' AND owner = %s",
            (SCOPE, owner),
        ).fetchone()
    assert row is not None
    return float(row[0])


def _end_liveness_session(url: str, owner: str) -> int:
    """What the server does when the holder's process dies: its liveness session ends (and its locks with it).
    Only the session that holds ``owner``'s lock: other tests and replicas on the same server keep theirs."""
    key = holder_lock(owner)
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND objsubid = 1 AND classid = %s::bigint::oid AND objid = %s::bigint::oid",
            ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
        ).fetchall()
    return len(rows)


async def test_a_dead_holders_cursor_moves_after_the_grace_and_the_holder_has_stopped_before(pg_url: str) -> None:
    holder, other = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(holder)
        dispatcher = Dispatcher(holder, [], cursors=holder)
        owner = dispatcher.owner
        assert owner.startswith(LIVE_PREFIX)
        await _until(lambda: holder.alive_until(time.monotonic()) > time.monotonic(), "no liveness lock")
        asked = time.monotonic()
        assert await holder.take_cursor(SCOPE, "slack", owner, lease_s=60) is not None
        dispatcher._leased(SCOPE, "slack", asked)
        await _until(lambda: dispatcher.holds(SCOPE, "slack"), "the holder never confirmed its liveness")

        # alive: nobody cuts its lease, however often they look
        assert await other.take_cursor(SCOPE, "slack", "live:r2", lease_s=60) is None
        assert await other.fence_dead_holders() == []
        assert _lease_left(pg_url, owner) > 50

        liveness = holder._liveness
        assert liveness is not None
        assert _end_liveness_session(pg_url, owner) == 1  # its connection dropped, the process lives on
        # the holder: its session is no longer confirmed, so it starts nothing (before anyone may take over)
        await _until(lambda: not dispatcher.holds(SCOPE, "slack"), "the holder went on without its liveness")
        # ... and once it has a session again, the lease it asked for before is still over (it may have been cut
        # while the lock was gone): it takes the cursor again before it delivers
        await _until(lambda: liveness.reconnects >= 2, "the liveness lock was never taken again")
        await _until(lambda: holder.alive_until(time.monotonic()) > time.monotonic(), "no new session confirmed")
        assert not dispatcher.holds(SCOPE, "slack")
        assert await other.fence_dead_holders() == []  # alive again: nothing is cut

        await asyncio.to_thread(liveness.close)  # now its process ends

        # the others: its lease is cut to the grace, not taken at once
        found = await other.fence_dead_holders()
        assert [(s, t) for s, t, _left in found] == [(SCOPE, "slack")]
        assert all(left <= GRACE_S for _s, _t, left in found)
        assert _lease_left(pg_url, owner) <= GRACE_S
        claims = []

        async def taken() -> bool:
            claim = await other.take_cursor(SCOPE, "slack", "live:r2", lease_s=60)
            if claim is None:
                assert _lease_left(pg_url, owner) <= GRACE_S  # still the dead holder's, for the grace only
                return False
            claims.append(claim)
            return True

        await _until(taken, "the dead holder's cursor never moved")
        assert claims[0].died and claims[0].previous == owner  # the sender reconciles before it posts again
    finally:
        await holder.close()
        await other.close()


async def test_a_holder_without_a_liveness_lock_keeps_its_whole_lease(pg_url: str) -> None:
    old, other = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(old)
        assert await old.take_cursor(SCOPE, "slack", "host:1:abc", lease_s=60) is not None  # an older replica
        assert await other.take_cursor(SCOPE, "slack", "live:r2", lease_s=60) is None
        assert await other.fence_dead_holders() == []
        assert _lease_left(pg_url, "host:1:abc") > 50
    finally:
        await old.close()
        await other.close()


async def test_a_take_that_finds_the_holder_dead_cuts_the_lease_to_the_grace(pg_url: str) -> None:
    holder, other = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(holder)
        owner = holder.hold_liveness("r1")
        await _until(lambda: holder.alive_until(time.monotonic()) > time.monotonic(), "no liveness lock")
        assert await holder.take_cursor(SCOPE, "slack", owner, lease_s=60) is not None
        await asyncio.to_thread(holder._liveness.close)  # type: ignore[union-attr]  # its process ends
        claim = await other.take_cursor(SCOPE, "slack", "live:r2", lease_s=60)
        if claim is None:
            assert _lease_left(pg_url, owner) <= GRACE_S  # cut from 60 s by the take that found it dead
        else:  # the grace had already run out (a slow machine): taken as from a dead holder
            assert claim.died and claim.previous == owner
    finally:
        await holder.close()
        await other.close()
